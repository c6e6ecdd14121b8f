"""Prompt lists dropped or opened in the window or swept: .txt (one prompt a line, # comments; lines starting with
`--` are AUTOMATIC1111 prompt-file lines, spec/a1111.py), .csv (a `prompt` column; optional negative, seed, steps,
guidance, width, height, scheduler, lora, init_image, strength, mask, control_image — files relative to the list's
folder), .jsonl / .json (objects with the same keys, or strings). A prompt that is a
dynamic-prompt template (`a {red|blue} circle`, `__colour__`) becomes one row per variant (spec/templates.py), and
A1111 styles apply to every row (ListOptions).

`iter_prompt_list` streams: it reads a line (or a .json array item) at a time, so a 100,000-line list is never
held whole in memory. `read_prompt_list` is the same as a list, for small lists. Every error names the file and
the line it was found on, in one line a user can act on.

The files a list names (init_image, mask, control_image, lora) must be in the list's own folder or below, links
resolved: a list from someone else could otherwise read any image of yours into a run, and from there into a bug
report. Anything outside is refused (OutsideFilesError) unless the user allows it (ListOptions.outside_files).
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ghostviewer.spec.a1111 import apply_styles, is_a1111_line, parse_line, read_styles
from ghostviewer.spec.errors import SpecError
from ghostviewer.spec.loras import LoraEntry, lora_entries, parse_lora
from ghostviewer.spec.templates import Expander, TemplateOptions, expand_rows, wildcard_folder

PROMPT_LIST_SUFFIXES = (".txt", ".csv", ".jsonl", ".json")
KEYS = {"prompt": str, "negative": str, "seed": int, "steps": int, "guidance": float, "width": int, "height": int,
        "scheduler": str, "lora": tuple,  # lora: FILE[:SCALE], a list of them, or several in one string split by ';'
        "init_image": str, "strength": float, "mask": str, "control_image": str}
# Image files a row may name; a relative path is read from the list file's folder (as a LoRA's is).
IMAGE_KEYS = ("init_image", "mask", "control_image")
_CHUNK = 1 << 16  # .json arrays are parsed from a buffer of this many characters, refilled as items are used
_NON_SPACE = re.compile(r"[^ \t\r\n]")
_MAX_ITEM = 1 << 20  # one .json entry longer than this is not a prompt: an error, not a reason to read on


class PromptListError(SpecError):
    """The list cannot be read; the message is one line for the user."""


class OutsideFilesError(PromptListError):
    """The list names a file outside its own folder, and the user has not allowed that."""

    def __init__(self, message: str, file: str, folder: Path) -> None:
        super().__init__(message)
        self.file, self.folder = file, folder


def named_files(row: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(key, path) of every file a read row names."""
    for key in IMAGE_KEYS:
        if isinstance(row.get(key), str):
            yield key, row[key]
    for entry in row.get("lora") or ():
        yield "lora", parse_lora(entry).path


def _refuse_outside(row: dict[str, Any], home: Path, name: str) -> None:
    for key, file in named_files(row):
        if not Path(file).resolve().is_relative_to(home):
            raise OutsideFilesError(
                f"{name}: the row of {row['prompt']!r} names {key} {file}, outside the list's folder {home} "
                "(a list may read files from its own folder only: move the file there, or allow files from "
                "outside it: --allow-outside-files)", file, home)


def _clean(item: Any, where: str, folder: Path | None = None) -> dict[str, Any]:
    if isinstance(item, str):
        item = {"prompt": item}
    if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
        raise PromptListError(f"{where}: each entry needs a 'prompt'")
    _refuse_unknown(item, where)
    out: dict[str, Any] = {"prompt": item["prompt"]}  # an empty prompt is a prompt (an unconditional run)
    for key, kind in KEYS.items():
        value = item.get(key)
        if key == "prompt" or value is None or value == "":
            continue
        if kind is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        if kind is tuple:
            try:
                out[key] = tuple(_lora_in(entry, folder, where) for entry in lora_entries(value))
            except SpecError as exc:
                raise PromptListError(f"{where}: {exc}") from None
            continue
        if key in IMAGE_KEYS and isinstance(value, str):
            out[key] = _file_in(value, folder, where, key)
            continue
        try:
            if kind is int and isinstance(value, (float, bool)):
                raise ValueError(value)
            out[key] = kind(value)
        except (TypeError, ValueError) as exc:
            raise PromptListError(f"{where}: {key} {value!r} is not a valid {kind.__name__}") from exc
    strength = out.get("strength")
    if strength is not None and not (math.isfinite(strength) and 0 < strength <= 1):
        raise PromptListError(f"{where}: strength must be more than 0 and at most 1, not {strength:g}")
    return out


def _file_in(value: str, folder: Path | None, where: str, key: str) -> str:
    """A file a row names, relative to the list's folder (not the current one), refused here when it is missing."""
    path = Path(value).expanduser()
    if folder is not None and not path.is_absolute():
        path = folder / path
    if not path.is_file():
        raise PromptListError(f"{where}: {key} {value}: " + ("not a file" if path.exists() else "no such file")
                              + (f" (read from the list's folder {folder})" if folder is not None else ""))
    return str(path)


def _lora_in(entry: str, folder: Path | None, where: str) -> str:
    lora = parse_lora(entry)
    path = _file_in(lora.path, folder, where, "lora")
    return LoraEntry(path, lora.scale).text() if lora.path != entry else path  # the scale kept when given


def _refuse_unknown(keys: Any, where: str) -> None:
    """A key the list format does not have is a typo (`negativ`) whose value would silently not be used."""
    for key in keys:
        if key not in KEYS:
            near = difflib.get_close_matches(str(key), list(KEYS), n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"the keys are {', '.join(KEYS)}"
            raise PromptListError(f"{where}: unknown key {key!r} ({hint})")


def _lines(handle: IO[str], name: str) -> Iterator[tuple[int, str]]:
    """(line number, line), a line at most _MAX_ITEM characters: a longer one is not a prompt, and a file of one
    endless line (a device, a zero-filled image) must not be read whole to find out."""
    number = 0
    while line := handle.readline(_MAX_ITEM + 1):
        number += 1
        if len(line) > _MAX_ITEM:
            raise PromptListError(f"{name} line {number}: longer than {_MAX_ITEM:,} characters; not a prompt list")
        yield number, line


def _txt(handle: IO[str], name: str, folder: Path | None = None) -> Iterator[dict[str, Any]]:
    for number, line in _lines(handle, name):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if is_a1111_line(text):
            row = parse_line(text, f"{name} line {number}")
            styles = row.pop("styles", None)
            yield {**_clean(row, f"{name} line {number}", folder), **({"styles": styles} if styles else {})}
        else:
            yield {"prompt": text}


def _csv(handle: IO[str], name: str, folder: Path | None = None) -> Iterator[dict[str, Any]]:
    lines = (line for _, line in _lines(handle, name))
    reader = csv.DictReader(lines, strict=True)  # an unterminated quote is an error, not a prompt to EOF
    try:
        if "prompt" not in (reader.fieldnames or []):
            raise PromptListError(f"{name} line 1: no 'prompt' column")
        _refuse_unknown(reader.fieldnames or [], f"{name} line 1")
        twice = sorted({column for column in reader.fieldnames or [] if (reader.fieldnames or []).count(column) > 1})
        if twice:  # csv would keep the last one's cells silently
            raise PromptListError(f"{name} line 1: the column {twice[0]!r} appears twice")
        for row in reader:
            if None in row:  # more cells than the header names
                raise PromptListError(f"{name} line {reader.line_num}: more cells than columns")
            if not any(cell.strip() for cell in row.values() if isinstance(cell, str)):
                continue  # a row of empty cells (",,"), as a blank line is
            yield _clean(row, f"{name} line {reader.line_num}", folder)
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise PromptListError(f"{name}: a quote opened after line {reader.line_num} is never closed") from exc
        raise PromptListError(f"{name} line {reader.line_num}: {exc}") from exc


def _jsonl(handle: IO[str], name: str, folder: Path | None = None) -> Iterator[dict[str, Any]]:
    for number, line in _lines(handle, name):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptListError(f"{name} line {number}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise PromptListError(f"{name} line {number}: JSON nested too deeply to be a prompt list entry") from None
        yield _clean(item, f"{name} line {number}", folder)


class _JsonArray:
    """A top-level JSON array read item by item from a text stream, counting lines for error messages."""

    def __init__(self, handle: IO[str], name: str, folder: Path | None = None) -> None:
        self.handle, self.name, self.folder = handle, name, folder
        self.buffer, self.pos, self.line, self.eof = "", 0, 1, False
        self._decoder = json.JSONDecoder()

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.buffer = self.buffer[self.pos:] + chunk
        self.pos = 0
        return True

    def _skip_space(self) -> str:
        """The next non-space character (not consumed), '' at the end of the file."""
        while True:
            found = _NON_SPACE.search(self.buffer, self.pos)  # a regex, not a loop: megabytes of blanks are quick
            end = found.start() if found else len(self.buffer)
            self.line += self.buffer.count("\n", self.pos, end)
            self.pos = end
            if found:
                return self.buffer[self.pos]
            if not self._fill():
                return ""

    def _error(self, what: str) -> PromptListError:
        return PromptListError(f"{self.name} line {self.line}: {what}")

    def _value(self) -> Any:
        while True:
            try:
                value, end = self._decoder.raw_decode(self.buffer, self.pos)
            except RecursionError:
                raise self._error("JSON nested too deeply to be a prompt list entry") from None
            except json.JSONDecodeError as exc:
                if len(self.buffer) - self.pos < _MAX_ITEM and self._fill():
                    continue
                self.line += self.buffer.count("\n", self.pos, exc.pos)
                raise self._error(f"not valid JSON ({exc.msg})") from None
            if end == len(self.buffer) and not self.eof and self._fill():
                continue  # a number may go on in the next chunk: decode again with more text
            start_line = self.line
            self.line += self.buffer.count("\n", self.pos, end)
            self.pos = end
            return value, start_line

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._skip_space() != "[":
            raise self._error("a .json prompt list must hold a list ([...]) of prompts")
        self.pos += 1
        index = 0
        while True:
            if self._skip_space() == "]" and index == 0:
                return
            if not self._skip_space():
                raise self._error("the list is not closed with ']'")
            value, line = self._value()
            index += 1
            yield _clean(value, f"{self.name} line {line} (entry {index})", self.folder)
            following = self._skip_space()
            if following == "]":
                return
            if following != ",":
                raise self._error("expected ',' or ']' between entries")
            self.pos += 1


def _json(handle: IO[str], name: str, folder: Path | None = None) -> Iterator[dict[str, Any]]:
    yield from _JsonArray(handle, name, folder)


_READERS = {".txt": _txt, ".csv": _csv, ".jsonl": _jsonl, ".json": _json}


@dataclass(frozen=True)
class ListOptions:
    """How a list's rows are read beyond its own text: A1111 styles to apply, and how templates expand."""

    styles_file: Path | None = None  # an A1111 styles.csv
    styles: tuple[str, ...] = ()  # style names applied to every row (`--style NAME`), before a row's own
    templates: TemplateOptions = field(default_factory=TemplateOptions)
    outside_files: bool = False  # the user allows the list to name files outside its own folder


def iter_prompt_list(path: str | Path, options: ListOptions | None = None, *, expander: Expander | None = None
                     ) -> Iterator[dict[str, Any]]:
    """The list's entries one at a time ({"prompt", and any of negative/seed/steps/guidance/width/height/
    scheduler}), streamed: templates expanded, styles applied. `expander`: one to reuse (its provenance)."""
    path = Path(path)
    options = options or ListOptions()
    try:
        styles = read_styles(options.styles_file) if options.styles_file else None
    except SpecError as exc:
        raise PromptListError(str(exc)) from None
    if options.styles and styles is None:
        raise PromptListError(f"--style {options.styles[0]} needs the styles file it is in (--styles-file)")
    try:
        expander = expander or Expander(options.templates, wildcard_folder(path, options.templates))
        rows = expand_rows(_read_rows(path), expander, path.name)
        home = path.resolve().parent
        for row in apply_styles(rows, styles or {}, options.styles) if styles is not None else rows:
            if "styles" in row:
                raise PromptListError(f"{path.name}: the row of {row['prompt']!r} names the styles "
                                      f"{row['styles']!r}: give the styles file they are in (--styles-file FILE)")
            if not options.outside_files:
                _refuse_outside(row, home, path.name)
            yield row
    except PromptListError:
        raise
    except SpecError as exc:  # an A1111 line, a style or a template: one kind of error for every reader of lists
        raise PromptListError(str(exc)) from None


def freeze_prompt_list(path: str | Path, options: ListOptions | None = None
                       ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every row, read once, and where they came from: what a sweep keeps in its study so that a resumed sweep runs
    the same rows (templates expanded, styles applied) whatever happens to the files since."""
    options = options or ListOptions()
    expander = Expander(options.templates, wildcard_folder(Path(path), options.templates))
    rows = list(iter_prompt_list(path, options, expander=expander))
    provenance: dict[str, Any] = {"list": str(path), "rows": len(rows)}
    if expander.templates:
        provenance["templates"] = expander.provenance()
    if options.styles_file:
        provenance["styles"] = {"file": str(options.styles_file), "applied": list(options.styles),
                                "sha256": hashlib.sha256(Path(options.styles_file).read_bytes()).hexdigest()}
    return rows, provenance


def _read_rows(path: Path) -> Iterator[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix not in PROMPT_LIST_SUFFIXES:
        raise PromptListError(f"{path.name} is not a prompt list ({', '.join(PROMPT_LIST_SUFFIXES)})")
    try:
        if path.exists() and not path.is_file():  # a folder, a FIFO, a device (maybe behind a link): never opened
            raise PromptListError(f"{path.name} is not a regular file")
        handle = path.open(encoding="utf-8-sig", newline="" if suffix == ".csv" else None)
    except OSError as exc:
        raise PromptListError(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    count = 0
    with handle:
        try:
            for count, item in enumerate(_READERS[suffix](handle, path.name, path.resolve().parent), start=1):  # noqa: B007
                yield item
        except UnicodeDecodeError as exc:
            where = f"after entry {count}" if count else "a binary file, or text in another encoding"
            raise PromptListError(f"{path.name}: not UTF-8 text ({where})") from exc
        except OSError as exc:
            raise PromptListError(f"cannot read {path.name}: {exc.strerror or exc}") from exc


def count_prompt_list(path: str | Path, options: ListOptions | None = None) -> int:
    """How many entries the list holds, every one checked (streamed: any error is raised before a sweep starts)."""
    return sum(1 for _ in iter_prompt_list(path, options))


def read_prompt_list(path: str | Path, options: ListOptions | None = None) -> list[dict[str, Any]]:
    """The whole list at once: for small lists (the GUI's queue); sweeps stream with iter_prompt_list."""
    return list(iter_prompt_list(path, options))
