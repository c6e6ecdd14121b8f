"""Bisection by bypass from the window: one `bisect` command to the engine process for the shown failing run; its
progress events fill the trail as each re-run starts, steps and is judged; at the end the culprit is the module
in focus (Blocks tree, heat maps) and the status bar says what was found. A finished or interrupted `bisect`
study from the history fills the same trail from its record.

Like a sweep, it waits until the engine is ready (no run or load in flight) before it sends the command, and
cancels like a run. The trail state lives here (the trail view binds to it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.analysis.symptom import Symptom
from ghostviewer.gui import messages
from ghostviewer.gui.dialogs.error_reporter import ErrorReporter, one_line
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.history_model import HistoryModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, RunRecord, StudyRecord

log = logging.getLogger("ghostviewer.gui")
EVENTS = ("bisect_progress", "bisect_finished")


@dataclass(frozen=True)
class TrailEntry:
    """One re-run of the bisection, as far as it got."""

    trial: int
    role: str  # trial (the search) | reference | patched (the activation-patching check)
    bypassed: tuple[str, ...] = ()
    verdict: str | None = None
    symptom: bool | None = None  # the bad run's symptom is still there (None: not judged yet, or crashed)
    healthy: bool | None = None
    first_anomaly: dict[str, Any] | None = None
    run_dir: str | None = None
    step: int = 0  # steps done while it runs
    steps: int = 0
    running: bool = False
    from_step: int | None = None  # the step its bypasses started from (None: the whole run)


def entry_from(event: dict[str, Any], trial: int, role: str = "trial") -> TrailEntry:
    """A trail entry from a `trial` event or an item of the result's trail."""
    return TrailEntry(int(event.get("trial") or trial), str(event.get("role") or role),
                      tuple(event.get("bypassed") or ()), event.get("verdict"), event.get("symptom"),
                      event.get("healthy"), event.get("first_anomaly"), event.get("run_dir"),
                      from_step=event.get("from_step") if isinstance(event.get("from_step"), int) else None)


class BisectCoordinator(QObject):
    sigMessage = Signal(str)
    stateChanged = Signal(str)  # idle | waiting | running
    trailChanged = Signal()  # anything shown by the trail view
    ended = Signal(dict)  # the result (bisect_finished), once per bisection
    # Engine events (registered with the engine client, which emits them like its own).
    sigBisectProgress = Signal(dict)
    sigBisectFinished = Signal(dict)

    def __init__(self, engine: Any, scheduler: Any, timeline: TimelineModel, blocks: BlockModel,
                 history: HistoryModel, reporter: ErrorReporter, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.engine, self.scheduler, self.timeline, self.blocks = engine, scheduler, timeline, blocks
        self.history, self.reporter = history, reporter
        self.state = "idle"
        self._ident: int | None = None
        self._pending: str | None = None
        self.reset(None)
        signals = getattr(engine, "_signals", None)  # EngineClient maps event names to its signals
        if isinstance(signals, dict):
            signals.update(zip(EVENTS, (self.sigBisectProgress, self.sigBisectFinished), strict=True))
        self.sigBisectProgress.connect(self._on_progress)
        self.sigBisectFinished.connect(self._on_finished)
        engine.sigError.connect(self._on_error)
        engine.sigEngineDied.connect(lambda why: self._stop(messages.BISECT_FAILED.format(
            message=messages.JOB_ENGINE_DIED.format(reason=why)), report=False))
        scheduler.stateChanged.connect(lambda _state: self._send_pending())

    def reset(self, run_dir: str | None) -> None:
        self.run_dir, self.study_dir, self.symptom = run_dir, None, ""
        self.candidates, self.budget, self.suspects = 0, 0, 0
        self.planned = False  # the engine said how many blocks it may re-run (or the result is in)
        self.trail: list[TrailEntry] = []
        self.result: dict[str, Any] | None = None
        self.error = ""

    # -- starting ---------------------------------------------------------------------------------
    def bisect(self, run_dir: str | None = None) -> bool:
        """Bisect a failing run (the shown one by default); False when there is none or it is healthy."""
        run_dir = run_dir or self.timeline.run_dir
        if run_dir is None:
            self.reporter.report(messages.NO_RUN_SELECTED)
            return False
        if self.state != "idle":
            self.reporter.report(messages.BISECT_BUSY)
            return False
        try:
            record = RunRecord(run_dir)
            symptom = Symptom.of_record(record)
        except RecordError as exc:
            self.reporter.note(messages.NOT_A_RUN.format(path=run_dir, message=one_line(exc)))
            return False
        if record.status == "running":
            self.reporter.report(messages.BISECT_NOT_ENDED.format(run_id=record.run_id))
            return False
        if record.status != "done" or symptom is None:
            self.reporter.report(messages.BISECT_NOTHING.format(run_id=record.run_id, status=record.status))
            return False
        self.reset(str(record.path))
        self.symptom = symptom.describe()
        self._pending = str(record.path)
        self._set_state("waiting")
        self.trailChanged.emit()
        if not self._send_pending():
            self.sigMessage.emit(messages.BISECT_WAITING.format(run_id=record.run_id))
        return True

    def _send_pending(self) -> bool:
        if self._pending is None or self.scheduler.engine_state != "ready":
            return False
        run_dir, self._pending = self._pending, None
        self._ident = self.engine.send("bisect", run_dir=run_dir, runs_dir=str(self.history.runs_dir))
        self._set_state("running")
        self.sigMessage.emit(messages.BISECT_STARTED.format(run_id=Path(run_dir).name, symptom=self.symptom))
        return True

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending = None
            self._stop(messages.BISECT_CANCELLED, report=False)
        elif self._ident is not None:
            self.engine.send("cancel", run=self._ident)

    # -- engine events ----------------------------------------------------------------------------
    def _mine(self, event: dict[str, Any]) -> bool:
        return self._ident is not None and event.get("id") == self._ident

    def _on_progress(self, event: dict[str, Any]) -> None:
        if not self._mine(event):
            return
        stage = event.get("stage")
        if stage == "bisect_started":
            self.study_dir = event.get("study_dir")
            self.symptom = str(event.get("symptom") or self.symptom)
            self.candidates = len(event.get("candidates") or ())
            self.budget = int(event.get("budget") or 0)
            self.suspects, self.planned = self.candidates, True
            if self.study_dir:
                self.history.set_live_run(str(self.study_dir))  # the history shows the study as running
            self.history.refresh()
        elif stage == "trial_started":
            self._put(replace(entry_from(event, len(self.trail) + 1), running=True))
        elif stage == "trial_step":
            self._progress(int(event.get("trial") or 0), int(event.get("step", 0)) + 1, int(event.get("steps") or 0))
        elif stage == "trial":
            entry = entry_from(event, len(self.trail) + 1)
            self._put(entry)
            of = f"/{self.budget}" if self.budget else ""
            self.sigMessage.emit(messages.BISECT_TRIAL.format(trial=entry.trial, of=of,
                                                              symptom=symptom_word(entry.symptom)))
            self.history.refresh()
        elif stage == "narrowed":
            self.suspects = len(event.get("suspects") or ())
        else:
            return
        self.trailChanged.emit()

    def _put(self, entry: TrailEntry) -> None:
        at = next((i for i, e in enumerate(self.trail) if e.trial == entry.trial), None)
        if at is None:
            self.trail.append(entry)
        else:
            self.trail[at] = entry

    def _progress(self, trial: int, step: int, steps: int) -> None:
        at = next((i for i, e in enumerate(self.trail) if e.trial == trial), None)
        if at is not None:
            self.trail[at] = replace(self.trail[at], step=step, steps=steps)

    def _on_finished(self, event: dict[str, Any]) -> None:
        if not self._mine(event):
            return
        self._ident = None
        self.show_result(dict(event.get("result") or {}))
        self._set_state("idle")
        self._forget_live()
        self.history.refresh()

    def _on_error(self, event: dict[str, Any]) -> None:
        if self._mine(event):  # the job scheduler reports the engine's one line
            self._stop(str(event.get("message") or "unknown error"), report=False)

    def _stop(self, error: str, report: bool) -> None:
        if self.state == "idle":
            return
        self._ident, self._pending, self.error = None, None, error
        self._forget_live()
        self.trail = [replace(e, running=False) for e in self.trail]
        self._set_state("idle")
        self.trailChanged.emit()
        if report:
            self.reporter.report(error)

    # -- the result -------------------------------------------------------------------------------
    def show_result(self, result: dict[str, Any]) -> None:
        """Fill the trail from a bisection's result and focus its culprit."""
        self.result = result
        self.run_dir = result.get("run_dir") or self.run_dir
        self.study_dir = result.get("study_dir") or self.study_dir
        self.symptom = str(result.get("symptom") or self.symptom)
        self.budget = int(result.get("budget") or self.budget or 0)
        self.candidates = int(result.get("candidates") or self.candidates or 0)
        self.planned = True
        patched = [e for e in self.trail if e.role != "trial"]  # the patching runs are not in the trail
        self.trail = [entry_from(item, i + 1) for i, item in enumerate(result.get("trail") or [])] + patched
        culprit = result.get("culprit")
        if culprit:
            self.blocks.select(str(culprit))
        self.trailChanged.emit()
        self.sigMessage.emit(describe_result(result, brief=True))  # the status bar: the Bisection dock says why
        self.ended.emit(result)

    def show_study(self, study_dir: str | Path) -> bool:
        """A `bisect` study from the history: its result when it finished, else the re-runs it recorded."""
        if self.state != "idle":
            return False
        try:
            study = StudyRecord(study_dir)
            params, result, runs = study.params, study.result, study.runs()
        except RecordError as exc:
            self.reporter.note(messages.STUDY_FAILED.format(path=study_dir, message=one_line(exc)))
            return False
        self.reset(str(params.get("run_dir") or ""))
        self._show_bad_run()
        self.study_dir, self.budget = str(study.path), int(params.get("budget") or 0)
        self.candidates, self.planned = len(params.get("candidates") or ()), "candidates" in params
        if isinstance(result, dict) and "trail" in result:
            self.show_result(result | {"study_dir": str(study.path)})
            return True
        self.trail = [TrailEntry(i + 1, r.role, tuple((r.key or {}).get("bypassed") or ()), r.verdict,
                                 None, None, r.first_anomaly, str(r.run_dir))
                      for i, r in enumerate(x for x in runs if x.role != "bad")]
        self.error = messages.BISECT_UNFINISHED.format(status=study.status)
        self.trailChanged.emit()
        return True

    def _forget_live(self) -> None:
        if self.study_dir and self.history.live_run == str(Path(self.study_dir)):
            self.history.set_live_run(None)

    def _show_bad_run(self) -> None:
        """The bad run in the timeline, so the heat map shows where the culprit sits."""
        shown = self.timeline.run_dir
        if self.run_dir and (shown is None or Path(shown) != Path(self.run_dir)):
            try:
                self.timeline.open_run(self.run_dir)
            except RecordError as exc:
                log.warning("cannot show the bisected run %s: %s", self.run_dir, exc)

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.stateChanged.emit(state)
            self.trailChanged.emit()


def symptom_word(symptom: bool | None) -> str:
    return {True: "symptom still there", False: "symptom gone"}.get(symptom, "not judged")  # type: ignore[arg-type]


def describe_result(result: dict[str, Any], brief: bool = False) -> str:
    """The result in words; `brief`: one status-bar line, the reason left to the Bisection dock."""
    if result.get("status") == "cancelled":
        return messages.BISECT_CANCELLED
    reruns = int(result.get("reruns") or 0)
    if result.get("culprit"):
        budget = result.get("budget")
        return messages.BISECT_CULPRIT.format(culprit=result["culprit"], reruns=reruns) + (
            messages.BISECT_BUDGET.format(budget=budget) if budget else ".")
    if brief:
        return messages.BISECT_NO_CULPRIT_BRIEF.format(reruns=reruns)
    reason = str(result.get("reason") or "no reason given").rstrip(".")
    return messages.BISECT_NO_CULPRIT.format(reruns=reruns, reason=reason)


def plan_words(coordinator: BisectCoordinator) -> str:
    """What the bisection may re-run: never 'budget ?' — unknown until the engine says, none when no block can."""
    c = coordinator
    if not c.planned:
        return messages.BISECT_PLANNING if c.state != "idle" else ""
    if c.candidates == 0:
        return messages.BISECT_NO_CANDIDATES
    budget = f", at most {c.budget} re-runs" if c.budget else ""
    left = f" · {c.suspects} suspects left" if c.state == "running" and c.suspects else ""
    return f"{c.candidates} candidate blocks{budget}{left}"
