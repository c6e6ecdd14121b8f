"""RunController: the facade the window and the path opener talk to. It composes the engine job scheduler
(gui/link/job_scheduler.py: loads pipelines, runs queued jobs one at a time, ends every job) and one coordinator per
long action (gui/coordinators/: runs, replays, bisections, opening studies, isolating a module, bug reports the
engine writes), the A/B comparison (a replay that
diverges opens it at the first divergence), and keeps what needs the engine and the shown run together:
decoding a step and the shown run's first anomaly. No widget here; the main window wires widgets to it.

A run from a bug-report bundle replays only on the weights it was made with: the record's environment
`pipeline.weight_hashes` against the loaded pipeline's (the engine's `loaded` event); `replay_gate` says whether
and, when not, which component differs. While a bisection or a sweep has the engine, the engine state says so."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui import messages
from ghostviewer.gui.coordinators.bisect_coordinator import BisectCoordinator
from ghostviewer.gui.coordinators.export_coordinator import ExportCoordinator
from ghostviewer.gui.coordinators.isolate_coordinator import IsolateCoordinator
from ghostviewer.gui.coordinators.replay_coordinator import ReplayCoordinator
from ghostviewer.gui.coordinators.run_coordinator import RunCoordinator
from ghostviewer.gui.coordinators.study_opener import StudyOpener
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.link.engine_client import EngineClient
from ghostviewer.gui.link.job_scheduler import JobScheduler
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.compare_model import CompareModel
from ghostviewer.gui.models.history_model import HistoryModel, bundle_name, bundle_of
from ghostviewer.gui.models.pipeline_model import PipelineModel
from ghostviewer.gui.models.prompt_model import PromptModel
from ghostviewer.gui.models.queue_model import Job, QueueModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, RunRecord

log = logging.getLogger("ghostviewer.gui")


class RunController(QObject):
    sigMessage = Signal(str)  # a line for the status bar
    sigEngineState = Signal(str)  # stopped | starting | loading | ready | running | bisecting | sweeping
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
        self.isolates = IsolateCoordinator(engine, self)
        self.exports = ExportCoordinator(engine, self.scheduler, reporter, self)
        self.scheduler.stateChanged.connect(self.sigEngineState)
        self.scheduler.jobEnded.connect(self.sigJobEnded)
        self.runs.sigMessage.connect(self.sigMessage)
        self.replays.sigMessage.connect(self.sigMessage)
        self.replays.replayChecked.connect(self._on_replay_checked)  # first: the comparison shows the original
        self.replays.replayChecked.connect(self.sigReplayChecked)
        self.replays.studyChanged.connect(lambda _path: self.history.refresh())
        self.bisects.sigMessage.connect(self.sigMessage)
        self.isolates.sigMessage.connect(self.sigMessage)
        self.exports.sigMessage.connect(self.sigMessage)
        self.bisects.stateChanged.connect(lambda state: self.set_engine_busy("bisect", state == "running"))
        self._made_with: dict[str, tuple[str, dict[str, Any]]] = {}  # bundle run → (run id, environment pipeline)
        self._gate_said = ""  # the last replay-gate line said in the status bar
        timeline.runChanged.connect(self._list_bundle_run)
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

    def set_engine_busy(self, work: str, busy: bool) -> None:
        """A coordinator's own engine command (work: bisect | sweep) started (busy) or ended: meanwhile the
        engine state is "bisecting" / "sweeping" and queued runs wait for it."""
        self.scheduler.set_busy(work, busy)

    # -- runs and replays -------------------------------------------------------------------------
    def queue_run(self) -> Job | None:
        return self.runs.queue_run()

    def queue_many(self, settings_list: list[dict[str, Any]]) -> list[Job]:
        return self.runs.queue_many(settings_list)

    def cancel(self, job_id: int) -> None:
        self.scheduler.cancel(job_id)

    def cancel_current(self) -> None:
        self.scheduler.cancel_current()

    def replay(self, run_dir: str | None = None, times: int = 1) -> Job | None:
        """Replay a run (the shown one by default) `times` times; the first queued job, None when none. A run
        from a bug report replays on the loaded pipeline, and only when its weights are the recorded ones."""
        run_dir = run_dir or self.timeline.run_dir
        allowed, why = self._replay_words(run_dir)
        if not allowed:
            self.reporter.report(why)
            return None
        source = self.pipeline.source if bundle_of(run_dir) is not None else None
        jobs = self.replays.replay(run_dir, times, source=source)
        return jobs[0] if jobs else None

    def replay_blocker(self, run_dir: str | None = None) -> str:
        """Why this run (the shown one by default) cannot be replayed now; "" when it can."""
        allowed, why = self._replay_words(run_dir or self.timeline.run_dir)
        return "" if allowed else why

    def replay_gate(self) -> tuple[bool, str]:
        """(may the shown run be replayed, the line that says why) — the line is "" for a run of this machine;
        a new line goes to the status bar once."""
        allowed, words = self._replay_words(self.timeline.run_dir)
        if words and words != self._gate_said:
            self.sigMessage.emit(words)
        self._gate_said = words
        return allowed, words

    def _replay_words(self, run_dir: str | None) -> tuple[bool, str]:
        bundle = bundle_of(run_dir)
        if run_dir is None or bundle is None:
            return True, ""
        made_with = self._made_with.get(str(run_dir))
        if made_with is None:
            try:
                record = RunRecord(run_dir)
                made_with = (record.run_id, dict((record.environment or {}).get("pipeline") or {}))
            except RecordError:
                return True, ""  # replay reports the unreadable run itself
            self._made_with[str(run_dir)] = made_with
        run_id, pipeline = made_with
        words = {"run_id": run_id, "bundle": bundle_name(bundle)}
        recorded = dict(pipeline.get("weight_hashes") or {})
        loaded = self.pipeline.info.get("weight_hashes") if self.pipeline.status == "loaded" else None
        if not recorded:
            return False, messages.REPLAY_NO_HASHES.format(why="the bug report records no weight hashes", **words)
        if self.pipeline.status != "loaded":
            return False, messages.REPLAY_NO_PIPELINE.format(source=pipeline.get("source") or "?", **words)
        if not isinstance(loaded, dict) or not loaded:
            return False, messages.REPLAY_NO_HASHES.format(
                why="the engine did not report the loaded pipeline's weight hashes", **words)
        differs = weight_differences(recorded, loaded)
        if differs:
            return False, messages.REPLAY_WEIGHTS_DIFFER.format(differs="; ".join(differs), **words)
        return True, messages.REPLAY_WEIGHTS_MATCH.format(components=", ".join(sorted(recorded)), **words)

    def _list_bundle_run(self) -> None:
        """A bundle's run shown (opened from a .zip) is listed in the history, tagged with its bundle."""
        run_dir = self.timeline.run_dir
        if run_dir and bundle_of(run_dir) is not None and self.history.entry(run_dir) is None:
            self.history.refresh()

    def bisect(self, run_dir: str | None = None) -> bool:
        """Bisect a failing run by bypass (the shown one by default); the trail fills as it goes."""
        return self.bisects.bisect(run_dir)

    # -- comparing two runs -----------------------------------------------------------------------
    def compare_runs(self, run_a: str, run_b: str, focus: bool = True) -> bool:
        """Open the comparison of two runs (A becomes the shown run); `focus`: at the first divergence."""
        if self.compare.open(run_a, run_b, focus):
            return True
        self.reporter.note(messages.NOT_A_RUN.format(path=f"{run_a} / {run_b}", message=one_line(self.compare.error)))
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
    def decode_step(self, tensor: str = "latents", sample: int = 0) -> int:
        """Ask the engine for a full decode of the selected step (the record's step index, not its place) of a
        batch's image `sample` (0: the first, or the run's one image)."""
        run_dir, step = self.timeline.run_dir, self.timeline.step
        if run_dir is None or step < 0:
            self.reporter.report(messages.NO_STEP_SELECTED)
            return -1
        return self.engine.send("decode", run_dir=run_dir, step=step, tensor=tensor, sample=max(0, int(sample)))

    def _on_decoded(self, event: dict[str, Any]) -> None:
        self.timeline.note_decoded(str(event.get("run_dir")), int(event.get("step", -1)))

    # -- inside the model -------------------------------------------------------------------------
    def _show_anomaly(self) -> None:
        self.blocks.show_run(self.timeline.record)  # its first anomaly and its drifting blocks

    def jump_to_first_anomaly(self) -> bool:
        """Select the shown run's first anomaly: its module (tree, heat map, feature maps) and its step."""
        if self.timeline.record is None:
            self.sigMessage.emit(messages.NO_RUN_SHOWN)
            return False
        anomaly = self.timeline.record.first_anomaly
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


def weight_differences(recorded: dict[str, Any], loaded: dict[str, Any]) -> list[str]:
    """['unet differs (1a2b3c4d here, 5e6f7a8b in the bug report)', 'vae is missing'] — [] when the same."""
    lines = []
    for component in sorted(set(recorded) | set(loaded)):
        here, there = loaded.get(component), recorded.get(component)
        if there is None:
            lines.append(f"{component} is not in the bug report")
        elif here is None:
            lines.append(f"{component} is missing")
        elif str(here) != str(there):
            lines.append(f"{component} differs ({str(here)[:8]} here, {str(there)[:8]} in the bug report)")
    return lines


def _created(run_dir: str) -> str:
    try:
        return str(RunRecord(run_dir).created_at or "")
    except RecordError:
        return ""
