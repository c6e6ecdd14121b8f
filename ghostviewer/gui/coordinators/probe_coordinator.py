"""Run ▸ Probe the pipeline: the loaded pipeline's probe battery (the questions that need no baseline — does the
prompt, the negative prompt, the guidance, the seed have an effect; is it deterministic; does float16 agree with
float32, the math attention kernel with the default; does a batch give each image as if made alone; does it
converge with more steps) through the engine's `probe` command. Progress goes to the status bar; the report opens
in a dialog (dialogs/probe_report.py), one row per probe, and the study it made appears in the Runs history."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui.dialogs.probe_report import ProbeReport, summary_line
from ghostviewer.gui.link.engine_client import EngineClient

log = logging.getLogger("ghostviewer.gui")

NO_ENGINE = "Cannot probe: the engine is not running"
STARTED = "Probing the loaded pipeline (about a dozen short runs)…"
PROGRESS = "Probing: {probe}…"
FAILED = "Could not probe the pipeline: {message}"


class ProbeCoordinator(QObject):
    sigMessage = Signal(str)
    finished = Signal(dict)  # the engine's probe report (CONTRACT's probe dict)

    def __init__(self, engine: EngineClient, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self.pending: int | None = None
        engine.sigEvent.connect(self._on_event)
        engine.sigEngineDied.connect(self._on_engine_died)

    @property
    def busy(self) -> bool:
        return self.pending is not None

    def probe(self, runs_dir: str | None, steps: int | None = None) -> int:
        """Ask the engine for the battery; the command's id, or -1 (said) when it cannot be sent or one runs."""
        if self.pending is not None:
            self._say("The probes are already running")
            return -1
        fields = {k: v for k, v in {"runs_dir": runs_dir, "steps": steps}.items() if v is not None}
        ident = self.engine.send("probe", **fields)
        if ident < 0:
            self._say(NO_ENGINE)
            return -1
        self.pending = ident
        self._say(STARTED)
        return ident

    def cancel(self) -> None:
        if self.pending is not None:
            self.engine.send("cancel", run=self.pending)

    def _on_event(self, event: dict[str, Any]) -> None:
        if self.pending is None or event.get("id") != self.pending:
            return
        name = event.get("event")
        if name == "probe_progress":
            if event.get("stage") == "probe" and event.get("probe"):
                self._say(PROGRESS.format(probe=str(event["probe"]).replace("_", " ")))
            return
        if name not in ("probe_finished", "error"):
            return
        self.pending = None
        if name == "error":
            self._say(FAILED.format(message=event.get("message")))
            return
        report = dict(event.get("result") or {})
        self._say(summary_line(report))
        self.finished.emit(report)

    def _on_engine_died(self, _reason: str) -> None:
        if self.pending is not None:
            self._say(FAILED.format(message="the engine stopped"))
        self.pending = None

    def _say(self, text: str) -> None:
        log.info(text)
        self.sigMessage.emit(text)


def install_probe_action(state: Any, window: Any, actions: Any) -> tuple[ProbeCoordinator, Any]:
    """Run ▸ Probe the pipeline wired to a coordinator on the controller's engine: its lines go to the status bar,
    its report to a dialog whose rows open their evidence runs."""
    controller = state.controller
    coordinator = ProbeCoordinator(controller.engine, controller)
    coordinator.sigMessage.connect(controller.sigMessage)
    report = ProbeReport(window, open_run=state.opener.open_run)
    coordinator.finished.connect(report.show_report)
    coordinator.finished.connect(lambda _report: state.history.refresh())  # the probe study's row
    actions.probe.triggered.connect(lambda: coordinator.probe(str(state.history.runs_dir)))
    return coordinator, report
