"""The SQLite schema of run.sqlite, its version, and JSON encoding of meta values."""

from __future__ import annotations

import sqlite3

from .sqlite_store import StoreFormat
from .sqlite_store import dumps as dumps  # the JSON form of meta values, shared with study.sqlite
from .sqlite_store import jsonable as jsonable
from .sqlite_store import loads as loads

SCHEMA_VERSION = 3  # 2: stats.fp, the bit-pattern fingerprint of each output; 3: step tensors inline (`blobs`)
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
    # No index on seq: rows go in in seq order, and the index cost ~20 µs a step to keep up; a query in seq order
    # sorts what it selects (records from before schema 3 have one, which does no harm).
    """CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY, t REAL NOT NULL, level TEXT NOT NULL, kind TEXT NOT NULL,
        message TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}')""",
    """CREATE TABLE IF NOT EXISTS files (
        name TEXT PRIMARY KEY, kind TEXT NOT NULL, relpath TEXT NOT NULL, step INTEGER)""",
    # Tensors kept inside the database (a step's latents, x0, previews and feature maps): one safetensors
    # serialization per name, listed in `files` with the relpath INLINE_PREFIX + name. A file per step cost
    # ~0.3 ms to create on these disks, 5 % of a demo run; a row goes in with the step's own commit.
    "CREATE TABLE IF NOT EXISTS blobs (name TEXT PRIMARY KEY, data BLOB NOT NULL)",
)
INLINE_PREFIX = f"{DB_NAME}#"  # relpath of tensors kept in `blobs`: no file of that name exists
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


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    # Each in place: a version-1 run gains the fingerprint column (NULL: compared by stats alone).
    if version < 2 and "fp" not in table_columns(conn, "stats"):
        conn.execute("ALTER TABLE stats ADD COLUMN fp INTEGER")


RUN_FORMAT = StoreFormat(
    noun="run",
    db_name=DB_NAME,
    id_key="run_id",
    version=SCHEMA_VERSION,
    create_tables=create_tables,
    required_tables=frozenset({"meta", "steps", "stats", "events", "files"}),
    upgrade=_upgrade,
)


# Refuse runs written by a newer GhostViewer; read the stored version; bring an open, writable run database up to
# SCHEMA_VERSION in place (a database without a version is fresh and stamped, a newer one refused with RecordError).
check_version = RUN_FORMAT.check_version
read_version = RUN_FORMAT.read_version
migrate = RUN_FORMAT.migrate


def foreign_object(conn: sqlite3.Connection) -> str | None:
    """What in a database GhostViewer never writes and a reader would run or compute — a view, a trigger, a virtual
    table other than the event index, a generated column — in words; None when it holds tables and indexes only.
    A bundle's database (someone else's file) is refused for one, and export never bundles one."""
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    for kind, name, sql in rows:
        if kind in ("view", "trigger"):
            return f"{kind} {name!r}"
        text = " ".join(str(sql or "").split()).upper()
        if kind == "table" and text.startswith("CREATE VIRTUAL TABLE"):
            if name != FTS_TABLE or "USING FTS5(MESSAGE, CONTENT='EVENTS', CONTENT_ROWID='ID')" not in text:
                return f"virtual table {name!r}"
    for kind, name, _ in rows:
        if kind == "table" and name != FTS_TABLE:
            quoted = '"' + str(name).replace('"', '""') + '"'
            if any(column[6] in (2, 3) for column in conn.execute(f"PRAGMA table_xinfo({quoted})")):
                return f"generated column in table {name!r}"
    return None
