"""A study picked in the history opens in its natural view: a replay (or compare) study as the comparison of the
original with its first diverging re-run, a bisection as its trail, a sweep in the sweep gallery, a watch study
(the calls of the user's own program) as its newest failed kept call in the timeline — its newest kept call when
none failed; a watch study that kept no call (keep="anomalies", all healthy) says so. Other kinds are listed only,
for now."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.coordinators.bisect_coordinator import BisectCoordinator
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.models.compare_model import CompareModel
from ghostviewer.record import RecordError, StudyRecord
from ghostviewer.record.study_reader import SUMMARY_ROLE, StudyRun

WATCH_NOTHING_KEPT = ("The watch study {study_id} kept no full record: {calls} call(s) recorded as a summary row "
                      "only (keep='all' keeps every call)")
BAD_LABELS_OK = ("ok", None)  # a child's verdict label that is not a failure (None: not judged, e.g. a latent)


def watched_call(runs: list[StudyRun]) -> Path | None:
    """The call a watch study opens on: its newest kept call that failed (a bad verdict, an anomaly, an error),
    else its newest kept call; None when it kept none."""
    kept = [r for r in runs if r.kept]
    failed = [r for r in kept if r.verdict not in BAD_LABELS_OK or r.first_anomaly or r.status not in ("done", None)]
    chosen = (failed or kept or [None])[-1]
    return None if chosen is None else chosen.run_dir


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
    viewOpened = Signal(str)  # compare | bisect | sweep | run: the window raises that dock

    def __init__(self, compare: CompareModel, bisects: BisectCoordinator, reporter: ErrorReporter,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.compare, self.bisects, self.reporter = compare, bisects, reporter
        self.sweeps: Any = None  # the SweepCoordinator (set with the sweep gallery): sweep studies open there
        self.open_run: Callable[[str], bool] | None = None  # the window's run opener: watch studies open a call

    def open_study(self, path: str | Path) -> str | None:
        """Open the study's view; which one ("compare", "bisect", "sweep", "run"), or None for a kind with no
        view."""
        try:
            study = StudyRecord(path)
            kind = study.kind
            if kind in ("bisect", "sweep"):  # their views read the study themselves (a sweep's 10,000 runs once)
                runs, result = [], None
            else:
                runs, result = study.runs(), study.result
        except RecordError as exc:
            self.reporter.note(messages.STUDY_FAILED.format(path=path, message=one_line(exc)))
            return None
        if kind == "bisect" and self.bisects.show_study(study.path):
            self.viewOpened.emit("bisect")
            return "bisect"
        if kind == "sweep" and self.sweeps is not None and self.sweeps.show_study(study):  # opened once
            self.viewOpened.emit("sweep")
            return "sweep"
        if kind == "watch" and self.open_run is not None:
            call = watched_call(runs)
            if call is None:
                calls = sum(1 for r in runs if r.role == SUMMARY_ROLE)
                self.reporter.note(WATCH_NOTHING_KEPT.format(study_id=study.study_id, calls=calls))
                return None
            if self.open_run(str(call)):
                self.viewOpened.emit("run")
                return "run"
            return None
        if kind in ("replay", "compare"):
            pair = replay_pair(runs, result) if kind == "replay" else (
                (runs[0].run_dir, runs[1].run_dir) if len(runs) >= 2 else None)
            if pair is not None and self.compare.open(*pair):
                self.viewOpened.emit("compare")
                return "compare"
        return None
