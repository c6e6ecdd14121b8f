"""RunController: the facade the window and the path opener talk to. It composes the engine job scheduler
(gui/job_scheduler.py: loads pipelines, runs queued jobs one at a time, ends every job) and one coordinator per
long action (gui/coordinators/: runs, replays, bisections, opening studies), the A/B comparison (a replay that
diverges opens it at the first divergence), and keeps what needs the engine and the shown run together:
decoding a step and the shown run's first anomaly. No widget here; the main window wires widgets to it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.coordinators.bisect_coordinator import BisectCoordinator
from ghostviewer.gui.coordinators.replay_coordinator import ReplayCoordinator
from ghostviewer.gui.coordinators.run_coordinator import RunCoordinator
from ghostviewer.gui.coordinators.study_opener import StudyOpener
from ghostviewer.gui.engine_client import EngineClient
from ghostviewer.gui.error_reporter import ErrorReporter
from ghostviewer.gui.job_scheduler import JobScheduler
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.compare_model import CompareModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.prompt_model import PromptModel
from ghostviewer.gui.models.queue_model import Job, QueueModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, RunRecord

log = logging.getLogger("ghostviewer.gui")


class RunController(QObject):
    sigMessage = Signal(str)  # a line for the status bar
    sigEngineState = Signal(str)  # stopped | starting | loading | ready | running
    sigReplayChecked = Signal(dict)  # the replay coordinator's result
    sigJobEnded = Signal(int, str)  # job id, done | failed | cancelled (the scheduler's jobEnded)

    def __init__(self, engine: EngineClient, pipeline: PipelineModel, prompt: PromptModel, queue: QueueModel,
                 timeline: TimelineModel, history: HistoryModel, reporter: ErrorReporter,
                 blocks: BlockModel | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine, self.pipeline, self.prompt, self.queue = engine, pipeline, prompt, queue
        self.timeline, self.history, self.reporter = timeline, history, reporter
        self.blocks = blocks or BlockModel(self)
        self.scheduler = JobScheduler(engine, pipeline, queue, reporter, lambda: history.runs_dir, self)
        self.runs = RunCoordinator(self.scheduler, prompt, pipeline, self.blocks, timeline, history, reporter, self)
        self.replays = ReplayCoordinator(self.scheduler, timeline, reporter, self)
        self.compare = CompareModel(timeline, self.blocks, self)
        self.bisects = BisectCoordinator(engine, self.scheduler, timeline, self.blocks, history, reporter, self)
        self.studies = StudyOpener(self.compare, self.bisects, reporter, self)
        self.scheduler.stateChanged.connect(self.sigEngineState)
        self.scheduler.jobEnded.connect(self.sigJobEnded)
        self.runs.sigMessage.connect(self.sigMessage)
        self.replays.sigMessage.connect(self.sigMessage)
        self.replays.replayChecked.connect(self._on_replay_checked)  # first: the comparison shows the original
        self.replays.replayChecked.connect(self.sigReplayChecked)
        self.bisects.sigMessage.connect(self.sigMessage)
        engine.sigDecoded.connect(self._on_decoded)
        engine.sigBlocks.connect(lambda event: self.blocks.set_blocks(list(event.get("blocks") or [])))
        timeline.runChanged.connect(self._show_anomaly)
        timeline.statusChanged.connect(self._show_anomaly)

    # -- the engine -------------------------------------------------------------------------------
    def start_engine(self) -> None:
        self.scheduler.start_engine()

    def restart_engine(self) -> None:
        self.scheduler.restart_engine()
        self.sigMessage.emit(messages.ENGINE_RESTARTED)

    def shutdown(self) -> None:
        self.scheduler.shutdown()
        self.compare.shutdown()

    @property
    def engine_state(self) -> str:
        return self.scheduler.engine_state

    # -- runs and replays -------------------------------------------------------------------------
    def queue_run(self) -> Job:
        return self.runs.queue_run()

    def queue_many(self, settings_list: list[dict[str, Any]]) -> list[Job]:
        return self.runs.queue_many(settings_list)

    def cancel(self, job_id: int) -> None:
        self.scheduler.cancel(job_id)

    def cancel_current(self) -> None:
        self.scheduler.cancel_current()

    def replay(self, run_dir: str | None = None, times: int = 1) -> Job | None:
        """Replay a run (the shown one by default) `times` times; the first queued job, None when none."""
        jobs = self.replays.replay(run_dir, times)
        return jobs[0] if jobs else None

    def bisect(self, run_dir: str | None = None) -> bool:
        """Bisect a failing run by bypass (the shown one by default); the trail fills as it goes."""
        return self.bisects.bisect(run_dir)

    # -- comparing two runs -----------------------------------------------------------------------
    def compare_runs(self, run_a: str, run_b: str, focus: bool = True) -> bool:
        """Open the comparison of two runs (A becomes the shown run); `focus`: at the first divergence."""
        if self.compare.open(run_a, run_b, focus):
            return True
        self.reporter.report(messages.NOT_A_RUN.format(path=f"{run_a} / {run_b}", message=self.compare.error))
        return False

    def compare_selected(self, paths: list[str]) -> bool:
        """Two runs picked in the history (the older is A); one picked: the shown run is the other."""
        shown = self.timeline.run_dir
        picked = list(dict.fromkeys(str(Path(p)) for p in paths))
        if len(picked) == 1 and shown is not None and Path(shown) != Path(picked[0]):
            picked.insert(0, shown)
        if len(picked) != 2:
            self.reporter.report(messages.COMPARE_PICK_TWO)
            return False
        return self.compare_runs(*sorted(picked, key=_created))

    def _on_replay_checked(self, result: dict[str, Any]) -> None:
        if result.get("reproduced") is False and result.get("replay"):
            self.compare_runs(str(result["original"]), str(result["replay"]))

    # -- decode, inside the model -----------------------------------------------------------------
    def decode_step(self, tensor: str = "latents") -> int:
        """Ask the engine for a full decode of the selected step (the record's step index, not its place)."""
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
            if self.timeline.position_of(int(anomaly["step"])) is not None:
                self.timeline.set_step(int(anomaly["step"]))
        self.blocks.select(str(anomaly["module"]))
        step = "" if anomaly.get("step") is None else f" step {anomaly['step']}"  # never "step None"
        self.sigMessage.emit(messages.ANOMALY_AT.format(kind=anomaly.get("kind"), module=anomaly["module"],
                                                        where=f"{anomaly.get('phase')}{step}"))
        return True


def _created(run_dir: str) -> str:
    try:
        return str(RunRecord(run_dir).created_at or "")
    except RecordError:
        return ""
