"""The SQLite schema of run.sqlite, its version, and JSON encoding of meta values."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import PurePath
from typing import Any

from .errors import RecordError

SCHEMA_VERSION = 2  # 2: stats.fp, the bit-pattern fingerprint of each output
DB_NAME = "run.sqlite"
STATUSES: tuple[str, ...] = ("running", "done", "failed", "cancelled")

TABLES: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE IF NOT EXISTS steps (
        "index" INTEGER PRIMARY KEY, timestep REAL, sigma REAL, wall_s REAL NOT NULL,
        mem_before INTEGER, mem_after INTEGER, mem_peak INTEGER, mem_kind TEXT NOT NULL,
        committed_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS stats (
        id INTEGER PRIMARY KEY, phase TEXT NOT NULL, step INTEGER, module TEXT NOT NULL,
        call INTEGER NOT NULL, seq INTEGER NOT NULL, shape TEXT NOT NULL, dtype TEXT NOT NULL,
        min REAL, max REAL, mean REAL, std REAL, absmax REAL,
        nan_count INTEGER NOT NULL, inf_count INTEGER NOT NULL, fp INTEGER)""",
    "CREATE INDEX IF NOT EXISTS stats_module ON stats (module)",
    "CREATE INDEX IF NOT EXISTS stats_phase_step ON stats (phase, step)",
    "CREATE INDEX IF NOT EXISTS stats_seq ON stats (seq)",
    """CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY, t REAL NOT NULL, level TEXT NOT NULL, kind TEXT NOT NULL,
        message TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}')""",
    """CREATE TABLE IF NOT EXISTS files (
        name TEXT PRIMARY KEY, kind TEXT NOT NULL, relpath TEXT NOT NULL, step INTEGER)""",
)
# Full-text index over events.message (external content: the text lives in `events` only).
FTS_TABLE = "events_fts"
FTS_CREATE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE}"
    " USING fts5(message, content='events', content_rowid='id')"
)


def create_tables(conn: sqlite3.Connection) -> bool:
    """Create all tables; returns True when the FTS5 event index could be created too."""
    for statement in TABLES:
        conn.execute(statement)
    try:
        conn.execute(FTS_CREATE)
    except sqlite3.OperationalError:  # this SQLite has no FTS5: search falls back to LIKE
        return False
    return True


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def check_version(version: int) -> None:
    """Refuse runs written by a newer GhostViewer."""
    if version > SCHEMA_VERSION:
        raise RecordError(f"run was written by a newer GhostViewer (schema {version})")


def read_version(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return None
    try:
        version = json.loads(row[0])
    except (TypeError, ValueError):
        version = None
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"not a GhostViewer run (bad schema_version {row[0]!r})")
    return version


def migrate(conn: sqlite3.Connection) -> int:
    """Bring an open, writable run database up to SCHEMA_VERSION in place; returns the old version.

    A database without a version is treated as fresh and stamped with SCHEMA_VERSION.
    A newer version is refused with RecordError.
    """
    version = read_version(conn)
    if version is not None:
        check_version(version)
    # Upgrades, each in place: a version-1 run gains the fingerprint column (NULL: compared by stats alone).
    if version is not None and version < 2 and "fp" not in table_columns(conn, "stats"):
        conn.execute("ALTER TABLE stats ADD COLUMN fp INTEGER")
    if version != SCHEMA_VERSION:
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (dumps(SCHEMA_VERSION),)
        )
    return SCHEMA_VERSION if version is None else version


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


def dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), allow_nan=False, ensure_ascii=False)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
