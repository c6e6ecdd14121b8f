"""A record folder with one SQLite index: what a run (run.sqlite) and a study (study.sqlite) have in common.

- `StoreFormat`: one kind of index (its file, the noun its messages use, its id's meta key, its schema version,
  tables and in-place upgrades): version check, read and migrate.
- `StoreWriter`: creates the folder under a unique id, holds the writer's lock (lock.py) before the database
  exists, keeps a WAL connection, writes meta as JSON values, and at the end folds the WAL back in so that a
  finished record is one file.
- `StoreRecord`: opens the index read-only for each query (immutable when a WAL database lies on read-only
  media without its -shm file), reads meta, checks the schema and tells 'interrupted' from 'running'.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePath
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from ghostviewer.safe_read import loads as safe_loads

from .disk import DiskFull, disk_full, is_disk_full
from .errors import RecordError
from .lock import LOCK_NAME, WriterLock, live_status

FINISHED: tuple[str, ...] = ("done", "failed", "cancelled")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_W = TypeVar("_W", bound="StoreWriter")
RESERVE_NAME = "space.reserve"  # a writer's reserve (StoreWriter.RESERVE_BYTES); never listed, never bundled


# -- JSON meta values --------------------------------------------------------------------------------------
def jsonable(obj: Any) -> Any:
    """A copy of obj that json can encode strictly: non-finite floats become None, numpy -> Python."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, PurePath):
        return str(obj)
    tolist = getattr(obj, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return jsonable(tolist())
    return str(obj)


# A key json writes differently from jsonable's str(key): True -> "true", None -> "null" (jsonable: "True", "None").
_KEYS_JSON_WRITES_ITS_OWN_WAY = ('"true":', '"false":', '"null":')


def dumps(obj: Any) -> str:
    """jsonable(obj) as JSON. Most values need no conversion: json writes them directly (in C, a fifth of the cost
    of the copy); the copy is made only where json refuses (a non-finite float, a numpy value, a path...) or where a
    key may be a bool or None, so the text is always the copy's."""
    try:
        text = json.dumps(obj, allow_nan=False, ensure_ascii=False)
        if any(key in text for key in _KEYS_JSON_WRITES_ITS_OWN_WAY):
            text = json.dumps(jsonable(obj), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, OverflowError, RecursionError):
        text = json.dumps(jsonable(obj), allow_nan=False, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a path named in bytes that are not UTF-8: stored as JSON escapes, read back as is
        text = json.dumps(jsonable(obj), allow_nan=False, ensure_ascii=True)
    return text


def loads(text: str | None) -> Any:
    """A stored JSON value; RecordError (one line) for one that is not JSON or nested too deeply to decode."""
    return None if text is None else safe_loads(text, RecordError, "a value stored in the record")


def loads_or_text(text: str | None) -> Any:
    """A stored meta value: its JSON, or the text itself when it is not JSON."""
    try:
        return loads(text)
    except ValueError:
        return text


def check_name(name: str) -> str:
    """A folder or file name a record accepts: letters, digits, '_', '-', '.' (and no '..')."""
    if not _NAME.match(name) or ".." in name:
        raise ValueError(f"bad file name {name!r}: use letters, digits, '_', '-', '.'")
    return name


# -- the versioned schema ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StoreFormat:
    """One kind of index. Each is versioned on its own (a study and its runs can come from different releases)."""

    noun: str  # "run" | "study": in messages, ids and the lock's
    db_name: str  # the index's file in the folder
    id_key: str  # the meta key of the record's id
    version: int  # the schema version this GhostViewer writes
    create_tables: Callable[[sqlite3.Connection], object]
    required_tables: frozenset[str]
    upgrade: Callable[[sqlite3.Connection, int], None] | None = None  # in place, from the given older version

    def check_version(self, version: int) -> None:
        """Refuse records written by a newer GhostViewer."""
        if version > self.version:
            raise RecordError(f"{self.noun} was written by a newer GhostViewer (schema {version})")

    def read_version(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            return None
        try:
            version = json.loads(row[0])
        except (TypeError, ValueError):
            version = None
        if not isinstance(version, int) or isinstance(version, bool):
            raise RecordError(f"not a GhostViewer {self.noun} (bad schema_version {row[0]!r})")
        return version

    def migrate(self, conn: sqlite3.Connection) -> int:
        """Bring an open, writable database up to `version` in place; returns the old version.

        A database without a version is treated as fresh and stamped; a newer version is refused with RecordError.
        """
        version = self.read_version(conn)
        if version is not None:
            self.check_version(version)
            if self.upgrade is not None:
                self.upgrade(conn, version)
        if version != self.version:
            write_meta(conn, {"schema_version": self.version})
        return self.version if version is None else version

    def prepare(self, conn: sqlite3.Connection) -> None:
        """Create what is missing and migrate (not committed)."""
        self.create_tables(conn)
        self.migrate(conn)

    def empty_image(self) -> bytes | None:
        """The bytes of a new, empty database of this format, already in WAL mode (made once per process): a new
        record's file is written from it in one go, a third of the cost of creating its tables one by one and then
        switching the journal (~1 ms a run). None where this Python's sqlite3 cannot serialize."""
        image = _EMPTY_IMAGES.get(self.db_name)
        if image is None and hasattr(sqlite3.Connection, "serialize"):
            memory = sqlite3.connect(":memory:")
            try:
                self.prepare(memory)
                memory.commit()
                data = bytearray(memory.serialize())
            finally:
                memory.close()
            data[18:20] = b"\x02\x02"  # the header's read/write format versions: 2 is WAL
            image = _EMPTY_IMAGES[self.db_name] = bytes(data)
        return image


_EMPTY_IMAGES: dict[str, bytes] = {}


# -- writing -----------------------------------------------------------------------------------------------
def connect(db: Path, synchronous: str = "NORMAL") -> sqlite3.Connection:
    """A writer's connection: WAL, so readers see each commit while the writer goes on."""
    conn = sqlite3.connect(db, timeout=5.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'OFF' if synchronous == 'OFF' else 'NORMAL'}")
    return conn


def write_meta(conn: sqlite3.Connection, values: dict[str, Any]) -> None:
    """Set meta keys to JSON values (not committed)."""
    conn.executemany(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [(k, dumps(v)) for k, v in values.items()]
    )


def _make_folder(runs_dir: Path, noun: str, record_id: str | None, prefix: str) -> Path:
    if record_id is not None:
        check_name(record_id)
        try:
            (runs_dir / record_id).mkdir()
        except FileExistsError as exc:
            raise RecordError(f"{noun} folder already exists: {runs_dir / record_id}") from exc
        except OSError as exc:
            raise RecordError(f"cannot create {runs_dir / record_id}: {exc.strerror or exc}") from exc
        return runs_dir / record_id
    for _ in range(100):
        candidate = f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        try:
            (runs_dir / candidate).mkdir()
        except FileExistsError:
            continue
        except OSError as exc:  # read-only, no permission, disk full: the user's folder, said so
            raise RecordError(f"cannot create a {noun} folder in {runs_dir}: {exc.strerror or exc}") from exc
        return runs_dir / candidate
    raise RecordError(f"cannot find a free {noun} id in {runs_dir}")


def _reserve(path: Path, size: int) -> None:
    """A file of `size` bytes really taken on the disk. Written, not fallocated (fallocate cost 4 ms on ext4 here, a
    write of the page cache 30 µs), and of random bytes, which no compressing file system can make smaller."""
    global _RESERVE_BYTES
    if len(_RESERVE_BYTES) != size:
        _RESERVE_BYTES = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        view = memoryview(_RESERVE_BYTES)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


_RESERVE_BYTES = b""


def _take_away(path: Path, db_name: str, conn: sqlite3.Connection | None, lock: WriterLock | None) -> None:
    """Remove a record folder this process has just made and could not finish making (its files only)."""
    if conn is not None:
        with contextlib.suppress(sqlite3.Error):
            conn.close()
    names = {LOCK_NAME, RESERVE_NAME}
    for child in list(path.iterdir()) if path.is_dir() else []:
        with contextlib.suppress(OSError):
            if child.is_dir() and not child.is_symlink():
                child.rmdir()  # one of SUBFOLDERS, still empty
            elif child.name.startswith(db_name) or child.name in names:
                child.unlink()
    if lock is not None:
        lock.release()
    with contextlib.suppress(OSError):
        path.rmdir()


class StoreWriter:
    """The writing side of a record folder; subclasses set FORMAT and add their own writes."""

    FORMAT: ClassVar[StoreFormat]
    SYNCHRONOUS: ClassVar[str] = "NORMAL"
    SUBFOLDERS: ClassVar[tuple[str, ...]] = ()  # made with the record, before its index
    # Bytes held on the disk for the writer's last words: given back when a full disk stops the final status
    # (so a record always says how it ended, and why), and when the record is closed.
    RESERVE_BYTES: ClassVar[int] = 0

    def __init__(self, path: Path, conn: sqlite3.Connection, record_id: str, lock: WriterLock | None = None) -> None:
        self.path = path
        self._record_id = record_id
        self._conn: sqlite3.Connection | None = conn
        self._lock = lock  # held while this writer lives: readers tell 'running' from 'interrupted' by it

    @classmethod
    def _create_store(
        cls, runs_dir: Path, record_id: str | None, prefix: str, meta: dict[str, Any]
    ) -> tuple[Path, sqlite3.Connection, WriterLock]:
        """A new folder `runs_dir/<prefix><time>-<hex>` (or `runs_dir/<record_id>`), locked, with its SUBFOLDERS,
        its space reserve, its index created and its meta (id, created_at, status 'running', then `meta`) committed.
        A record that cannot be made whole (a full disk) is taken away again: no half-made record is left behind."""
        fmt = cls.FORMAT
        runs_dir = Path(runs_dir)
        try:
            runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full(runs_dir, f"cannot create the runs folder {runs_dir}") from exc
            raise RecordError(f"cannot create runs folder {runs_dir}: {exc.strerror or exc}") from exc
        path = _make_folder(runs_dir, fmt.noun, record_id, prefix)
        conn: sqlite3.Connection | None = None
        lock: WriterLock | None = None
        try:
            lock = WriterLock.acquire(path, fmt.noun)  # before the database: no reader sees a record without it
            for name in cls.SUBFOLDERS:
                (path / name).mkdir(exist_ok=True)
            if cls.RESERVE_BYTES:
                _reserve(path / RESERVE_NAME, cls.RESERVE_BYTES)
            image = fmt.empty_image()
            if image is not None:
                (path / fmt.db_name).write_bytes(image)
            conn = connect(path / fmt.db_name, cls.SYNCHRONOUS)
            if image is None:
                fmt.prepare(conn)
            created = datetime.now().astimezone().isoformat(timespec="microseconds")
            write_meta(conn, {fmt.id_key: path.name, "created_at": created, "status": "running", **meta})
            conn.commit()
        except (sqlite3.Error, OSError, RecordError) as exc:
            _take_away(path, fmt.db_name, conn, lock)
            if is_disk_full(exc):
                raise disk_full(runs_dir, f"cannot create a {fmt.noun} in it") from exc
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"cannot create {fmt.noun} database in {path}: {exc}") from exc
        return path, conn, lock

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RecordError(f"{self.FORMAT.noun} {self._record_id} is finished; nothing more can be written")
        return self._conn

    @property
    def finished(self) -> bool:
        return self._conn is None

    def _set_meta(self, **values: Any) -> None:
        write_meta(self.conn, values)

    def _disk_full(self, exc: BaseException) -> DiskFull:
        return disk_full(self.path.parent, f"{self.FORMAT.noun} {self._record_id} could not be written")

    def _commit_final(self, values: dict[str, Any]) -> None:
        """Write the final meta values and commit. On a full disk the batch is rolled back, the reserve given back
        and the values written again (alone); when even that fails, DiskFull (the record is then closed by the
        caller and reads 'interrupted')."""
        conn = self.conn
        try:
            self._set_meta(**values)
            conn.commit()
            return
        except sqlite3.Error as exc:
            if not is_disk_full(exc):
                raise
            full = exc
        conn.rollback()
        self._give_back_reserve()
        try:
            self._set_meta(**values)
            conn.commit()
        except sqlite3.Error as exc:
            conn.rollback()
            raise self._disk_full(exc) from full

    def _give_back_reserve(self) -> None:
        if self.RESERVE_BYTES:
            with contextlib.suppress(OSError):
                (self.path / RESERVE_NAME).unlink(missing_ok=True)

    @staticmethod
    def _check_final(status: str) -> None:
        if status not in FINISHED:
            raise ValueError(f"status must be one of {FINISHED}, not {status!r}")

    def _close(self, fold: bool = True) -> None:
        """Close the connection and let the lock go (after the final status is committed: a reader never sees a
        gap). fold: first fold the WAL back in, so the record is one file (friendly to bundles, read-only media)."""
        conn = self._conn
        self._give_back_reserve()  # first: folding the WAL back in needs room
        if conn is not None:
            if fold:
                try:
                    conn.execute("PRAGMA journal_mode=DELETE")
                except sqlite3.OperationalError:
                    pass  # a reader holds the database; it stays in WAL mode, which readers handle too
            conn.close()
            self._conn = None
        if self._lock is not None:
            self._lock.release()

    def _finish_as(self, status: str, error: str | None) -> None:
        """finish() with the subclass's own arguments: what leaving a `with` block does."""
        raise NotImplementedError

    # -- context manager ------------------------------------------------------------------------------------
    def __enter__(self: _W) -> _W:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.finished:
            return
        if exc is None:
            self._finish_as("done", None)
            return
        if isinstance(exc, KeyboardInterrupt):
            status, error = "cancelled", "interrupted"
        else:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        try:
            self._finish_as(status, error)
        except (sqlite3.Error, RecordError):
            pass  # never mask the original exception; the record then reads as 'running'


# -- reading -----------------------------------------------------------------------------------------------
class StoreRecord:
    """The reading side of a record folder, opened read-only: each query sees the latest committed state."""

    FORMAT: ClassVar[StoreFormat]

    def _open(self, path: str | Path) -> tuple[set[str], dict[str, Any]]:
        """Check the folder and its index; sets path and schema_version, returns the tables and the meta."""
        fmt = self.FORMAT
        path = Path(path)
        if path.name == fmt.db_name and path.is_file():
            path = path.parent
        if not path.is_dir():
            from .study_reader import not_kept_reason  # a watch study's summary row: say so

            raise RecordError(not_kept_reason(path) or f"not a folder: {path}")
        db = path / fmt.db_name
        if not db.is_file():
            raise RecordError(f"not a GhostViewer {fmt.noun} (no {fmt.db_name}): {path}")
        self.path = path
        self._db = db.resolve()
        self._immutable = False
        try:
            tables = self._tables()
        except RecordError as exc:
            if not isinstance(exc.__cause__, sqlite3.OperationalError):
                raise
            self._immutable = True  # a WAL database on read-only media without its -shm file: read it as immutable
            tables = self._tables()
        if "meta" not in tables:
            raise RecordError(f"not a GhostViewer {fmt.noun} (no meta table in {fmt.db_name}): {path}")
        meta = self._meta()
        version = meta.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or fmt.id_key not in meta:
            raise RecordError(f"not a GhostViewer {fmt.noun} (no schema version): {path}")
        fmt.check_version(version)  # before the table check: a newer schema may differ
        if not fmt.required_tables <= tables:
            raise RecordError(f"not a GhostViewer {fmt.noun} (missing tables in {fmt.db_name}): {path}")
        self.schema_version: int = version
        return tables, meta

    @contextmanager
    def _reading(self, *, raw_operational: bool = False) -> Iterator[sqlite3.Connection]:
        """A fresh read-only connection to the index, closed after; its errors as RecordError (raw_operational:
        sqlite3.OperationalError let through, for callers that have a fallback)."""
        noun = self.FORMAT.noun
        uri = self._db.as_uri() + ("?immutable=1" if self._immutable else "?mode=ro")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        except sqlite3.Error as exc:
            raise RecordError(f"cannot open {noun} database {self._db}: {exc}") from exc
        try:
            conn.execute("PRAGMA query_only=ON")
            yield conn
        except sqlite3.OperationalError as exc:
            if raw_operational:
                raise
            raise RecordError(f"cannot read {noun} database {self._db}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise RecordError(f"corrupt {noun} database {self._db}: {exc}") from exc
        finally:
            conn.close()

    def _query(
        self, sql: str, params: Sequence[Any] = (), *, raw_operational: bool = False
    ) -> list[tuple[Any, ...]]:
        """Rows of one query on a fresh read-only connection. raw_operational: let sqlite3.OperationalError
        through (the caller has a fallback) instead of a RecordError."""
        with self._reading(raw_operational=raw_operational) as conn:
            return conn.execute(sql, params).fetchall()

    def _tables(self) -> set[str]:
        return {r[0] for r in self._query("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _meta(self) -> dict[str, Any]:
        return {key: loads_or_text(value) for key, value in self._query("SELECT key, value FROM meta")}

    def _meta_value(self, key: str) -> Any:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return loads_or_text(rows[0][0]) if rows else None

    @property
    def error(self) -> str | None:
        return self._meta_value("error")

    def _status(self, stored: Any) -> str:
        # The one place a record's status is decided: 'running' whose writer is gone reads 'interrupted'.
        return live_status(self.path, stored, lambda: self._meta_value("status"))
