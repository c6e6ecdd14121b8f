"""Judging the shown run against something known: Run ▸ Compare with a known-good model… (a pipeline folder: the
engine runs the shown run's call on it and names where the run first leaves its range — shown in the Compare
dock, the reference's run beside the shown one, the departing module in focus) and Run ▸ Judge against baseline
file… (the engine makes the call again judged by that file: its verdict and what it compared against, in a line).
Both go through the engine's `judge_against` command; `ReferenceActions` asks for the folder or file."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QWidget

from ghostviewer.gui.link.engine_client import EngineClient
from ghostviewer.gui.models.compare_model import CompareModel

log = logging.getLogger("ghostviewer.gui")

NO_RUN = "Open or make a run first: it is what the known-good model or the baseline judges"
NO_ENGINE = "the engine is not running"
STARTED_REFERENCE = "Running the shown run's call on {source}…"
STARTED_BASELINE = "Making the shown run again, judged by {file}…"
DEPARTED = "Against {source}: {summary}"
STAYED = "Against {source}: the run {summary}"
JUDGED = "Judged by {file} ({match}{differences}): verdict {label}{anomaly}"
FAILED = "Could not judge the run: {message}"


def judged_line(result: dict[str, Any]) -> str:
    """One line: the verdict of a run judged by a chosen baseline file, and what it compared against."""
    judged = result.get("baseline") or {}
    differences = "; ".join(judged.get("differences") or [])
    anomaly = result.get("first_anomaly")
    where = f"; first anomaly {anomaly['kind']} at {anomaly['module']}" if anomaly else ""
    return JUDGED.format(file=judged.get("file") or "the baseline", match=judged.get("match") or "given",
                         differences=f": {differences}" if differences else "",
                         label=(result.get("verdict") or {}).get("label"), anomaly=where)


class ReferenceCoordinator(QObject):
    sigMessage = Signal(str)  # a line for the status bar
    departureFound = Signal(dict)  # the engine's reference result when the run leaves the reference's range
    referenceChecked = Signal(dict)  # every reference result (first_departure None when it stays in range)
    judged = Signal(dict)  # the run made again and judged by the chosen baseline file

    def __init__(self, engine: EngineClient, compare: CompareModel | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine, self.compare = engine, compare
        self.pending: dict[int, tuple[str, str]] = {}  # command id -> (kind, what it was judged against)
        engine.sigEvent.connect(self._on_event)
        engine.sigEngineDied.connect(self._on_engine_died)

    def with_reference(self, run_dir: str, source: str, runs_dir: str | None = None) -> int:
        """Have the engine run the run's call on `source`; the command's id, -1 (said) without an engine."""
        return self._send("reference", source, STARTED_REFERENCE.format(source=source), run_dir=run_dir,
                          reference=source, runs_dir=runs_dir)

    def with_baseline(self, run_dir: str, file: str, runs_dir: str | None = None) -> int:
        return self._send("baseline", file, STARTED_BASELINE.format(file=file), run_dir=run_dir, baseline=file,
                          runs_dir=runs_dir)

    def _send(self, kind: str, what: str, started: str, **fields: Any) -> int:
        ident = self.engine.send("judge_against", **{k: v for k, v in fields.items() if v is not None})
        if ident < 0:
            self._say(FAILED.format(message=NO_ENGINE))
            return -1
        self.pending[ident] = (kind, what)
        self._say(started)
        return ident

    def _on_event(self, event: dict[str, Any]) -> None:
        name = event.get("event")
        if name not in ("reference_finished", "judged", "error"):
            return
        asked = self.pending.pop(event.get("id"), None)  # type: ignore[arg-type]
        if asked is None:
            return
        if name == "error":
            self._say(FAILED.format(message=event.get("message")))
            return
        result = dict(event.get("result") or {})
        if name == "judged":
            self._say(judged_line(result))
            self.judged.emit(result)
            return
        departure = result.get("first_departure")
        self.referenceChecked.emit(result)
        if departure is None:
            self._say(STAYED.format(source=asked[1], summary=result.get("summary")))
            return
        if self.compare is not None and result.get("run_dir") and self.compare.open(
                str(event.get("run_dir")), str(result["run_dir"]), focus=False):
            self.compare.select_cell(str(departure["module"]), (departure["phase"], departure.get("step")))
        self._say(DEPARTED.format(source=asked[1], summary=result.get("summary")))
        self.departureFound.emit(result)

    def _on_engine_died(self, _reason: str) -> None:
        if self.pending:
            self._say(FAILED.format(message="the engine stopped"))
        self.pending.clear()

    def _say(self, text: str) -> None:
        log.info(text)
        self.sigMessage.emit(text)


class ReferenceActions(QObject):
    """The two Run-menu actions: ask for the pipeline folder or the baseline file, then the coordinator."""

    def __init__(self, coordinator: ReferenceCoordinator, shown_run: Callable[[], str | None],
                 runs_dir: Callable[[], str | None], parent: QWidget,
                 ask_folder: Callable[[], str] | None = None, ask_file: Callable[[], str] | None = None) -> None:
        super().__init__(parent)
        self.coordinator, self.shown_run, self.runs_dir = coordinator, shown_run, runs_dir
        self.ask_folder = ask_folder or (lambda: QFileDialog.getExistingDirectory(
            parent, "Known-good pipeline folder (model_index.json)"))
        self.ask_file = ask_file or (lambda: QFileDialog.getOpenFileName(
            parent, "Baseline file", str(Path(runs_dir() or ".") / "baselines"), "Baselines (*.json)")[0])

    def connect_actions(self, reference: QAction, baseline: QAction) -> None:
        reference.triggered.connect(self.compare_with_reference)
        baseline.triggered.connect(self.judge_against_baseline)

    def compare_with_reference(self) -> int | None:
        run_dir = self.shown_run()
        if not run_dir:
            self.coordinator.sigMessage.emit(NO_RUN)
            return None
        folder = self.ask_folder()
        if not folder:
            return None
        ident = self.coordinator.with_reference(run_dir, folder, self.runs_dir())
        return ident if ident >= 0 else None

    def judge_against_baseline(self) -> int | None:
        run_dir = self.shown_run()
        if not run_dir:
            self.coordinator.sigMessage.emit(NO_RUN)
            return None
        file = self.ask_file()
        if not file:
            return None
        ident = self.coordinator.with_baseline(run_dir, file, self.runs_dir())
        return ident if ident >= 0 else None


def install_reference_actions(state: Any, window: QWidget, actions: Any) -> ReferenceActions:
    """The window's two actions wired to a coordinator on the controller's engine and Compare model; its lines go
    to the status bar with the controller's."""
    controller = state.controller
    coordinator = ReferenceCoordinator(controller.engine, controller.compare, controller)
    coordinator.sigMessage.connect(controller.sigMessage)
    reference = ReferenceActions(coordinator, lambda: state.timeline.run_dir,
                                 lambda: str(state.history.runs_dir), window)
    reference.connect_actions(actions.compare_reference, actions.judge_baseline)
    return reference
