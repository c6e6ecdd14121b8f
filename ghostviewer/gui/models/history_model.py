"""Every run in the runs folder, read from the records alone (no engine), cached by file modification time."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from ghostviewer.record import RecordError, RunRecord

DB_FILES = ("run.sqlite", "run.sqlite-wal")


@dataclass(frozen=True)
class RunEntry:
    path: str
    run_id: str
    created: str
    prompt: str
    seed: object
    steps: object
    status: str  # running | done | failed | cancelled (running + not live = incomplete)
    verdict: str | None
    error: str | None

    def state(self, live_run: str | None) -> str:
        """What the history shows: the verdict label, or running / incomplete / cancelled / failed."""
        if self.status == "running":
            return "running" if live_run == self.path else "incomplete"
        if self.status == "done":
            return self.verdict or "done"
        return self.status


def _stamp(folder: Path) -> tuple[int, ...]:
    stamps = []
    for name in DB_FILES:
        try:
            stamps.append(os.stat(folder / name).st_mtime_ns)
        except OSError:
            stamps.append(0)
    return tuple(stamps)


def read_entry(folder: Path) -> RunEntry:
    record = RunRecord(folder)
    summary = record.summary()
    verdict = summary.get("verdict") or {}
    return RunEntry(str(record.path), record.run_id, str(record.created_at or ""), str(summary.get("prompt") or ""),
                    summary.get("seed"), summary.get("steps"), str(summary.get("status")),
                    verdict.get("label") if isinstance(verdict, dict) else None, record.error)


class HistoryModel(QObject):
    changed = Signal()

    def __init__(self, runs_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runs_dir = Path(runs_dir)
        self.entries: list[RunEntry] = []
        self.live_run: str | None = None
        self._cache: dict[str, tuple[tuple[int, ...], RunEntry]] = {}

    def set_runs_dir(self, runs_dir: Path) -> None:
        self.runs_dir = Path(runs_dir)
        self._cache.clear()
        self.refresh()

    def set_live_run(self, run_dir: str | None) -> None:
        self.live_run = None if run_dir is None else str(Path(run_dir))
        self.changed.emit()

    def refresh(self) -> None:
        entries: list[RunEntry] = []
        cache: dict[str, tuple[tuple[int, ...], RunEntry]] = {}
        try:
            children = [c for c in self.runs_dir.iterdir() if c.is_dir()] if self.runs_dir.is_dir() else []
        except OSError:
            children = []
        for child in children:
            stamp = _stamp(child)
            if stamp == (0, 0):
                continue  # not a run folder
            cached = self._cache.get(str(child))
            if cached is not None and cached[0] == stamp:
                entry = cached[1]
            else:
                try:
                    entry = read_entry(child)
                except (RecordError, OSError):
                    continue
            cache[str(child)] = (stamp, entry)
            entries.append(entry)
        entries.sort(key=lambda e: (e.created, e.run_id), reverse=True)
        self._cache, self.entries = cache, entries
        self.changed.emit()

    def entry(self, path: str) -> RunEntry | None:
        return next((e for e in self.entries if e.path == str(Path(path))), None)
