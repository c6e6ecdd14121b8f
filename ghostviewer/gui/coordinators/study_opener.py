"""A study picked in the history opens in its natural view: a replay (or compare) study as the comparison of the
original with its first diverging re-run, a bisection as its trail, a sweep in the sweep gallery. Other kinds
are listed only, for now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.coordinators.bisect_coordinator import BisectCoordinator
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.models.compare_model import CompareModel
from ghostviewer.record import RecordError, StudyRecord
from ghostviewer.record.study_reader import StudyRun


def replay_pair(runs: list[StudyRun], result: dict[str, Any] | None) -> tuple[Path, Path] | None:
    """(original, the first diverging re-run) of a replay study; the first re-run when none diverged."""
    original = next((r for r in runs if r.role == "original"), None)
    replays = [r for r in runs if r.role == "replay"]
    if original is None or not replays:
        return None
    first = (result or {}).get("first_divergence") or {}
    chosen = next((r for r in replays if (r.key or {}).get("replay") == first.get("run")), None)
    chosen = chosen or next((r for r in replays if r.note.startswith("diverged")), replays[0])
    return original.run_dir, chosen.run_dir


class StudyOpener(QObject):
    viewOpened = Signal(str)  # compare | bisect | sweep: the window raises that dock

    def __init__(self, compare: CompareModel, bisects: BisectCoordinator, reporter: ErrorReporter,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.compare, self.bisects, self.reporter = compare, bisects, reporter
        self.sweeps: Any = None  # the SweepCoordinator (set with the sweep gallery): sweep studies open there

    def open_study(self, path: str | Path) -> str | None:
        """Open the study's view; which one ("compare", "bisect", "sweep"), or None for a kind with no view."""
        try:
            study = StudyRecord(path)
            kind, runs, result = study.kind, study.runs(), study.result
        except RecordError as exc:
            self.reporter.note(messages.STUDY_FAILED.format(path=path, message=one_line(exc)))
            return None
        if kind == "bisect" and self.bisects.show_study(study.path):
            self.viewOpened.emit("bisect")
            return "bisect"
        if kind == "sweep" and self.sweeps is not None and self.sweeps.show_study(study.path):
            self.viewOpened.emit("sweep")
            return "sweep"
        if kind in ("replay", "compare"):
            pair = replay_pair(runs, result) if kind == "replay" else (
                (runs[0].run_dir, runs[1].run_dir) if len(runs) >= 2 else None)
            if pair is not None and self.compare.open(*pair):
                self.viewOpened.emit("compare")
                return "compare"
        return None
