"""Runs: queue one from the prompt panel or many from a prompt list; show the engine's run as it is recorded
(runs and replays alike: the timeline follows it, the history marks it live); when a job ends, the timeline
stops following, the history is re-read, the run-end lines go to the log and a failure is reported."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.analysis.summary import run_end_lines
from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.link.job_scheduler import JobScheduler
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.prompt_model import PromptModel
from ghostviewer.gui.models.queue_model import Job
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError
from ghostviewer.spec.prompt_lists import ListOptions, OutsideFilesError, PromptListError, read_prompt_list

log = logging.getLogger("ghostviewer.gui")


def same_path(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a) == Path(b)


class RunCoordinator(QObject):
    sigMessage = Signal(str)

    def __init__(self, scheduler: JobScheduler, prompt: PromptModel, pipeline: PipelineModel, blocks: BlockModel,
                 timeline: TimelineModel, history: HistoryModel, reporter: ErrorReporter,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.scheduler, self.queue = scheduler, scheduler.queue
        self.prompt, self.pipeline, self.blocks = prompt, pipeline, blocks
        self.timeline, self.history, self.reporter = timeline, history, reporter
        self._unopened: str | None = None  # a live run folder the timeline could not open yet
        self._asked: Path | None = None  # the list whose outside files the user is asked about
        reporter.offer(messages.PROMPT_LIST_OUTSIDE, messages.QUEUE_OUTSIDE, self._queue_asked)
        scheduler.jobStarted.connect(self._on_started)
        scheduler.jobStepped.connect(self._on_stepped)
        scheduler.jobEnded.connect(self._on_ended)

    # -- queueing ---------------------------------------------------------------------------------
    def queue_run(self) -> Job | None:
        """Queue exactly what the prompt panel shows, or refuse (None) with the panel's reason in one line."""
        why = self.prompt.refusal(*self.pipeline.key())
        if why:
            self.sigMessage.emit(messages.RUN_REFUSED.format(reason=why))
            return None
        return self.scheduler.submit(self.prompt.take_settings(*self.pipeline.key()) | self.blocks.run_fields())

    def queue_many(self, settings_list: list[dict[str, Any]]) -> list[Job]:
        return self.scheduler.submit_many([settings | self.blocks.run_fields() for settings in settings_list])

    def queue_prompt_list(self, path: str | Path, outside_files: bool = False) -> list[Job]:
        """Every row of the list, queued; nothing when it cannot be read (said in one line). A list naming files
        outside its folder is queued only once the user says so (the message's Queue it anyway)."""
        try:
            items = read_prompt_list(path, ListOptions(outside_files=outside_files))
        except OutsideFilesError as exc:
            self._asked = Path(path)
            self.reporter.report(messages.PROMPT_LIST_OUTSIDE.format(name=Path(path).name, file=exc.file))
            return []
        except PromptListError as exc:
            self.reporter.report(messages.PROMPT_LIST_FAILED.format(path=path, message=exc))
            return []
        settings_list = []
        for item in items:
            spec = self.prompt.take_spec(*self.pipeline.key()).with_row(item)  # the row's own values win
            settings_list.append(spec.to_json())
        jobs = self.queue_many(settings_list)
        self.sigMessage.emit(messages.PROMPT_LIST_QUEUED.format(count=len(jobs), name=Path(path).name))
        return jobs

    def _queue_asked(self) -> None:
        path, self._asked = self._asked, None
        if path is not None:
            self.queue_prompt_list(path, outside_files=True)

    # -- following the engine's run ---------------------------------------------------------------
    def _show(self, run_dir: str, live: bool) -> None:
        try:
            self.timeline.open_run(run_dir, live=live)
            self._unopened = None
        except RecordError as exc:
            self._unopened = run_dir if live else None
            log.warning("cannot show the run %s yet: %s", run_dir, exc)

    def _on_started(self, _job_id: int, run_dir: str) -> None:
        self.history.set_live_run(run_dir)
        self._show(run_dir, live=True)
        QTimer.singleShot(0, self.history.refresh)  # its own event-loop pass: the window stays smooth

    def _on_stepped(self, job_id: int, _step: int) -> None:
        job = self.queue.job(job_id)
        if job is None or job.run_dir is None:
            return
        if same_path(self._unopened, job.run_dir):
            self._show(job.run_dir, live=True)
        elif same_path(self.timeline.run_dir, job.run_dir):
            self.timeline.request_refresh()

    def _on_ended(self, job_id: int, status: str) -> None:
        job = self.queue.job(job_id)
        if job is None:
            return
        if job.run_dir is not None and same_path(self._unopened, job.run_dir):
            self._show(job.run_dir, live=False)
        idle = self.scheduler.running_job_id is None  # nothing else is being recorded now
        if idle:
            self._unopened = None
        if idle and self.history.live_run is not None:
            self.history.set_live_run(None)
        if same_path(self.timeline.run_dir, job.run_dir) or (idle and self.timeline.live):
            self.timeline.set_live(False, engine_died=job.ended_by == "engine")
        if job.run_dir is not None:
            self.history.refresh()
            for line in run_end_lines(job.run_dir):
                log.info("run %s %s", Path(job.run_dir).name, line)
        if status == "failed" and job.ended_by == "run":  # engine deaths and load failures are reported there
            error = one_line(RuntimeError(job.error or "unknown error"))  # the reporter's one-line rule
            self.reporter.report(messages.RUN_FAILED.format(message=error))
