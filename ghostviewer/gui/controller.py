"""RunController: moves queued jobs through the engine process one at a time and keeps the models in step
with its events. No widget here; the main window wires widgets to these methods and signals."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.analysis.compare import compare_runs, describe_divergence
from ghostviewer.analysis.summary import run_end_lines
from ghostviewer.gui import messages
from ghostviewer.gui.engine_client import EngineClient
from ghostviewer.gui.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.prompt_model import PromptModel
from ghostviewer.gui.models.queue_model import Job, QueueModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, RunRecord

log = logging.getLogger("ghostviewer.gui")
Key = tuple[str, str, str]  # (source, device, dtype)


def same_path(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a) == Path(b)


class RunController(QObject):
    sigMessage = Signal(str)  # a line for the status bar
    sigEngineState = Signal(str)  # stopped | starting | loading | ready | running
    sigReplayChecked = Signal(dict)
    sigJobEnded = Signal(int)  # job id, whatever the outcome

    def __init__(self, engine: EngineClient, pipeline: PipelineModel, prompt: PromptModel, queue: QueueModel,
                 timeline: TimelineModel, history: HistoryModel, reporter: ErrorReporter,
                 blocks: BlockModel | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine, self.pipeline, self.prompt, self.queue = engine, pipeline, prompt, queue
        self.timeline, self.history, self.reporter = timeline, history, reporter
        self.blocks = blocks or BlockModel(self)
        self._loaded_key: Key | None = None
        self._loaded_device = ""
        self._failed_key: Key | None = None
        self._inflight: tuple[str, int, Any] | None = None  # ('load', id, key) | ('run', id, job id)
        engine.sigStateChanged.connect(self._on_engine_state)
        engine.sigLoaded.connect(self._on_loaded)
        engine.sigStarted.connect(self._on_started)
        engine.sigStep.connect(self._on_step)
        engine.sigFinished.connect(lambda ev: self._on_run_end(ev, "done"))
        engine.sigCancelled.connect(lambda ev: self._on_run_end(ev, "cancelled"))
        engine.sigFailed.connect(lambda ev: self._on_run_end(ev, "failed"))
        engine.sigDecoded.connect(self._on_decoded)
        engine.sigBlocks.connect(lambda event: self.blocks.set_blocks(list(event.get("blocks") or [])))
        engine.sigError.connect(self._on_error)
        engine.sigEngineDied.connect(self._on_engine_died)
        pipeline.wanted.connect(self._tick)
        timeline.runChanged.connect(self._show_anomaly)
        timeline.statusChanged.connect(self._show_anomaly)

    # -- the engine -------------------------------------------------------------------------------
    def start_engine(self) -> None:
        self.engine.start()

    def restart_engine(self) -> None:
        self._forget_engine()
        self.engine.restart()
        self.sigMessage.emit(messages.ENGINE_RESTARTED)

    def shutdown(self) -> None:
        self.engine.stop()

    @property
    def engine_state(self) -> str:
        if self.engine.state != "ready":
            return self.engine.state
        return {"load": "loading", "run": "running"}.get(self._inflight[0], "ready") if self._inflight else "ready"

    def _publish(self) -> None:
        self.sigEngineState.emit(self.engine_state)

    def _forget_engine(self) -> None:
        self._loaded_key, self._inflight, self._failed_key = None, None, None

    # -- scheduling -------------------------------------------------------------------------------
    def _job_key(self, job: Job) -> Key:
        s = job.settings
        return (str(s.get("source") or "demo"), str(s.get("device") or "auto"), str(s.get("dtype") or ""))

    def _is_loaded(self, key: Key) -> bool:
        if self._loaded_key is None:
            return False
        source, device, dtype = key
        loaded_source, loaded_device, loaded_dtype = self._loaded_key
        return (source == loaded_source and dtype == loaded_dtype
                and device in ("auto", loaded_device, self._loaded_device))

    def _tick(self) -> None:
        """Start the next thing the engine should do: load the wanted pipeline, or run the next job."""
        if self.engine.state != "ready" or self._inflight is not None:
            self._publish()
            return
        job = self.queue.next_queued()
        key = self._job_key(job) if job else self.pipeline.key()
        if not self._is_loaded(key):
            if job is None and key == self._failed_key:
                return
            source, device, dtype = key
            ident = self.engine.send("load", source=source, device=device, dtype=dtype or None)
            self._inflight = ("load", ident, key)
            if key == self.pipeline.key():
                self.pipeline.set_status("loading")
        elif job is not None:
            ident = self.engine.send("run", settings=job.settings, runs_dir=str(self.history.runs_dir))
            self._inflight = ("run", ident, job.id)
            self.queue.update(job.id, status="running", step=0)
        self._publish()

    def _on_engine_state(self, state: str) -> None:
        if state == "ready":
            info = self.engine.info
            self.pipeline.set_engine_info(info.get("schedulers") or [], info.get("faults") or [])
            self._tick()
        elif state == "starting":
            self.pipeline.set_status("waiting")
        self._publish()

    def _on_loaded(self, event: dict[str, Any]) -> None:
        if not self._inflight or self._inflight[:2] != ("load", event.get("id")):
            return
        key = self._inflight[2]
        self._loaded_key, self._loaded_device, self._inflight = key, str(event.get("device")), None
        self._failed_key = None
        if key == self.pipeline.key():
            self.pipeline.set_status("loaded", info=event)
            self.engine.send("blocks")
        log.info("loaded %s (%s on %s)", event.get("source"), event.get("pipeline"), event.get("device"))
        self._tick()

    def _on_error(self, event: dict[str, Any]) -> None:
        message = str(event.get("message") or "unknown error")
        if self._inflight and self._inflight[:2] == ("load", event.get("id")):
            key = self._inflight[2]
            self._inflight, self._failed_key, self._loaded_key = None, key, None
            if key == self.pipeline.key():
                self.pipeline.set_status("failed", error=message)
            for job in self.queue.jobs():  # jobs needing that pipeline cannot run
                if job.status == "queued" and self._job_key(job) == key:
                    self.queue.update(job.id, status="failed", error=message)
            self.reporter.report(messages.LOAD_FAILED.format(source=key[0], message=message))
            self._tick()
            return
        what = {"decode": "decode the step", "blocks": "list the blocks"}.get(str(event.get("cmd")), "do that")
        self.reporter.report(messages.ENGINE_ERROR.format(what=what, message=message))

    # -- runs -------------------------------------------------------------------------------------
    def queue_run(self) -> Job:
        job = self.queue.add(self.prompt.take_settings(*self.pipeline.key()) | self.blocks.run_fields())
        self._tick()
        return job

    def queue_many(self, settings_list: list[dict[str, Any]]) -> list[Job]:
        jobs = [self.queue.add(settings | self.blocks.run_fields()) for settings in settings_list]
        self._tick()
        return jobs

    def cancel(self, job_id: int) -> None:
        job = self.queue.job(job_id)
        if job is None or job.finished:
            return
        if job.status == "queued":
            self.queue.update(job_id, status="cancelled")
            self.sigJobEnded.emit(job_id)
        elif self._inflight and self._inflight[0] == "run" and self._inflight[2] == job_id:
            self.engine.send("cancel", run=self._inflight[1])

    def cancel_current(self) -> None:
        job = self.queue.running()
        if job is not None:
            self.cancel(job.id)

    def _run_job(self, event: dict[str, Any]) -> Job | None:
        if not self._inflight or self._inflight[:2] != ("run", event.get("id")):
            return None
        return self.queue.job(self._inflight[2])

    def _on_started(self, event: dict[str, Any]) -> None:
        job = self._run_job(event)
        if job is None:
            return
        run_dir = str(event.get("run_dir"))
        self.queue.update(job.id, run_dir=run_dir)
        self.history.set_live_run(run_dir)
        try:
            self.timeline.open_run(run_dir, live=True)
        except RecordError as exc:
            log.warning("cannot show the new run yet: %s", exc)
        QTimer.singleShot(0, self.history.refresh)  # its own event-loop pass: the window stays smooth

    def _on_step(self, event: dict[str, Any]) -> None:
        job = self._run_job(event)
        if job is None:
            return
        self.queue.update(job.id, step=int(event.get("step", 0)) + 1)
        if same_path(self.timeline.run_dir, job.run_dir):
            self.timeline.request_refresh()

    def _on_run_end(self, event: dict[str, Any], status: str) -> None:
        job = self._run_job(event)
        if job is None:
            return
        self._inflight = None
        verdict = event.get("verdict") or {}
        error = event.get("error")
        run_dir = event.get("run_dir") or job.run_dir
        self.queue.update(job.id, status=status, run_dir=run_dir, error=error,
                          verdict=verdict.get("label") if isinstance(verdict, dict) else None)
        self._after_run(job, engine_died=False)
        if status == "done" and run_dir:
            for line in run_end_lines(str(run_dir)):
                log.info("run %s %s", Path(run_dir).name, line)
        if status == "failed":
            self.reporter.report(messages.RUN_FAILED.format(message=error or "unknown error"))
        if job.replay_of:
            self._check_replay(job)
        self.sigJobEnded.emit(job.id)
        self._tick()

    def _after_run(self, job: Job, engine_died: bool) -> None:
        self.history.set_live_run(None)
        if same_path(self.timeline.run_dir, job.run_dir):
            self.timeline.set_live(False, engine_died=engine_died)
        self.history.refresh()

    def _on_engine_died(self, reason: str) -> None:
        inflight = self._inflight
        self._forget_engine()
        self.pipeline.set_status("waiting")
        if inflight and inflight[0] == "run":
            job = self.queue.job(inflight[2])
            if job is not None:
                self.queue.update(job.id, status="failed", error=f"the engine process {reason}")
                self._after_run(job, engine_died=True)
                self.sigJobEnded.emit(job.id)
        self._publish()
        self.reporter.report(messages.ENGINE_DIED.format(reason=reason))

    # -- replay, decode, opening things -----------------------------------------------------------
    def replay(self, run_dir: str | None = None) -> Job | None:
        run_dir = run_dir or self.timeline.run_dir
        if run_dir is None:
            self.reporter.report(messages.NO_RUN_SELECTED)
            return None
        try:
            record = RunRecord(run_dir)
            settings = dict(record.settings)
        except RecordError as exc:
            self.reporter.report(messages.NOT_A_RUN.format(path=run_dir, message=exc))
            return None
        job = self.queue.add(settings, replay_of=str(record.path))
        self.sigMessage.emit(messages.REPLAY_QUEUED.format(seed=settings.get("seed")))
        self._tick()
        return job

    def _check_replay(self, job: Job) -> None:
        seed = job.settings.get("seed")
        if job.status != "done" or not job.run_dir or not job.replay_of:
            result = {"reproduced": None, "seed": seed, "original": job.replay_of, "replay": job.run_dir}
            self.sigMessage.emit(messages.REPLAY_UNCHECKED.format(seed=seed, status=job.status))
            self.sigReplayChecked.emit(result)
            return
        try:
            result = compare_runs(job.replay_of, job.run_dir)
        except (RecordError, OSError) as exc:
            self.reporter.report(messages.NOT_A_RUN.format(path=job.run_dir, message=one_line(exc)))
            return
        if result["reproduced"]:
            text = messages.REPLAY_REPRODUCED.format(seed=seed, steps=result["steps"])
        else:
            text = messages.REPLAY_DIVERGED.format(seed=seed, where=describe_divergence(result["first_divergence"]))
        log.info("%s", text)
        self.sigMessage.emit(text)
        self.sigReplayChecked.emit(result)

    def decode_step(self, tensor: str = "latents") -> int:
        run_dir, step = self.timeline.run_dir, self.timeline.step
        if run_dir is None or step < 0:
            self.reporter.report(messages.NO_STEP_SELECTED)
            return -1
        return self.engine.send("decode", run_dir=run_dir, step=step, tensor=tensor)

    def _on_decoded(self, event: dict[str, Any]) -> None:
        self.timeline.note_decoded(str(event.get("run_dir")), int(event.get("step", -1)))

    # -- inside the model -------------------------------------------------------------------------
    def _show_anomaly(self) -> None:
        anomaly = self.timeline.record.first_anomaly if self.timeline.record is not None else None
        self.blocks.set_anomaly(str((anomaly or {}).get("module") or ""))

    def jump_to_first_anomaly(self) -> bool:
        """Select the shown run's first anomaly: its module (tree, heat map, feature maps) and its step."""
        anomaly = self.timeline.record.first_anomaly if self.timeline.record is not None else None
        if not anomaly or not anomaly.get("module"):
            self.sigMessage.emit(messages.NO_ANOMALY)
            return False
        if anomaly.get("phase") == "denoise" and anomaly.get("step") is not None:
            index = {info.index: i for i, info in enumerate(self.timeline.steps)}.get(int(anomaly["step"]))
            if index is not None:
                self.timeline.set_step(index)
        self.blocks.select(str(anomaly["module"]))
        self.sigMessage.emit(messages.ANOMALY_AT.format(kind=anomaly.get("kind"), phase=anomaly.get("phase"),
                                                        step=anomaly.get("step"), module=anomaly["module"]))
        return True
