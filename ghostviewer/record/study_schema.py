"""The SQLite schema of study.sqlite (a study's index of its child runs), its version, and key encoding.

Versioned apart from run.sqlite: a study and the runs it lists can be written by different GhostViewer releases.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from . import schema
from .errors import RecordError

STUDY_SCHEMA_VERSION = 1
STUDY_DB_NAME = "study.sqlite"
RUNS_FOLDER = "runs"  # where the study's own child runs are written, so they do not flood the history
KINDS: tuple[str, ...] = ("replay", "compare", "bisect", "sweep", "baseline")
STATUSES: tuple[str, ...] = schema.STATUSES  # running | done | failed | cancelled

TABLES: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE IF NOT EXISTS runs (
        position INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, role TEXT NOT NULL, run_dir TEXT NOT NULL,
        status TEXT, verdict TEXT, first_anomaly TEXT, added_at REAL NOT NULL, note TEXT NOT NULL DEFAULT '')""",
    """CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY, t REAL NOT NULL, level TEXT NOT NULL, kind TEXT NOT NULL,
        message TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}')""",
)
REQUIRED_TABLES = frozenset({"meta", "runs", "events"})


def create_tables(conn: sqlite3.Connection) -> None:
    for statement in TABLES:
        conn.execute(statement)


def check_version(version: int) -> None:
    """Refuse studies written by a newer GhostViewer."""
    if version > STUDY_SCHEMA_VERSION:
        raise RecordError(f"study was written by a newer GhostViewer (schema {version})")


def read_version(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return None
    try:
        version = json.loads(row[0])
    except (TypeError, ValueError):
        version = None
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"not a GhostViewer study (bad schema_version {row[0]!r})")
    return version


def migrate(conn: sqlite3.Connection) -> int:
    """Bring an open, writable study database up to STUDY_SCHEMA_VERSION in place; returns the old version.

    A database without a version is treated as fresh and stamped; a newer version is refused with RecordError.
    """
    version = read_version(conn)
    if version is not None:
        check_version(version)
    # Future upgrades go here: `if version < 2: ...` (each step in place, same transaction).
    if version != STUDY_SCHEMA_VERSION:
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
            (schema.dumps(STUDY_SCHEMA_VERSION),),
        )
    return STUDY_SCHEMA_VERSION if version is None else version


def canonical_key(key: Mapping[str, Any]) -> str:
    """The one text form of a child's key (sorted, compact JSON): what makes it unique and resumable."""
    if not isinstance(key, Mapping):
        raise ValueError(f"a study run key must be a JSON object (a dict), not {type(key).__name__}")
    return json.dumps(schema.jsonable(dict(key)), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
