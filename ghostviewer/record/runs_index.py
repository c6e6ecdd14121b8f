"""The runs index: one SQLite file per runs folder (INDEX_NAME) holding, for each run folder in it, what a listing
shows — id, time, prompt, seed, steps, status, verdict, first anomaly, final image, settings, error — so a history
of 10,000 runs is one query instead of 10,000 database opens.

A cache, never the truth. Each row carries the stamp of its run's database (the modification times of run.sqlite
and its WAL); a folder without a row, or whose stamp differs, is read from its own record and its row written back.
Listing starts from the folder's own entries, so a row never outlives its run. The writer adds its run's row when
it finishes (note_finished) where the folder has one; a large folder's first listing makes it (a small folder is
listed from its records and left as it is); one that is damaged, foreign or older is made again, one of a newer
version is left alone (the runs are read directly); a read-only folder is listed all the same. The index is
a regular file or nothing: a link in its place is never followed or written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from . import schema
from .errors import RecordError
from .lock import live_status
from .reader import RunRecord
from .sqlite_store import loads_or_text

log = logging.getLogger("ghostviewer.record")

INDEX_NAME = ".ghostviewer-runs.sqlite"  # beside the run folders; hidden, never a run
INDEX_FILES = (INDEX_NAME, INDEX_NAME + "-wal", INDEX_NAME + "-shm", INDEX_NAME + "-journal")
INDEX_VERSION = 3  # an index of an older version is made again
_TABLE = "CREATE TABLE IF NOT EXISTS runs (name TEXT PRIMARY KEY, stamp TEXT NOT NULL, row TEXT NOT NULL)"
Stamp = tuple[int, int]
Folder = Path | str  # a run folder, as the caller names it


class RunRow(NamedTuple):
    """One run as a listing shows it. `status` is the stored one ('running' for a run not finished: the reader's
    live_status tells 'interrupted'); `image` the final image relative to the run's folder; `problem` what the
    reader refused in it (its final image outside its folder), in one line. A tuple: 10,000 made from the index's
    rows in a few ms (a frozen dataclass: a setattr a field). Never changed in place (settings included)."""

    run_id: str
    created_at: str
    status: str
    prompt: object = None
    seed: object = None
    steps: object = None
    verdict: str | None = None  # its label
    first_anomaly: dict[str, Any] | None = None
    error: str | None = None
    image: str | None = None
    settings: dict[str, Any] = {}  # noqa: RUF012 - only those of LISTED_SETTINGS the run set; never changed
    watched: dict[str, Any] | None = None
    elapsed_s: object = None
    problem: str = ""

    def image_path(self, folder: Path | str) -> str | None:
        """The final image, only inside the run's own folder: a relative path without '..' (a tampered index cannot
        point elsewhere; the row was made from a path the reader resolved inside the folder)."""
        image = self.image
        if not image or not isinstance(image, str) or image.startswith(("/", "\\")) or ".." in image \
                or ":" in image:
            return None
        return os.fspath(folder) + os.sep + image

    def live_status(self, folder: Path | str) -> str:
        """The status a reader reports: 'running' whose writer is gone reads 'interrupted'."""
        if self.status != "running":
            return self.status
        return live_status(folder, self.status, lambda: self.status)


FINISHED = ("done", "failed", "cancelled")


def stamp(folder: Path | str, status: str | None = None, db_mtime: int | None = None) -> Stamp:
    """The modification times (ns) of a run's database and its WAL (0 for one that is not there). A finished run
    (`status`) has folded its WAL back in: its database's time alone is read (one stat a run, not two)."""
    if status in FINISHED and db_mtime is not None:
        return db_mtime, 0  # the common case (10,000 runs listed): nothing to look at
    folder = os.fspath(folder)
    out = []
    names = (schema.DB_NAME,) if status in FINISHED else (schema.DB_NAME, schema.DB_NAME + "-wal")
    for i, name in enumerate(names):
        if i == 0 and db_mtime is not None:
            out.append(db_mtime)
            continue
        try:
            out.append(os.stat(os.path.join(folder, name)).st_mtime_ns)
        except OSError:
            out.append(0)
    return out[0], out[1] if len(out) > 1 else 0


def db_mtime(folder: Path | str) -> int | None:
    """The run database's modification time (ns), or None when the folder holds none."""
    try:
        return os.stat(os.fspath(folder) + _DB_TAIL).st_mtime_ns
    except OSError:
        return None


_DB_TAIL = os.sep + schema.DB_NAME


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _verdict_label(verdict: object) -> str | None:
    label = verdict.get("label") if isinstance(verdict, dict) else None
    return None if label is None else str(label)


LISTED_SETTINGS = ("faults", "bypass", "capture", "capture_attention")  # what a listing says a run changed


def _row_from_values(meta: dict[str, Any], image: str | None, problem: str) -> RunRow:
    settings = meta.get("settings") or {}
    environment = meta.get("environment") or {}
    anomaly = meta.get("first_anomaly")
    watched = environment.get("watched")
    error = meta.get("error")
    return RunRow(str(meta.get("run_id") or ""), str(meta.get("created_at") or ""),
                  str(meta.get("status") or "running"), settings.get("prompt"), settings.get("seed"),
                  settings.get("steps"), _verdict_label(meta.get("verdict")),
                  anomaly if isinstance(anomaly, dict) else None,
                  None if error is None else str(error), image,
                  {k: settings[k] for k in LISTED_SETTINGS if settings.get(k)},
                  watched if isinstance(watched, dict) else None, meta.get("elapsed_s"), problem)


def read_row(folder: Path) -> RunRow:
    """The row of one run, read from its own record (RecordError for one that cannot be read)."""
    record = RunRecord(folder)
    meta = record._meta()
    image, problem = None, ""
    try:
        path = record.image_path("final")
        image = None if path is None else path.relative_to(record.path.resolve()).as_posix()
    except RecordError as exc:  # the run reads, but its final image is refused: listed, with why
        problem = _one_line(exc)
    except ValueError:
        image = None
    for key in ("settings", "environment"):
        record._object_or_refuse(key, meta.get(key))  # a damaged record: said so
    meta.setdefault("run_id", record.run_id)
    return _row_from_values(meta, image, problem)


_NAMES = RunRow._fields
_FIELDS = frozenset(_NAMES)


def _encode(row: RunRow) -> str:
    """The row's values in RunRow's order, a JSON array: parsed in a third of the time of an object with its keys
    (10,000 rows listed). Rows written as objects (before) read as well, and are written again as arrays."""
    return schema.dumps(list(row))


def _decode(text: str) -> RunRow | None:
    try:
        return _row_of(json.loads(text))
    except (ValueError, TypeError):
        return None  # a damaged or foreign row: read from the record again


def _row_of(value: object) -> RunRow | None:
    if type(value) is list and len(value) == len(_NAMES):
        return _new_row(RunRow, value)
    return RunRow(**value) if isinstance(value, dict) else None


_new_row = tuple.__new__  # a RunRow from its values in order (NamedTuple's own __new__: a Python call)


_PARSE_ROWS = 256  # rows parsed in one call: one parse of 10,000 would hold the GIL (the window's thread) ~50 ms


def _decode_all(texts: list[str]) -> list[RunRow | None]:
    """Many rows a few hundred at a parse (10,000 rows: a third of the time of one parse each); row by row where
    one is damaged."""
    rows: list[RunRow | None] = []
    for start in range(0, len(texts), _PARSE_ROWS):
        rows.extend(_decode_some(texts[start:start + _PARSE_ROWS]))
    return rows


def _decode_some(texts: list[str]) -> list[RunRow | None]:
    try:
        values = json.loads("[" + ",".join(texts) + "]")
    except ValueError:
        return [_decode(text) for text in texts]
    if len(values) != len(texts):  # a row that was not one JSON value (e.g. "1, 2")
        return [_decode(text) for text in texts]
    rows: list[RunRow | None] = []
    new, count, fields = _new_row, len(_NAMES), _FIELDS
    for value in values:
        if type(value) is list and len(value) == count:  # a row this version wrote
            rows.append(new(RunRow, value))
            continue
        if isinstance(value, dict) and value.keys() == fields:  # written as an object (before): every field
            rows.append(RunRow(**value))
            continue
        try:
            rows.append(_row_of(value))
        except TypeError:
            rows.append(None)
    return rows


class RunsIndex:
    """The index of one runs folder, opened for reading and (where it can be) writing."""

    def __init__(self, runs_dir: Path, create: bool = False, shared: bool = False) -> None:
        """create: make the index when there is none (else an index missing is no index: nothing read or written);
        shared: usable from any thread (the caller serialises its use)."""
        self.runs_dir = Path(runs_dir)
        self._shared, self._create = shared, create
        self.path = self.runs_dir / INDEX_NAME
        self._conn: sqlite3.Connection | None = None
        self.writable = False
        self._open()

    def _open(self) -> None:
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            mode = None
        except OSError:
            return
        if mode is not None and not stat.S_ISREG(mode):
            log.info("the runs index %s is not a regular file: left alone", self.path)
            return
        if mode is None and not self._create:
            return
        for attempt in range(2):
            try:
                self._connect()
                return
            except (sqlite3.DatabaseError, RecordError) as exc:
                self.close()
                if attempt or isinstance(exc, _Newer):
                    log.info("the runs index %s cannot be used: %s", self.path, exc)
                    return
                self._remove()  # damaged or foreign: made again

    def _connect(self) -> None:
        conn = sqlite3.connect(self.path, timeout=2.0, isolation_level=None, check_same_thread=not self._shared)
        self._conn = conn
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > INDEX_VERSION:
            raise _Newer(f"written by a newer GhostViewer (version {version})")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables - {"runs"} or (version == 0 and tables):
            raise RecordError("not a GhostViewer runs index")
        if 0 < version < INDEX_VERSION:
            raise RecordError(f"an older runs index (version {version})")
        if "runs" in tables:
            columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
            if columns != ["name", "stamp", "row"]:
                raise RecordError("not a GhostViewer runs index")
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")  # a cache: what a crash loses is read again
            if not tables:
                conn.execute(_TABLE)
                conn.execute(f"PRAGMA user_version = {INDEX_VERSION}")
            self.writable = True
        except sqlite3.OperationalError:  # a read-only folder: read what is there
            self.writable = False

    def _remove(self) -> None:
        for name in INDEX_FILES:
            with contextlib.suppress(OSError):
                target = self.runs_dir / name
                if stat.S_ISREG(os.lstat(target).st_mode):
                    target.unlink()

    def rows(self) -> dict[str, tuple[str, str]]:
        """name → (stamp text, row JSON) of every row."""
        if self._conn is None:
            return {}
        try:
            return {name: (st, row) for name, st, row in self._conn.execute("SELECT name, stamp, row FROM runs")}
        except sqlite3.Error as exc:
            log.info("the runs index %s cannot be read: %s", self.path, exc)
            return {}

    def put(self, rows: Iterable[tuple[str, Stamp, RunRow]]) -> None:
        if self._conn is None or not self.writable:
            return
        data = [(name, _stamp_text(st), _encode(row)) for name, st, row in rows]
        if not data:
            return
        try:
            with contextlib.closing(self._conn.cursor()) as cur:
                cur.execute("BEGIN IMMEDIATE")
                cur.executemany("INSERT OR REPLACE INTO runs (name, stamp, row) VALUES (?, ?, ?)", data)
                cur.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            log.info("the runs index %s cannot be written: %s", self.path, exc)

    def drop(self, names: Iterable[str]) -> None:
        if self._conn is None or not self.writable:
            return
        try:
            self._conn.executemany("DELETE FROM runs WHERE name = ?", [(n,) for n in names])
        except sqlite3.Error as exc:
            log.info("the runs index %s cannot be written: %s", self.path, exc)

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> RunsIndex:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class _Newer(RecordError):
    pass


def _stamp_text(value: Stamp) -> str:
    return f"{value[0]}:{value[1]}"


def list_rows(runs_dir: Path, folders: Iterable[Folder | tuple[Folder, int | None]] | None = None,
              budget: int | None = None, check: Callable[[], None] | None = None, create: bool = False
              ) -> tuple[list[tuple[Folder, Stamp, RunRow]], list[tuple[Folder, str]], list[Folder]]:
    """(rows, unreadable, left): the runs among `folders` (default: every subfolder of runs_dir that holds a
    run.sqlite; or (folder, its database's mtime) pairs, when the caller has already looked; a folder is a Path or
    a path string, and comes back as it was given), from the index where it is up to date and from their own
    records otherwise (those rows written back). `budget`: read at most that many records (the others are `left`
    for a later call); `check`: called between records (a cancel token). `unreadable`: (folder, the reader's
    message) of records that cannot be read. `create`: make the index where there is none (a large folder: small
    ones are listed from their records, and left as they are)."""
    runs_dir = Path(runs_dir)
    home = os.fspath(runs_dir)
    if folders is None:
        folders = run_folders(runs_dir)
    rows: list[tuple[Folder, Stamp, RunRow]] = []
    unreadable: list[tuple[Folder, str]] = []
    left: list[Folder] = []
    fresh: list[tuple[str, Stamp, RunRow]] = []
    with RunsIndex(runs_dir, create) as index:
        known = index.rows()
        wanted = [each if isinstance(each, tuple) else (each, None) for each in folders]
        prefix = home + os.sep
        cut = len(prefix)
        hits, names = [], []
        for folder, _ in wanted:  # a child's name cut from its path string (basename costs 10,000 calls ~10 ms)
            tail = folder[cut:] if isinstance(folder, str) and folder.startswith(prefix) else ""
            name = tail if tail and os.sep not in tail else os.path.basename(os.fspath(folder))
            names.append(name)
            hits.append(known.get(name))
        decoded = iter(_decode_all([hit[1] for hit in hits if hit is not None]))
        for (folder, mtime), hit, name in zip(wanted, hits, names, strict=True):
            row = next(decoded) if hit is not None else None
            if row is not None and mtime is not None and row.status in FINISHED and hit[0] == f"{mtime}:0":
                rows.append((folder, (mtime, 0), row))  # the common case, inline (10,000 rows)
                if hit[1].startswith("{") and os.path.dirname(os.fspath(folder)) == home:
                    fresh.append((name, (mtime, 0), row))  # written as an object before: again, as an array
                continue
            now = stamp(folder, None if row is None else row.status, mtime)
            if row is not None and hit is not None and hit[0] != _stamp_text(now):
                row = None
            if row is None:
                if budget is not None and budget <= 0:
                    left.append(folder)
                    continue
                if check is not None:
                    check()
                if budget is not None:
                    budget -= 1
                try:
                    row = read_row(Path(folder))
                except (RecordError, OSError) as exc:
                    unreadable.append((folder, _one_line(exc)))
                    continue
                now = stamp(folder, row.status)
                if os.path.dirname(os.fspath(folder)) == home:
                    fresh.append((os.path.basename(os.fspath(folder)), now, row))
            elif hit is not None and hit[1].startswith("{") and os.path.dirname(os.fspath(folder)) == home:
                fresh.append((name, now, row))  # written as an object before: again, as an array
            rows.append((folder, now, row))
        index.put(fresh)
    return rows, unreadable, left


def newest_rows(runs_dir: Path, limit: int) -> list[tuple[str, RunRow]]:
    """(folder, row) of the runs index's `limit` newest-named rows whose runs are there and unchanged (their
    stamps checked): what a large folder's listing shows first, in a few milliseconds, before every folder has
    been looked at. No record opened, nothing written; [] where there is no index."""
    runs_dir = Path(runs_dir)
    with RunsIndex(runs_dir) as index:
        if index._conn is None:
            return []
        try:
            found = index._conn.execute("SELECT name, stamp, row FROM runs ORDER BY name DESC LIMIT ?",
                                        (int(limit),)).fetchall()
        except sqlite3.Error:
            return []
    out = []
    for (name, st, _text), row in zip(found, _decode_all([text for _, _, text in found]), strict=True):
        if row is None or not isinstance(name, str) or os.sep in name or name in ("", ".", ".."):
            continue
        folder = os.path.join(os.fspath(runs_dir), name)
        if not os.path.islink(folder) and st == _stamp_text(stamp(folder, row.status)):
            out.append((folder, row))
    return out


def run_folders(runs_dir: Path) -> list[Path]:
    """The subfolders of runs_dir that hold a run database (links never followed), newest-named first."""
    found = []
    try:
        with os.scandir(runs_dir) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and os.path.lexists(os.path.join(entry.path, schema.DB_NAME)):
                    found.append(Path(entry.path))
    except OSError:
        return []
    return sorted(found, key=lambda p: p.name, reverse=True)


_WRITING: dict[str, tuple[tuple[int, int], RunsIndex]] = {}  # a writer process's open index per runs folder
_WRITING_LOCK = threading.Lock()


def note_finished(run_dir: Path, meta: dict[str, str], image: str | None) -> None:
    """Put a run that has just finished into its runs folder's index: the writer's last act, from the meta texts
    and final image it wrote (no record opened; ~0.2 ms). Never raises: the index is a cache, and a run is listed
    without it."""
    run_dir = Path(run_dir)
    if not os.path.lexists(run_dir.parent / INDEX_NAME):
        return  # a folder without an index (a small one): nothing to keep up to date
    try:
        values = {key: loads_or_text(text) for key, text in meta.items()}
        if not all(isinstance(values.get(k) or {}, dict) for k in ("settings", "environment")):
            return  # damaged: the reader says so when it lists it
        if image is not None and not (run_dir / image).is_file():
            image = None
        row = _row_from_values(values, image, "")
        with _WRITING_LOCK:
            index = _index_for_writing(run_dir.parent)
            if index is not None:
                index.put([(run_dir.name, stamp(run_dir, row.status), row)])
    except (RecordError, OSError, sqlite3.Error, ValueError, TypeError) as exc:
        log.info("the runs index of %s was not updated: %s", run_dir.parent, exc)


def _index_for_writing(runs_dir: Path) -> RunsIndex | None:
    """The runs folder's index, opened once per process while it stays the same file."""
    key = str(runs_dir)
    try:
        st = os.lstat(runs_dir / INDEX_NAME)
        ident = (st.st_dev, st.st_ino)
    except FileNotFoundError:
        ident = (0, 0)
    held = _WRITING.get(key)
    if held is not None and held[0] == ident and ident != (0, 0):
        return held[1]
    if held is not None:
        held[1].close()
        del _WRITING[key]
    if ident == (0, 0):
        return None  # no index here (a small folder): nothing to keep up to date
    index = RunsIndex(runs_dir, shared=True)  # only where the index is (made by a large folder's first listing)
    if not index.writable:
        index.close()
        return None
    st = os.lstat(index.path)
    if len(_WRITING) > 8:  # a process writing into many folders: keep a few open
        _WRITING.pop(next(iter(_WRITING)))[1].close()
    _WRITING[key] = ((st.st_dev, st.st_ino), index)
    return index


def ensure(runs_dir: Path) -> None:
    """Make the runs folder's index now (empty), so that the writers keep it from their first run."""
    RunsIndex(runs_dir, create=True).close()


def forget(runs_dir: Path, names: Iterable[str]) -> None:
    """Take rows out of the index (their folders are gone: prune)."""
    with RunsIndex(runs_dir) as index:
        index.drop(list(names))
