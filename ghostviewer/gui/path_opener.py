"""Opening things: a path dropped on the window or given on the command line, a run from the history."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject

from ghostviewer.gui import messages
from ghostviewer.gui.controller import RunController
from ghostviewer.gui.coordinators.run_coordinator import same_path
from ghostviewer.gui.dialogs.error_reporter import one_line
from ghostviewer.gui.drops import classify_path
from ghostviewer.gui.models.queue_model import Job
from ghostviewer.record import RecordError
from ghostviewer.record.bundle import open_bundle

BUNDLES_FOLDER = "bundles"  # bundles are extracted into <runs_dir>/bundles/<name>-<time>/


class PathOpener(QObject):
    def __init__(self, controller: RunController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.sweeps: Any = None  # the SweepCoordinator (set with the sweep gallery): dropped lists are swept

    def open_run(self, path: str | Path) -> bool:
        c = self.controller
        running = c.queue.running()
        try:
            c.timeline.open_run(path, live=running is not None and same_path(running.run_dir, str(path)))
        except RecordError as exc:
            c.reporter.note(messages.NOT_A_RUN.format(path=path, message=one_line(exc)))
            return False
        return True

    def open_bundle(self, path: str | Path) -> list[Path]:
        """Extract a bug-report bundle (checked; nothing in it runs) and show its first run read-only."""
        c = self.controller
        try:
            runs = open_bundle(path, Path(c.history.runs_dir) / BUNDLES_FOLDER)
        except (RecordError, OSError) as exc:  # asked for by name: a dialog, not a status-bar line
            c.reporter.report(messages.BUNDLE_FAILED.format(path=path, message=one_line(exc)), details=str(exc))
            return []
        if self.open_run(runs[0]):
            c.sigMessage.emit(messages.BUNDLE_OPENED.format(name=Path(path).name, count=len(runs),
                                                            run_id=runs[0].name, folder=runs[0].parents[1]))
        return runs

    def queue_prompt_list(self, path: str | Path) -> list[Job]:
        return self.controller.runs.queue_prompt_list(path)

    def open_path(self, path: str | Path) -> None:
        """A pipeline, a checkpoint, a run, a runs folder or a prompt list: do the obvious thing with it."""
        c = self.controller
        kind = classify_path(path)
        if kind in ("pipeline", "checkpoint"):
            c.pipeline.set_source(str(path))
        elif kind == "run":
            self.open_run(path)
        elif kind == "runs_dir":
            c.history.set_runs_dir(Path(path))
            c.sigMessage.emit(messages.RUNS_DIR_CHANGED.format(path=path))
        elif kind == "prompts" and self.sweeps is not None:
            self.sweeps.start(path)
        elif kind == "prompts":
            self.queue_prompt_list(path)
        elif kind == "bundle":
            self.open_bundle(path)
        elif not os.path.lexists(path):
            c.reporter.note(messages.DROP_MISSING.format(path=path))
        elif not (Path(path).is_file() or Path(path).is_dir()):
            c.reporter.note(messages.DROP_NOT_FILE.format(path=path))
        else:
            c.reporter.note(messages.DROP_UNKNOWN.format(path=path))
