"""Opening things: a path dropped on the window or given on the command line, a run from the history."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject

from ghostviewer.analysis.prompt_lists import PromptListError, read_prompt_list
from ghostviewer.gui import messages
from ghostviewer.gui.controller import RunController, same_path
from ghostviewer.gui.drops import classify_path
from ghostviewer.gui.models.queue_model import Job
from ghostviewer.record import RecordError

LIST_KEYS = {"negative": "negative_prompt", "seed": "seed", "steps": "steps", "guidance": "guidance"}


class PathOpener(QObject):
    def __init__(self, controller: RunController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.controller = controller

    def open_run(self, path: str | Path) -> bool:
        c = self.controller
        running = c.queue.running()
        try:
            c.timeline.open_run(path, live=running is not None and same_path(running.run_dir, str(path)))
        except RecordError as exc:
            c.reporter.report(messages.NOT_A_RUN.format(path=path, message=exc))
            return False
        return True

    def queue_prompt_list(self, path: str | Path) -> list[Job]:
        c = self.controller
        try:
            items = read_prompt_list(path)
        except PromptListError as exc:
            c.reporter.report(messages.PROMPT_LIST_FAILED.format(path=path, message=exc))
            return []
        settings_list = []
        for item in items:
            settings = c.prompt.take_settings(*c.pipeline.key(), prompt=item["prompt"])
            settings.update({LIST_KEYS[k]: v for k, v in item.items() if k in LIST_KEYS})
            settings_list.append(settings)
        jobs = c.queue_many(settings_list)
        c.sigMessage.emit(messages.PROMPT_LIST_QUEUED.format(count=len(jobs), name=Path(path).name))
        return jobs

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
        elif kind == "prompts":
            self.queue_prompt_list(path)
        elif kind == "bundle":
            c.reporter.report(messages.BUNDLE_UNSUPPORTED.format(path=path))
        else:
            c.reporter.report(messages.DROP_UNKNOWN.format(path=path))
