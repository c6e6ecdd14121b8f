"""Bug reports the engine writes: a bundle with each run's first bad module's real inputs, weights and a repro,
which needs the run re-run (the engine's `export` command). This coordinator sends the command, holds the
scheduler while the engine re-runs (queued runs wait, the engine state says "exporting"), says its progress in
the status bar, EXPORT_INPUTS_DONE when written, and reports a failure in one line. The export dialog
(dialogs/bundle_export_dialog.py) talks to it; a bundle without the inputs is written by the dialog itself."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter
from ghostviewer.gui.link.engine_client import EngineClient
from ghostviewer.gui.link.job_scheduler import JobScheduler
from ghostviewer.record.sizes import size_words as human_size  # bundle_export_dialog imports it from here

log = logging.getLogger("ghostviewer.gui")


class ExportCoordinator(QObject):
    sigMessage = Signal(str)  # a line for the status bar
    exported = Signal(dict)  # the engine's `exported` event

    def __init__(self, engine: EngineClient, scheduler: JobScheduler, reporter: ErrorReporter,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine, self.scheduler, self.reporter = engine, scheduler, reporter
        self.pending: dict[int, str] = {}  # command id -> bundle path
        engine.sigEvent.connect(self._on_event)
        engine.sigEngineDied.connect(self._on_engine_died)

    def export_with_inputs(self, run_dir: str, path: str, options: dict[str, bool]) -> int:
        """Have the engine write the bundle of `run_dir` to `path`; the command's id, or -1 (reported) when
        there is no file name or no engine to send it to."""
        if not path:
            self.reporter.report(messages.EXPORT_FAILED.format(message=messages.EXPORT_NO_FILE))
            return -1
        ident = self.engine.send("export", run_dirs=[run_dir], out=path, **options)
        if ident < 0:
            self.reporter.report(messages.EXPORT_FAILED.format(message=messages.EXPORT_NO_ENGINE))
            return -1
        self.pending[ident] = path
        self.scheduler.set_busy("export", True)  # queued runs wait for the re-run
        self._say(messages.EXPORT_INPUTS_STARTED.format(path=path))
        return ident

    def _settle(self) -> None:
        if not self.pending:
            self.scheduler.set_busy("export", False)

    def _on_event(self, event: dict[str, Any]) -> None:
        name, ident = event.get("event"), event.get("id")
        if ident not in self.pending:
            return
        if name == "export_progress":
            self._say(messages.EXPORT_INPUTS_PROGRESS.format(run_id=event.get("run_id"), module=event.get("module")))
        elif name == "exported":
            self.pending.pop(ident)  # type: ignore[arg-type]
            size = human_size(int(event.get("size") or 0))
            isolate = next((run.get("isolate") for run in event.get("runs") or [] if run.get("isolate")), None) or {}
            text = (messages.EXPORT_INPUTS_DONE.format(module=isolate.get("module"), path=event.get("bundle"),
                                                       size=size)
                    if isolate.get("folder") else
                    messages.EXPORT_INPUTS_NONE.format(path=event.get("bundle"), size=size,
                                                       reason=isolate.get("reason")))
            self._settle()
            self._say(text)
            self.exported.emit(event)
        elif name in ("export_failed", "error"):
            self.pending.pop(ident)  # type: ignore[arg-type]
            self._settle()
            why = event.get("error") or event.get("message") or "unknown error"
            if name == "error":  # the scheduler reports an engine error already: the status bar only
                self._say(messages.EXPORT_FAILED.format(message=why))
            else:
                self.reporter.report(messages.EXPORT_FAILED.format(message=why))

    def _on_engine_died(self, _reason: str) -> None:
        if self.pending:
            self.pending.clear()
            self._settle()
            self.reporter.report(messages.EXPORT_FAILED.format(message=messages.ENGINE_GONE))

    def _say(self, text: str) -> None:
        log.info(text)
        self.sigMessage.emit(text)
