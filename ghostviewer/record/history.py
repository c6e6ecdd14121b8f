"""Listing the runs in a runs folder."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from .errors import RecordError
from .reader import RunRecord


def _created(record: RunRecord) -> float:
    try:
        return datetime.fromisoformat(str(record.created_at)).timestamp()
    except (TypeError, ValueError, RecordError):
        return record.path.stat().st_mtime


def list_runs(runs_dir: Path) -> list[RunRecord]:
    """The runs in runs_dir, newest first; folders that are not (readable) runs are skipped."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    keyed: list[tuple[float, str, RunRecord]] = []
    for child in runs_dir.iterdir():
        if not child.is_dir():
            continue
        try:
            record = RunRecord(child)
            keyed.append((_created(record), record.run_id, record))
        except (RecordError, OSError):
            continue
    keyed.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [record for _, _, record in keyed]
