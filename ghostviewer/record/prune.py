"""Pruning a runs folder (`ghostviewer prune`, api.prune): whole run folders go, by age, by verdict, keeping the
anomalous ones or the newest N, so a watched service's runs folder does not grow without bound.

What is a candidate: each run folder of the runs folder; each kept call of a watch study (the study stays: its rows
are the service's history, and a pruned call's row becomes a summary row, "not kept (pruned …)"); each other study
as a whole (a sweep, a replay, a bisection: its index and its own runs together; by age and --keep-last only, it
has no one verdict). Never removed: a record still being written (its writer's lock, lock.py, is taken before
anything is removed, so a writer cannot start meanwhile), a run a kept study refers to, anything that is not a
GhostViewer record (a stray file or folder, a link, an unreadable record — each named in `left`). Links are never
followed: a folder is removed only when it is a real folder inside the runs folder, and its size counts its own
files only. A folder goes whole or not at all: every folder in it must be one this process may change (checked
before anything goes), and it is renamed out of the listing (`.pruning-…`, one atomic step) before its files are
deleted, the record's database first; what a failure then leaves is hidden, never a half record, and `left` names it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from . import schema
from .errors import RecordError
from .lock import LOCK_NAME, WriterLock, writer_alive
from .runs_index import INDEX_FILES, forget, list_rows
from .sqlite_store import dumps
from .study_reader import OWN_RUNS_ONLY, SUMMARY_ROLE, StudyRecord
from .study_schema import RUNS_FOLDER, STUDY_DB_NAME

VERDICT_WORDS = ("ok", "blank", "noise", "nan", "saturated", "color_cast", "off_prompt")
STATUS_WORDS = ("failed", "cancelled", "interrupted")  # runs that ended without a verdict
OWN_FOLDERS = {"logs": "the CLI's log folder", "baselines": "the baselines folder",
               "bundles": "the window's extracted bug reports"}
BEING_WRITTEN = "being written (left alone)"
PRUNING = ".pruning-"  # a removal under way, or what a failed one left: never a record
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*\Z")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


def parse_age(text: str | float | int) -> float:
    """Seconds from '7d', '12h', '30m', '90s', '2w' or a bare number of days; RecordError (one line) otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise RecordError(f"--older-than must not be negative, not {text}")
        return float(text) * 86400
    match = _AGE.match(str(text))
    if match is None:
        raise RecordError(f"--older-than takes an age such as 7d, 12h, 30m or 2w, not {str(text)!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_verdicts(values: Iterable[str] | str | None) -> frozenset[str] | None:
    """The verdict and status words to prune ('ok', 'nan,blank', …); RecordError naming an unknown one."""
    if values is None:
        return None
    words = [w.strip() for v in ([values] if isinstance(values, str) else values) for w in str(v).split(",")]
    words = [w for w in words if w]
    known = VERDICT_WORDS + STATUS_WORDS
    for word in words:
        if word not in known:
            raise RecordError(f"unknown verdict {word!r} for --verdict (one of {', '.join(known)})")
    if not words:
        raise RecordError(f"--verdict needs a verdict (one of {', '.join(known)})")
    return frozenset(words)


@dataclass
class _Candidate:
    path: Path
    kind: str  # "run" | "watched call" | "study"
    created: float
    label: str | None  # verdict label, or the status of a run that ended without one; None for a study
    anomalous: bool
    study: Path | None = None  # the watch study a call belongs to
    position: int | None = None  # its row in that study


def _timestamp(created: object, folder: Path) -> float:
    """When the record was made: its created_at, else its folder's mtime, else 0 — always a time that can be written
    back as a date (a hand-edited "0001-01-01T00:00:00+23:59" is year 0 in UTC, which no datetime holds)."""
    for moment in (lambda: datetime.fromisoformat(str(created)).timestamp(), lambda: folder.lstat().st_mtime):
        with contextlib.suppress(TypeError, ValueError, OverflowError, OSError):
            stamp = moment()
            datetime.fromtimestamp(stamp).astimezone()
            return stamp
    return 0.0


def _label(status: str, verdict: str | None) -> str | None:
    return status if status in STATUS_WORDS else verdict


def _bad(label: str | None, anomaly: object, status: str | None) -> bool:
    return (label not in (None, "ok")) or bool(anomaly) or status == "failed"


def _real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _linked(folder: Path, db_name: str) -> bool:
    return any(os.path.islink(folder / name) for name in (db_name, f"{db_name}-wal", f"{db_name}-shm", LOCK_NAME))


def folder_bytes(folder: Path) -> int:
    """The bytes of the regular files under folder (links neither followed nor counted)."""
    total = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


class _Survey:
    """What the runs folder holds: candidates, what is left and why, the runs kept studies refer to."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        self.candidates: list[_Candidate] = []
        self.left: list[dict[str, str]] = []
        self.referenced: dict[Path, tuple[Path, str]] = {}  # a top-level run → the study listing it, in words
        self.watch_studies: dict[Path, StudyRecord] = {}
        runs: list[Path] = []
        with os.scandir(runs_dir) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = Path(entry.path)
                if entry.name in INDEX_FILES:
                    continue
                if entry.name.startswith(PRUNING):
                    self._leave(path, "what a prune could not delete whole (not a record): delete it by hand")
                    continue
                if entry.is_symlink():
                    self._leave(path, "a link (never followed)")
                elif not entry.is_dir(follow_symlinks=False):
                    self._leave(path, "not a GhostViewer record")
                elif os.path.lexists(path / schema.DB_NAME):
                    if _linked(path, schema.DB_NAME):
                        self._leave(path, "a run with linked files (left alone)")
                    else:
                        runs.append(path)
                elif os.path.lexists(path / STUDY_DB_NAME):
                    self._study(path)
                elif entry.name in OWN_FOLDERS:
                    self._leave(path, f"{OWN_FOLDERS[entry.name]} (not pruned)")
                else:
                    self._leave(path, "not a GhostViewer record")
        self._runs(runs, "run")

    def _leave(self, path: Path, reason: str) -> None:
        self.left.append({"path": str(path), "reason": reason})

    def _runs(self, folders: list[Path], kind: str, study: Path | None = None,
              positions: dict[Path, int] | None = None) -> None:
        rows, unreadable, _ = list_rows(self.runs_dir if study is None else study / RUNS_FOLDER, folders)
        for folder, problem in unreadable:
            self._leave(folder, f"unreadable ({problem})")
        for folder, _stamp, row in rows:
            status = row.live_status(folder)
            label = _label(status, row.verdict)
            self.candidates.append(_Candidate(folder, kind, _timestamp(row.created_at, folder), label,
                                              _bad(label, row.first_anomaly, status), study,
                                              None if positions is None else positions.get(folder)))

    def _study(self, path: Path) -> None:
        if _linked(path, STUDY_DB_NAME):
            self._leave(path, "a study with linked files (left alone)")
            return
        try:
            study = StudyRecord(path)
            members = study.runs()
        except (RecordError, OSError) as exc:
            self._leave(path, f"unreadable ({' '.join(str(exc).split())})")
            return
        home = path / RUNS_FOLDER
        if study.kind == "watch":
            self.watch_studies[path] = study
            positions = {m.run_dir: m.position for m in members
                         if m.role != SUMMARY_ROLE and m.run_dir.parent == home and _real_folder(m.run_dir)
                         and os.path.lexists(m.run_dir / schema.DB_NAME) and not _linked(m.run_dir, schema.DB_NAME)}
            self._runs(sorted(positions, key=lambda p: p.name, reverse=True), "watched call", path, positions)
            return
        if study.kind not in OWN_RUNS_ONLY:
            for member in members:  # a replay's original, a bisection's bad run: kept while the study stays
                outside = member.run_dir.parent == self.runs_dir and not member.run_dir.is_relative_to(path)
                if outside:
                    self.referenced.setdefault(member.run_dir, (path, f"{study.kind} study {study.study_id}"))
        anomalous = any(_bad(m.verdict, m.first_anomaly, m.status) for m in members)
        self.candidates.append(_Candidate(path, "study", _timestamp(study.created_at, path), None, anomalous))


def _chosen(survey: _Survey, older_than_s: float | None, verdicts: frozenset[str] | None, keep_anomalies: bool,
            keep_last: int | None, now: float) -> list[_Candidate]:
    newest = sorted(survey.candidates, key=lambda c: (c.created, c.path.name), reverse=True)
    kept_newest = {id(c) for c in newest[:keep_last]} if keep_last else set()
    chosen = []
    for c in newest:
        if id(c) in kept_newest:
            continue
        if older_than_s is not None and c.created > now - older_than_s:
            continue
        if verdicts is not None and (c.kind == "study" or c.label not in verdicts):
            continue
        if keep_anomalies and c.anomalous:
            continue
        chosen.append(c)
    staying = {c.path for c in survey.candidates if c.kind == "study"} - {c.path for c in chosen}
    out = []
    for c in chosen:  # a run a study that stays refers to stays too
        by = survey.referenced.get(c.path)
        if by is not None and by[0] in staying:
            survey._leave(c.path, f"referenced by {by[1]} (kept)")
        else:
            out.append(c)
    return out


def _blocked(path: Path) -> str | None:
    """Why `path` cannot go whole (None when it can): a folder in it, or the folder holding it, this process may not
    change. os.access also refuses an immutable folder to root."""
    for root, dirs, _files in os.walk(path, followlinks=False):
        for folder in (root, *(os.path.join(root, d) for d in dirs if not os.path.islink(os.path.join(root, d)))):
            if not os.access(folder, os.W_OK | os.X_OK):
                return f"{Path(folder).relative_to(path.parent)} may not be changed by this user"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return f"{path.parent} may not be changed by this user"
    return None


def _delete(hidden: Path) -> None:
    """The record's database and lock first, so that no reader ever takes what is left for a record."""
    for name in (schema.DB_NAME, STUDY_DB_NAME):
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(hidden / f"{name}{suffix}")
    shutil.rmtree(hidden)  # never follows a link inside (it unlinks the link)


def _why_kept(c: _Candidate, locked: bool = False) -> str:
    """Why a chosen record stays ("" when it can go)."""
    if not _real_folder(c.path) or (not locked and not _idle(c)):
        return BEING_WRITTEN
    blocked = _blocked(c.path)
    return f"cannot be removed whole: {blocked} (left untouched)" if blocked else ""


def _remove(c: _Candidate) -> tuple[int | None, str]:
    """Remove one record folder, whole or not at all, while holding its writer's lock: (its bytes, "") when it went,
    (None, why) when it stays."""
    if not _real_folder(c.path) or not _idle(c):
        return None, BEING_WRITTEN
    try:
        lock = WriterLock.acquire(c.path, c.kind)  # no writer can start (resume a study, annex an image) meanwhile
    except RecordError:
        return None, BEING_WRITTEN
    try:
        why = _why_kept(c, locked=True)
        if why:
            return None, why
        size = folder_bytes(c.path)
        hidden = c.path.with_name(f"{PRUNING}{c.path.name}")
        try:
            os.rename(c.path, hidden)
        except OSError as exc:
            return None, f"cannot be removed: {exc.strerror or exc} (left untouched)"
        try:
            _delete(hidden)
        except OSError as exc:
            return None, (f"removed from the listing, but {hidden.name} could not be deleted whole "
                          f"({exc.strerror or exc}): delete what is left by hand")
    finally:
        lock.release()
    return size, ""


def _idle(c: _Candidate) -> bool:
    """No live writer holds the record (nor, for a study, any of its own runs)."""
    if writer_alive(c.path) is not False:
        return False
    if c.kind != "study":
        return True
    try:
        with os.scandir(c.path / RUNS_FOLDER) as entries:
            return all(writer_alive(e.path) is False for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return True


def _mark_pruned(study: Path, positions: list[int], live: bool) -> None:
    """A watch study's rows of pruned calls become summary rows; its result's kept count follows (unless its
    program is still running: it writes its own counts)."""
    note = f"not kept (pruned {time.strftime('%Y-%m-%d')})"
    conn = sqlite3.connect(study / STUDY_DB_NAME, timeout=10.0)
    try:
        conn.executemany("UPDATE runs SET role = ?, note = ? WHERE position = ?",
                         [(SUMMARY_ROLE, note, p) for p in positions])
        conn.execute("INSERT INTO events (t, level, kind, message, data) VALUES (?, 'info', 'pruned', ?, ?)",
                     (time.time(), f"{len(positions)} kept call(s) removed by ghostviewer prune",
                      dumps({"positions": positions})))
        row = conn.execute("SELECT value FROM meta WHERE key = 'result'").fetchone()
        result = schema.loads(row[0]) if row else None
        if not live and isinstance(result, dict) and isinstance(result.get("kept"), int):
            kept = sum(1 for (run_dir,) in conn.execute("SELECT run_dir FROM runs WHERE role != ?", (SUMMARY_ROLE,))
                       if (study / run_dir).is_dir())
            conn.execute("UPDATE meta SET value = ? WHERE key = 'result'", (dumps({**result, "kept": kept}),))
        conn.commit()
    finally:
        conn.close()


def prune(runs_dir: str | Path, older_than: str | float | None = None, verdict: Iterable[str] | str | None = None,
          keep_anomalies: bool = False, keep_last: int | None = None, dry_run: bool = False,
          now: float | None = None) -> dict[str, Any]:
    """Remove the records of runs_dir that match every criterion given (see the module's docstring). Returns
    {"runs_dir", "dry_run", "removed": [{"path", "kind", "created_at", "verdict", "bytes"}], "bytes_freed",
    "kept", "left": [{"path", "reason"}], "studies_updated": [path]}. RecordError (one line) for bad input."""
    folder = Path(runs_dir).expanduser()
    if not folder.is_dir():
        raise RecordError(f"not a runs folder: {folder}")
    older_s = None if older_than is None else parse_age(older_than)
    verdicts = parse_verdicts(verdict)
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0):
        raise RecordError(f"--keep-last takes a number of runs (0 or more), not {keep_last!r}")
    if older_s is None and verdicts is None and keep_last is None:
        raise RecordError("say what to remove: --older-than AGE, --verdict WORD or --keep-last N "
                          "(nothing is removed without one)")
    survey = _Survey(folder)
    chosen = _chosen(survey, older_s, verdicts, keep_anomalies, keep_last, time.time() if now is None else now)
    removed: list[dict[str, Any]] = []
    pruned_calls: dict[Path, list[int]] = {}
    gone: dict[Path, list[str]] = {}
    for c in chosen:
        if dry_run:
            why = _why_kept(c)
            size = None if why else folder_bytes(c.path)
        else:
            size, why = _remove(c)
        if size is None:
            survey._leave(c.path, why)
            if not dry_run and not os.path.lexists(c.path):  # renamed away, then not deleted whole: out of the index
                gone.setdefault(c.path.parent, []).append(c.path.name)
            continue
        removed.append({"path": str(c.path), "kind": c.kind, "verdict": c.label, "bytes": size,
                        "created_at": datetime.fromtimestamp(c.created).astimezone().isoformat(timespec="seconds")})
        gone.setdefault(c.path.parent, []).append(c.path.name)
        if c.study is not None and c.position is not None:
            pruned_calls.setdefault(c.study, []).append(c.position)
    updated = []
    if not dry_run:
        for parent, names in gone.items():
            forget(parent, names)
        for study, positions in pruned_calls.items():
            try:
                _mark_pruned(study, positions, writer_alive(study) is not False)
                updated.append(str(study))
            except sqlite3.Error as exc:
                survey._leave(study, f"its index could not be updated ({exc}); its pruned calls read as not kept")
    return {"runs_dir": str(folder), "dry_run": bool(dry_run), "removed": removed,
            "bytes_freed": sum(r["bytes"] for r in removed), "kept": len(survey.candidates) - len(removed),
            "left": survey.left, "studies_updated": updated}
