"""The SQLite schema of study.sqlite (a study's index of its child runs), its version, and key encoding.

Versioned apart from run.sqlite: a study and the runs it lists can be written by different GhostViewer releases.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from . import schema
from .sqlite_store import StoreFormat

STUDY_SCHEMA_VERSION = 1
STUDY_DB_NAME = "study.sqlite"
RUNS_FOLDER = "runs"  # where the study's own child runs are written, so they do not flood the history
# watch: engine/watch/; probe: engine/loops/probe.py
KINDS: tuple[str, ...] = ("replay", "compare", "bisect", "sweep", "baseline", "watch", "probe")
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


# Future upgrades: an `upgrade(conn, old_version)` function (each step in place, same transaction) passed here.
STUDY_FORMAT = StoreFormat(
    noun="study",
    db_name=STUDY_DB_NAME,
    id_key="study_id",
    version=STUDY_SCHEMA_VERSION,
    create_tables=create_tables,
    required_tables=REQUIRED_TABLES,
)


# Refuse studies written by a newer GhostViewer; read the stored version; bring an open, writable study database up
# to STUDY_SCHEMA_VERSION in place (a database without a version is fresh and stamped, a newer one refused).
check_version = STUDY_FORMAT.check_version
read_version = STUDY_FORMAT.read_version
migrate = STUDY_FORMAT.migrate


def canonical_key(key: Mapping[str, Any]) -> str:
    """The one text form of a child's key (sorted, compact JSON): what makes it unique and resumable."""
    if not isinstance(key, Mapping):
        raise ValueError(f"a study run key must be a JSON object (a dict), not {type(key).__name__}")
    return json.dumps(schema.jsonable(dict(key)), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
