"""The engine job scheduler: loads the pipelines the queued jobs need and runs the jobs one at a time, maps the
engine's events to its jobs, and ends every job exactly once — done, failed or cancelled — whatever happens:
the run's own end event, an `error` event for it, the engine process dying, the engine restarted or stopped
mid-run, a run folder that never appears. Each ending is one `jobEnded(job_id, status)`; the job's row says
how it ended (`Job.ended_by`, `Job.error`). No widget, no record reading: coordinators listen to the signals.

A coordinator that gives the engine a long command of its own (a bisection, a sweep, a bug-report export that
re-runs the run) holds the scheduler while it runs: the state says so ("bisecting", "sweeping", "exporting"),
nothing else is sent, and queued jobs say what they wait for; the release (or the engine stopping) lets them go."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, first_line
from ghostviewer.gui.link.engine_client import EngineClient
from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.queue_model import Job, QueueModel

log = logging.getLogger("ghostviewer.gui")
Key = tuple[str, str, str]  # (source, device, dtype)
ENGINE_WORK = {"decode": "decode the step", "blocks": "list the blocks", "bisect": "bisect the run",
               "export": "export the bug report"}  # for errors
HOLDS = {"bisect": ("bisecting", "the bisection"), "sweep": ("sweeping", "the sweep"),
         "export": ("exporting", "the export")}  # state word, what waits


@dataclass(frozen=True)
class Command:
    """The one command the engine is working on for us."""

    kind: str  # load | run
    ident: int  # the id its events carry
    key: Key | None = None  # load: the pipeline
    job_id: int | None = None  # run: the job


def window_words(message: str) -> str:
    """An engine message in the window's words: no command-line option a window user has no way to pass."""
    return message.replace(messages.CLI_MEMORY_HINT, messages.WINDOW_MEMORY_HINT)


def job_key(job: Job) -> Key:
    s = job.settings
    return (str(s.get("source") or "demo"), str(s.get("device") or "auto"), str(s.get("dtype") or ""))


class JobScheduler(QObject):
    stateChanged = Signal(str)  # stopped | refused | starting | loading | ready | running | bisecting | sweeping |
    #                             exporting
    jobStarted = Signal(int, str)  # job id, its run folder (as the engine names it)
    jobStepped = Signal(int, int)  # job id, steps recorded so far
    jobEnded = Signal(int, str)  # job id, done | failed | cancelled — once per job, always

    def __init__(self, engine: EngineClient, pipeline: PipelineModel, queue: QueueModel, reporter: ErrorReporter,
                 runs_dir: Callable[[], Path], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine, self.pipeline, self.queue, self.reporter = engine, pipeline, queue, reporter
        self.runs_dir = runs_dir
        self._loaded_key: Key | None = None
        self._loaded_device = ""
        self._failed_key: Key | None = None
        self._inflight: Command | None = None
        self._stopping: str | None = None  # why, while we stop or restart the engine ourselves
        self._holds: list[str] = []  # the coordinators' own commands the engine is busy with (HOLDS keys)
        engine.sigStateChanged.connect(self._on_engine_state)
        engine.sigLoaded.connect(self._on_loaded)
        engine.sigStarted.connect(self._on_started)
        engine.sigStep.connect(self._on_step)
        engine.sigFinished.connect(lambda event: self._on_run_end(event, "done"))
        engine.sigCancelled.connect(lambda event: self._on_run_end(event, "cancelled"))
        engine.sigFailed.connect(lambda event: self._on_run_end(event, "failed"))
        engine.sigError.connect(self._on_error)
        engine.sigEngineDied.connect(self._on_engine_died)
        engine.sigRefused.connect(self.reporter.report)  # another protocol version: one line, nothing sent
        pipeline.wanted.connect(self.tick)

    # -- jobs -------------------------------------------------------------------------------------
    def submit(self, settings: dict[str, Any], replay_of: str | None = None) -> Job:
        return self.submit_many([settings], replay_of)[0]

    def submit_many(self, settings_list: list[dict[str, Any]], replay_of: str | None = None,
                    runs_dir: str | None = None) -> list[Job]:
        """Queue several jobs; `runs_dir`: where their runs go (a study's own runs folder) instead of the window's."""
        jobs = [self.queue.add(settings, replay_of=replay_of) for settings in settings_list]
        if runs_dir is not None:
            for job in jobs:
                self.queue.update(job.id, extra={**job.extra, "runs_dir": runs_dir})
            jobs = [self.queue.job(job.id) or job for job in jobs]
        self.tick()
        return jobs

    def cancel(self, job_id: int) -> None:
        job = self.queue.job(job_id)
        if job is None or job.finished:
            return
        if job.status == "queued":
            self._end(job_id, "cancelled", "user")
            self.tick()
        elif self._inflight is not None and self._inflight.job_id == job_id:
            self.engine.send("cancel", run=self._inflight.ident)  # it ends with the engine's 'cancelled'

    def cancel_current(self) -> None:
        job = self.queue.running()
        if job is not None:
            self.cancel(job.id)

    @property
    def running_job_id(self) -> int | None:
        return self._inflight.job_id if self._inflight is not None and self._inflight.kind == "run" else None

    # -- the engine -------------------------------------------------------------------------------
    @property
    def engine_state(self) -> str:
        if self.engine.state != "ready":
            return self.engine.state
        if self._inflight:
            return {"load": "loading", "run": "running"}[self._inflight.kind]
        return HOLDS[self._holds[-1]][0] if self._holds else "ready"

    def hold(self, work: str) -> None:
        """A coordinator sent the engine a long command of its own (`work`: bisect | sweep | export): send nothing else
        until it is released; queued jobs wait, and say so."""
        if work not in HOLDS:
            raise ValueError(f"unknown engine work {work!r}")
        if work not in self._holds:
            self._holds.append(work)
            self.tick()

    def release(self, work: str) -> None:
        if work in self._holds:
            self._holds.remove(work)
            self.tick()

    def set_busy(self, work: str, busy: bool) -> None:
        (self.hold if busy else self.release)(work)

    def start_engine(self) -> None:
        self.engine.start()

    def restart_engine(self) -> None:
        """A fresh engine process; the run it was doing ends 'cancelled' (by its own event when it manages
        to say so on its way out)."""
        self._stop_engine(messages.JOB_ENGINE_RESTARTED, self.engine.restart, "engine")

    def shutdown(self) -> None:
        """Stop the engine; the running job ends 'cancelled', the queued ones too (the window is closing)."""
        self._stop_engine(messages.JOB_WINDOW_CLOSED, self.engine.stop, "shutdown")
        for job in self.queue.jobs():
            if not job.finished:
                self._end(job.id, "cancelled", "shutdown", error=messages.JOB_WINDOW_CLOSED)

    def _stop_engine(self, why: str, stop: Callable[[], None], ended_by: str) -> None:
        job_id = self.running_job_id
        self._stopping = why
        try:
            stop()
        finally:
            self._stopping = None
        self._forget_engine()
        if job_id is not None:
            self._end(job_id, "cancelled", ended_by, error=why)
        self.tick()

    def _forget_engine(self) -> None:
        self._loaded_key, self._inflight, self._failed_key = None, None, None
        self._holds = []  # whatever the engine was doing for a coordinator is gone with it

    def _publish(self) -> None:
        self.stateChanged.emit(self.engine_state)

    # -- scheduling -------------------------------------------------------------------------------
    def _is_loaded(self, key: Key) -> bool:
        if self._loaded_key is None:
            return False
        source, device, dtype = key
        loaded_source, loaded_device, loaded_dtype = self._loaded_key
        return (source == loaded_source and dtype == loaded_dtype
                and device in ("auto", loaded_device, self._loaded_device))

    def tick(self) -> None:
        """Start the next thing the engine should do: load the wanted pipeline, or run the next job."""
        self._mark_waiting()
        idle = self.engine.state == "ready" and self.engine.running and self._stopping is None and not self._holds
        if not idle or self._inflight is not None:
            self._publish()
            return
        job = self.queue.next_queued()
        key = job_key(job) if job else self.pipeline.key()
        if not self._is_loaded(key):
            if job is None and key == self._failed_key:
                self._publish()  # "ready" again, not "loading the pipeline…" for ever
                return
            source, device, dtype = key
            ident = self.engine.send("load", source=source, device=device, dtype=dtype or None)
            self._inflight = Command("load", ident, key=key)
            if key == self.pipeline.key():
                self.pipeline.set_status("loading")
        elif job is not None:
            replay = {"replay_of": job.replay_of} if job.replay_of else {}  # re-issues a watched call as made
            ident = self.engine.send("run", settings=job.settings,
                                     runs_dir=str(job.extra.get("runs_dir") or self.runs_dir()), **replay)
            self._inflight = Command("run", ident, job_id=job.id)
            self.queue.update(job.id, status="running", step=0)
        self._publish()

    def _mark_waiting(self) -> None:
        """Queued jobs say what holds them back ("waiting for the bisection"), and stop saying it after."""
        if self.engine.state in ("stopped", "refused"):
            why = messages.JOB_WAITING_ENGINE
        else:
            why = messages.JOB_WAITING.format(work=HOLDS[self._holds[-1]][1]) if self._holds else ""
        for job in self.queue.jobs():
            if job.status == "queued" and job.waiting != why:
                self.queue.update(job.id, waiting=why)
            elif job.status != "queued" and job.waiting:
                self.queue.update(job.id, waiting="")

    def _end(self, job_id: int, status: str, ended_by: str, **fields: Any) -> None:
        """The one way a job ends (the caller ticks after)."""
        job = self.queue.job(job_id)
        if job is None or job.finished:
            return
        if self._inflight is not None and self._inflight.job_id == job_id:
            self._inflight = None
        self.queue.update(job_id, status=status, ended_by=ended_by, **fields)
        log.info("job %d %s (%s)%s", job_id, status, ended_by, f": {job.error}" if job.error else "")
        self.jobEnded.emit(job_id, status)

    # -- engine events ----------------------------------------------------------------------------
    def _on_engine_state(self, state: str) -> None:
        if state == "ready":
            info = self.engine.info
            self.pipeline.set_engine_info(info.get("schedulers") or [], info.get("faults") or [])
            self.tick()
        elif state == "starting":
            self.pipeline.set_status("waiting")
        elif state in ("stopped", "refused"):
            self._loaded_key = None  # a new process starts with nothing loaded
            if self._stopping is None and self._inflight is not None:
                QTimer.singleShot(0, self._end_orphan)  # after sigEngineDied, which says why when it comes
        self._mark_waiting()
        self._publish()

    def _end_orphan(self) -> None:
        """The engine stopped under a command and nobody said why (someone stopped the client directly)."""
        if self.engine.state == "ready" or self._inflight is None:
            return
        job_id = self.running_job_id
        self._forget_engine()
        if job_id is not None:
            self._end(job_id, "failed", "engine", error=messages.JOB_ENGINE_STOPPED)
        self._publish()

    def _on_loaded(self, event: dict[str, Any]) -> None:
        command = self._inflight
        if command is None or command.kind != "load" or command.ident != event.get("id"):
            return
        self._loaded_key, self._loaded_device, self._inflight = command.key, str(event.get("device")), None
        self._failed_key = None
        if command.key == self.pipeline.key():
            self.pipeline.set_status("loaded", info=event)
            self.engine.send("blocks")
        log.info("loaded %s (%s on %s)", event.get("source"), event.get("pipeline"), event.get("device"))
        self.tick()

    def _on_error(self, event: dict[str, Any]) -> None:
        message = window_words(str(event.get("message") or "unknown error"))
        command = self._inflight
        if command is not None and command.ident == event.get("id") and command.kind == "load":
            self._load_failed(command.key or self.pipeline.key(), message)
        elif command is not None and command.ident == event.get("id") and command.job_id is not None:
            self._end(command.job_id, "failed", "run", error=message)  # the coordinators report it
        else:
            what = ENGINE_WORK.get(str(event.get("cmd")), "do that")
            self.reporter.report(messages.ENGINE_ERROR.format(what=what, message=message))
        self.tick()

    def _load_failed(self, key: Key, message: str) -> None:
        self._inflight, self._failed_key, self._loaded_key = None, key, None
        for job in self.queue.jobs():  # the jobs needing that pipeline cannot run
            if job.status == "queued" and job_key(job) == key:
                self._end(job.id, "failed", "load", error=message)
        self.pipeline.load_failed(key, message)  # back to the last pipeline that loaded, if any
        kept = self.pipeline.loaded_key
        back = "" if not kept or kept == key else messages.LOAD_KEPT.format(
            source="the demo pipeline" if kept[0] == "demo" else kept[0])
        self.reporter.report(messages.LOAD_FAILED.format(source=key[0], message=first_line(message), kept=back),
                             details=message, show_details=True)

    def _run_job(self, event: dict[str, Any]) -> Job | None:
        command = self._inflight
        if command is None or command.job_id is None or command.ident != event.get("id"):
            return None
        return self.queue.job(command.job_id)

    def _adopt_run_dir(self, job: Job, run_dir: Any) -> None:
        if run_dir and job.run_dir != str(run_dir):
            self.queue.update(job.id, run_dir=str(run_dir))
            self.jobStarted.emit(job.id, str(run_dir))

    def _on_started(self, event: dict[str, Any]) -> None:
        job = self._run_job(event)
        if job is not None:
            self._adopt_run_dir(job, event.get("run_dir"))

    def _on_step(self, event: dict[str, Any]) -> None:
        job = self._run_job(event)
        if job is None:
            return
        if job.run_dir is None:  # no 'started' came: the step names the folder too
            self._adopt_run_dir(job, event.get("run_dir"))
        step = int(event.get("step", 0)) + 1
        self.queue.update(job.id, step=step)
        self.jobStepped.emit(job.id, step)

    def _on_run_end(self, event: dict[str, Any], status: str) -> None:
        job = self._run_job(event)
        if job is None:
            return
        run_dir = event.get("run_dir") or job.run_dir
        error = event.get("error")
        if run_dir and not Path(str(run_dir)).is_dir():
            log.warning("job %d: the run folder %s does not exist", job.id, run_dir)
            error = error or messages.RUN_FOLDER_MISSING.format(path=run_dir)
            status, run_dir = ("failed" if status == "done" else status), None
        elif status == "done" and not run_dir:
            status, error = "failed", messages.RUN_FOLDER_MISSING.format(path="(none)")
        if status == "cancelled" and self._stopping:
            error = error or self._stopping
        verdict = event.get("verdict")
        self._end(job.id, status, "run", run_dir=str(run_dir) if run_dir else None, error=error,
                  verdict=verdict.get("label") if isinstance(verdict, dict) else None,
                  first_anomaly=event.get("first_anomaly"))
        self.tick()

    def _on_engine_died(self, reason: str) -> None:
        job_id = self.running_job_id
        self._forget_engine()
        self.pipeline.set_status("waiting")
        if job_id is not None:
            self._end(job_id, "failed", "engine", error=messages.JOB_ENGINE_DIED.format(reason=reason))
        self._publish()
        self.reporter.report(messages.ENGINE_DIED.format(reason=reason))
