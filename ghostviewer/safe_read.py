"""Reading files that someone else may have made: regular files only (a FIFO or a device never blocks a reader),
a size cap checked before anything is read, JSON nested no deeper than Python can decode — each refused in one line,
with the caller's own error class (a SourceError for a pipeline folder, a RecordError for a record, …)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 64 * 1024**2  # a config, an index or a manifest; none of ours is near this

ErrorType = Callable[[str], Exception]


def read_regular(path: str | Path, error: ErrorType, *, max_bytes: int, what: str = "") -> bytes:
    """The bytes of a regular file of at most max_bytes; error(...) for a missing, special or larger file."""
    path = Path(path)
    name = what or path.name
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise error(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{name} is not a regular file")
        if info.st_size > max_bytes:
            raise error(f"{name} is {info.st_size:,} bytes, more than the {max_bytes:,} it may be; refusing it")
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:  # it grew while being read
            raise error(f"{name} is more than the {max_bytes:,} bytes it may be; refusing it")
        return data
    except OSError as exc:
        raise error(f"cannot read {name}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def loads(text: str | bytes, error: ErrorType, what: str, **options: Any) -> Any:
    """json.loads with its failures — bad JSON, bad UTF-8, nesting too deep to decode — as error(...)."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise error(f"{what} is JSON nested too deeply to be read") from None
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text") from None
    except ValueError as exc:  # JSONDecodeError, and what a parse_constant hook refuses
        raise error(f"{what} is not valid JSON ({exc})") from None


def read_json(path: str | Path, error: ErrorType, *, max_bytes: int = MAX_JSON_BYTES, what: str = "") -> Any:
    """read_regular + loads: a JSON file of bounded size and depth."""
    name = what or str(path)
    return loads(read_regular(path, error, max_bytes=max_bytes, what=name), error, name)
