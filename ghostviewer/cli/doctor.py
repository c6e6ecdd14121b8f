"""`ghostviewer doctor RUNS_DIR`: mark the runs and studies whose process died as `interrupted` and fold their
write-ahead logs back in, so each record is one file again (friendly to bundles, copies and read-only media).

A record is repaired only while doctor holds its writer lock (record/lock.py): a run still being written is
left alone and counted as running. Nothing of the record is deleted (a dead writer's space reserve is); what was
committed before the death stays readable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from ghostviewer.record import RecordError
from ghostviewer.record.lock import LOCK_NAME, WriterLock, writer_alive
from ghostviewer.record.schema import DB_NAME, SCHEMA_VERSION
from ghostviewer.record.sqlite_store import RESERVE_NAME
from ghostviewer.record.study_schema import RUNS_FOLDER, STUDY_DB_NAME, STUDY_SCHEMA_VERSION

INTERRUPTED_MESSAGE = "the process writing this record stopped before it finished (found by ghostviewer doctor)"


LEFT_ALONE = (("newer", "from a newer GhostViewer (left alone)"), ("linked", "with linked files (left alone)"),
              ("unwritable", "not writable"))


def add_doctor_parser(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="mark killed runs and studies 'interrupted' and checkpoint their logs")
    doctor.add_argument("runs_dir", metavar="RUNS_DIR")
    doctor.add_argument("--json", action="store_true")


def _linked(folder: Path, db_name: str) -> bool:
    """A record file that is a link: writing through it would change a database somewhere else."""
    return any((folder / name).is_symlink() for name in (db_name, f"{db_name}-wal", f"{db_name}-shm", LOCK_NAME))


def _peek(db: Path) -> tuple[int | None, object]:
    """(schema version, status) read without writing: on a read-only disk too (immutable when WAL cannot be read)."""
    for options in ("mode=ro", "mode=ro&immutable=1"):
        try:
            conn = sqlite3.connect(f"{db.absolute().as_uri()}?{options}", uri=True, timeout=5.0)
            try:
                rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('schema_version', 'status')"))
            finally:
                conn.close()
        except sqlite3.Error:
            continue
        try:
            version = json.loads(rows.get("schema_version") or "null")
            status = json.loads(rows.get("status") or "null")
        except (ValueError, RecursionError):
            return None, None
        return (version if isinstance(version, int) and not isinstance(version, bool) else None), status
    return None, None


def _repair(folder: Path, db_name: str) -> str:
    """'running' (a live writer), 'interrupted' (marked now), 'checkpointed' (a finished record left in WAL mode),
    'ok', 'newer' (written by a newer GhostViewer: left alone), 'linked' (a record file is a link: left alone),
    'unwritable' (needs marking but cannot be written) or 'unreadable'."""
    if _linked(folder, db_name):
        return "linked"
    if writer_alive(folder) is True:
        return "running"
    version, status = _peek(folder / db_name)
    if version is None:
        return "unreadable"
    if version > (SCHEMA_VERSION if db_name == DB_NAME else STUDY_SCHEMA_VERSION):
        return "newer"
    had_wal = (folder / f"{db_name}-wal").exists()
    if status not in (None, "running") and not had_wal:
        return "ok"  # nothing to write: a read-only disk is no reason to call it unreadable
    try:
        lock = WriterLock.acquire(folder, "record")
    except RecordError:
        return "running" if writer_alive(folder) is True else "unwritable"
    try:
        conn = sqlite3.connect(folder / db_name, timeout=5.0)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'status'").fetchone()
            marked = row is None or json.loads(row[0] or "null") in (None, "running")
            if marked:
                conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                 [("status", json.dumps("interrupted")), ("error", json.dumps(INTERRUPTED_MESSAGE))])
                conn.execute("INSERT INTO events (t, level, kind, message, data) VALUES (?, 'warning', ?, ?, '{}')",
                             (time.time(), "run" if db_name == DB_NAME else "study", INTERRUPTED_MESSAGE))
                conn.commit()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
        finally:
            conn.close()
        with contextlib.suppress(OSError):  # a dead writer's space reserve (not the record's data)
            (folder / RESERVE_NAME).unlink(missing_ok=True)
    except sqlite3.OperationalError as exc:
        return "unwritable" if "readonly" in str(exc).replace(" ", "").lower() else "unreadable"
    except (sqlite3.Error, ValueError, OSError):
        return "unreadable"
    finally:
        lock.release()
    return "interrupted" if marked else "checkpointed" if had_wal else "ok"


def doctor(runs_dir: str | Path) -> dict[str, Any]:
    """Repair every run and study in runs_dir (and the runs inside each study); counts and the folders touched."""
    root = Path(runs_dir)
    if not root.is_dir():
        raise RecordError(f"not a folder: {root}")
    counts = {"runs": 0, "studies": 0, "interrupted": 0, "checkpointed": 0, "running": 0, "unreadable": 0,
              "newer": 0, "linked": 0, "unwritable": 0}
    marked: list[str] = []
    folders = _records(root)
    for folder, kind in folders:  # grows as studies are met: their own runs are checked too
        counts["runs" if kind == DB_NAME else "studies"] += 1
        if kind == STUDY_DB_NAME and not (folder / RUNS_FOLDER).is_symlink():  # a linked runs/ is elsewhere
            folders.extend(_records(folder / RUNS_FOLDER))
        state = _repair(folder, kind)
        if state in counts:
            counts[state] += 1
        if state == "interrupted":
            marked.append(str(folder))
    return {**counts, "marked": marked}


def _records(folder: Path) -> list[tuple[Path, str]]:
    if not folder.is_dir():
        return []
    found = []
    for child in sorted(folder.iterdir()):
        for name in (DB_NAME, STUDY_DB_NAME):
            if child.is_dir() and not child.is_symlink() and (child / name).is_file() | (child / name).is_symlink():
                found.append((child, name))
    return found


def cmd_doctor(args: argparse.Namespace) -> int:
    result = doctor(args.runs_dir)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        print(f"{result['runs']} runs, {result['studies']} studies: {result['interrupted']} marked interrupted, "
              f"{result['checkpointed']} checkpointed, {result['running']} still running, "
              f"{result['unreadable']} unreadable" + "".join(f", {result[key]} {label}" for key, label in LEFT_ALONE
                                                             if result[key]))
        for path in result["marked"]:
            print(f"  interrupted: {path}")
    return 0
