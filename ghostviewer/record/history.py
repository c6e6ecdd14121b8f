"""Listing the runs and studies in a runs folder, newest first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from .errors import RecordError
from .reader import RunRecord
from .study_reader import StudyRecord

_R = TypeVar("_R", RunRecord, StudyRecord)


def _created(record: RunRecord | StudyRecord) -> float:
    try:
        return datetime.fromisoformat(str(record.created_at)).timestamp()
    except (TypeError, ValueError, RecordError):
        return record.path.stat().st_mtime


def _newest_first(runs_dir: Path, open_record: Callable[[Path], _R], record_id: Callable[[_R], str]) -> list[_R]:
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    keyed: list[tuple[float, str, _R]] = []
    for child in runs_dir.iterdir():
        if not child.is_dir():
            continue
        try:
            record = open_record(child)
            keyed.append((_created(record), record_id(record), record))
        except (RecordError, OSError):
            continue
    keyed.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [record for _, _, record in keyed]


def list_runs(runs_dir: Path) -> list[RunRecord]:
    """The runs in runs_dir, newest first; folders that are not (readable) runs are skipped."""
    return _newest_first(runs_dir, RunRecord, lambda record: record.run_id)


def list_studies(runs_dir: Path) -> list[StudyRecord]:
    """The studies in runs_dir, newest first; folders that are not (readable) studies are skipped."""
    return _newest_first(runs_dir, StudyRecord, lambda record: record.study_id)


def list_entries(runs_dir: Path) -> list[RunRecord | StudyRecord]:
    """Runs and studies together, newest first: what the history shows (a study's child runs stay inside it)."""
    entries: list[RunRecord | StudyRecord] = [*list_runs(runs_dir), *list_studies(runs_dir)]
    return sorted(entries, key=lambda r: _created(r), reverse=True)  # stable: ties keep runs, then studies


def watched_words(watched: object) -> str:
    """'watched: app.py · call 7' for a run's environment["watched"] (a call a watcher recorded in the user's own
    program); "" for GhostViewer's own runs."""
    if not isinstance(watched, dict):
        return ""
    program = program_name(watched.get("program"))
    call = watched.get("call")
    return f"watched: {program}" + (f" · call {call}" if isinstance(call, int) else "")


def program_name(command: object) -> str:
    """The program's own name from a watch study's or a watched run's "program" ("app.py --port 8000" → "app.py")."""
    words = str(command or "").split()
    return Path(words[0]).name if words else "python"
