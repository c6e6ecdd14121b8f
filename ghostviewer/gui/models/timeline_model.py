"""The selected run and step: what the timeline, image views and plot show. Reads the record, never the engine.

`step` is the record's step index (what the step files, stats rows and anomalies are keyed by); `position` is
that step's place in the recorded list, i.e. the slider's value. They differ when a run's steps are not
0, 1, 2… (a run that starts at step 5, or records every other step)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.gui.models.verdict_words import run_words
from ghostviewer.record import RecordError, RunRecord, StepInfo
from ghostviewer.spec.run_spec import DEFAULT_STRENGTH

PLAY_INTERVAL_MS = 150


def planned_steps(settings: dict) -> int | None:
    """The denoising steps a run of these settings makes: its steps — for img2img and inpaint the strength's share
    of them, as diffusers counts (6 steps at strength 0.7: 4); None when the settings name none."""
    total = settings.get("steps")
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        return None
    strength = settings.get("strength")
    if strength is None:
        strength = DEFAULT_STRENGTH.get(str(settings.get("kind") or ""))
    if isinstance(strength, (int, float)) and 0 < strength < 1:
        return max(1, min(int(total * strength), total))
    return total


@dataclass(frozen=True)
class Badge:
    text: str
    kind: str  # none | running | ok | warn (image ok, an anomaly inside) | bad | cancelled | failed | incomplete
    tooltip: str = ""


def anomaly_where(anomaly: dict) -> str:
    """'denoise step 3', 'decode', 'encode' — never 'step None'."""
    step = anomaly.get("step")
    return str(anomaly.get("phase") or "?") + ("" if step is None else f" step {step}")


def anomaly_words(anomaly: dict | None) -> str:
    """'overflow in vae.decoder.up_blocks.1.resnets.0 (decode)' ('' when there is none)."""
    if not anomaly:
        return ""
    return f"{anomaly.get('kind')} in {anomaly.get('module')} ({anomaly_where(anomaly)})"


class TimelineModel(QObject):
    runChanged = Signal()
    stepsChanged = Signal(int)  # number of recorded steps
    stepChanged = Signal(int)  # the record's step index (-1: none)
    playingChanged = Signal(bool)
    statusChanged = Signal()  # status, verdict or liveness
    decodedChanged = Signal(int)  # a full decode of this step was written

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.record: RunRecord | None = None
        self.live = False  # the engine is writing this run now
        self.engine_died = False  # the engine stopped while writing it
        self.steps: list[StepInfo] = []
        self.position = -1  # the selected step's place in self.steps (the slider); -1 when none
        self.status = ""
        self.settings: dict = {}  # the shown run's recorded settings (read once)
        self._play = QTimer(self)
        self._play.setInterval(PLAY_INTERVAL_MS)
        self._play.timeout.connect(self._advance)
        self._refresh = QTimer(self)  # coalesces bursts of step events into one refresh
        self._refresh.setSingleShot(True)
        self._refresh.setInterval(0)
        self._refresh.timeout.connect(self.refresh)

    # -- the run ----------------------------------------------------------------------------------
    @property
    def run_dir(self) -> str | None:
        return None if self.record is None else str(self.record.path)

    def open_run(self, path: str | Path, live: bool = False) -> None:
        """Show a run folder (raises RecordError when it is not a readable run)."""
        record = RunRecord(path)
        self.stop()
        self.record, self.live, self.engine_died = record, live, False
        self.steps = record.steps()
        self.status = "running" if live else record.status  # the engine is writing it (refresh keeps it so)
        self.settings = record.settings
        self.position = len(self.steps) - 1
        self.runChanged.emit()
        self.stepsChanged.emit(len(self.steps))
        self.stepChanged.emit(self.step)
        self.statusChanged.emit()

    def close_run(self) -> None:
        self.stop()
        self.record, self.live, self.steps, self.position, self.status, self.settings = None, False, [], -1, "", {}
        self.runChanged.emit()
        self.stepsChanged.emit(0)
        self.stepChanged.emit(-1)
        self.statusChanged.emit()

    def request_refresh(self) -> None:
        if not self._refresh.isActive():
            self._refresh.start()

    def refresh(self) -> None:
        """Re-read the steps and status of the shown run; follow the newest step when at the end."""
        if self.record is None:
            return
        try:  # while the engine writes the run it stays 'running' (set_live(False) reads its end)
            steps = self.record.steps()
            status = self.status if self.live and self.status == "running" else self.record.status
        except RecordError:
            return  # mid-write hiccup; the next step event refreshes again
        if len(steps) != len(self.steps):
            follow = self.position >= len(self.steps) - 1
            self.steps = steps
            self.stepsChanged.emit(len(steps))
            if follow:
                self.set_position(len(steps) - 1)
        if status != self.status:
            self.status = status
            self.statusChanged.emit()

    def set_live(self, live: bool, engine_died: bool = False) -> None:
        self.live, self.engine_died = live, engine_died
        self.refresh()
        self.statusChanged.emit()

    def note_decoded(self, run_dir: str, step: int) -> None:
        if self.run_dir is not None and Path(run_dir) == Path(self.run_dir):
            self.decodedChanged.emit(step)

    # -- the step ---------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self.steps)

    @property
    def step(self) -> int:
        """The selected step's index in the record; -1 when none."""
        info = self.step_info()
        return -1 if info is None else int(info.index)

    def step_info(self) -> StepInfo | None:
        return self.steps[self.position] if 0 <= self.position < len(self.steps) else None

    def position_of(self, step: int) -> int | None:
        """The place of the record's step `step` in the list (None when that step was not recorded)."""
        return next((i for i, info in enumerate(self.steps) if info.index == step), None)

    def set_step(self, step: int) -> None:
        """Select the record's step `step`, or the recorded step nearest to it."""
        if not self.steps:
            return
        position = self.position_of(int(step))
        if position is None:
            position = min(range(len(self.steps)), key=lambda i: (abs(self.steps[i].index - step), i))
        self.set_position(position)

    def set_position(self, position: int) -> None:
        """Select the step at this place in the list (the slider's value), clamped."""
        if not self.steps:
            return
        position = max(0, min(int(position), len(self.steps) - 1))
        if position != self.position:
            self.position = position
            self.stepChanged.emit(self.step)

    def step_by(self, delta: int) -> None:
        self.set_position(self.position + delta)

    def go_first(self) -> None:
        self.set_position(0)

    def go_last(self) -> None:
        self.set_position(len(self.steps) - 1)

    @property
    def playing(self) -> bool:
        return self._play.isActive()

    def toggle_play(self) -> None:
        if self.playing:
            self.stop()
            return
        if not self.steps:
            return
        if self.position >= len(self.steps) - 1:
            self.set_position(0)
        self._play.start()
        self.playingChanged.emit(True)

    def stop(self) -> None:
        if self._play.isActive():
            self._play.stop()
            self.playingChanged.emit(False)

    def _advance(self) -> None:
        if self.position < len(self.steps) - 1:
            self.set_position(self.position + 1)
        elif not self.live:
            self.stop()

    @property
    def planned_steps(self) -> int | None:
        """The denoising steps the shown run makes: the recorded ones once it is done; before, the settings' steps
        — for img2img and inpaint the strength's share of them, as diffusers counts (6 steps at 0.7: 4)."""
        if self.status == "done" and self.steps:
            return max(info.index for info in self.steps) + 1
        return planned_steps(self.settings)

    # -- the badge --------------------------------------------------------------------------------
    def badge(self) -> Badge:
        record = self.record
        if record is None:
            return Badge("no run", "none")
        total = self.planned_steps or "?"
        if self.status in ("running", "interrupted"):  # interrupted: the record knows its writer died
            if self.live:
                return Badge(f"running · {self.count}/{total}", "running")
            why = "the engine stopped" if self.engine_died else "killed or still being written elsewhere"
            return Badge(f"incomplete · {self.count}/{total}", "incomplete", f"Incomplete run: {why}.")
        if self.status == "cancelled":
            return Badge(f"cancelled · {self.count}/{total}", "cancelled")
        if self.status == "failed":
            return Badge("failed", "failed", record.error or "")
        verdict = record.verdict or {}
        label = str(verdict.get("label") or "?")
        scores = ", ".join(f"{k} {v:.3g}" for k, v in (verdict.get("scores") or {}).items()
                           if isinstance(v, (int, float)))
        anomaly = record.first_anomaly
        where = "" if not anomaly else f"\nfirst anomaly: {anomaly_words(anomaly)}"
        tooltip = f"verdict {label}: {scores}{where}"
        if label != "ok":
            return Badge(label, "bad", tooltip)
        if anomaly:  # the image passes, but something inside did not: the badge says so too
            return Badge(run_words("done", label, anomaly), "warn", tooltip)
        return Badge(label, "ok", tooltip)
