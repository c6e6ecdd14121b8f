"""A full disk, told apart from every other write error: it is the user's environment, not a bug and not the
pipeline (CONTRACT: bad input's exit code, 2), and it is said in one line naming the folder and what is left."""

from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path

from .errors import RecordError

_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)
_SQLITE_FULL = 13  # SQLITE_FULL; extended codes keep it in their low byte
_SQLITE_IOERR_SHMSIZE = 4874  # the WAL's -shm file could not grow: "the volume may be out of space" (SQLite's docs)


class DiskFull(RecordError):
    """No space left where a record is being written; the message is one line for the user."""


def is_disk_full(exc: BaseException | None) -> bool:
    """exc, or an exception it was raised from, is a full disk (ENOSPC, a quota, SQLite's SQLITE_FULL)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFull):
            return True
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) if isinstance(exc, sqlite3.Error) else 0
        if code & 0xFF == _SQLITE_FULL or code == _SQLITE_IOERR_SHMSIZE:
            return True
        if isinstance(exc, sqlite3.Error) and not code and "database or disk is full" in str(exc):
            return True  # SQLite's own words for SQLITE_FULL, where Python gives no error code
        exc = exc.__cause__ or exc.__context__
    return False


def free_space(folder: Path) -> str:
    """What is left on folder's disk, in words ('12 KiB free'); '' when it cannot be told."""
    for place in (folder, *folder.parents):
        try:
            free = shutil.disk_usage(place).free
        except OSError:
            continue
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if free >= size:
                return f"{free / size:.3g} {unit} free"
        return f"{free} bytes free"
    return ""


def disk_full(folder: Path, doing: str) -> DiskFull:
    """The one line: 'the disk is full (no space left in FOLDER, 12 KiB free): DOING'."""
    left = free_space(Path(folder))
    return DiskFull(f"the disk is full (no space left in {folder}{', ' + left if left else ''}): {doing}")


def disk_full_in(exc: BaseException) -> DiskFull | None:
    """The full disk behind exc, as one line (its own DiskFull when the record layer raised one); None when exc
    is not a full disk."""
    if not is_disk_full(exc):
        return None
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, DiskFull):
            return cause
        if isinstance(cause, OSError) and cause.filename:
            return disk_full(Path(str(cause.filename)).parent, f"cannot write {cause.filename}")
        cause = cause.__cause__ or cause.__context__
    return DiskFull("the disk is full (no space left on device): free some space and try again")
