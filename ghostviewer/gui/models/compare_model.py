"""A/B comparison of two recorded runs: what the Compare dock shows, read from the records alone.

Run A is the shown run (the main timeline); run B has its own timeline here, which follows A's step, so the two
are scrubbed together and the second step-data slot (AppState.step_data_b) reads B's step. The comparison
itself (analysis.compare: settings, first divergence, per-module deltas) is read once per pair, off the GUI
thread; the per-step |A−B| image is computed when both steps are in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal

from ghostviewer.analysis.compare import Column, comparable_stats, compare_records, delta_grid
from ghostviewer.gui import messages
from ghostviewer.gui.data.step_data import StepData, read_rgb
from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.step_data_model import StepDataModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.models.verdict_words import run_words
from ghostviewer.record import RecordError, RunRecord

DELTA_STATS = ("std", "absmax", "mean")


@dataclass(frozen=True)
class SettingRow:
    name: str
    a: Any
    b: Any
    differs: bool


@dataclass(frozen=True)
class Comparison:
    """Two runs side by side (read-only arrays)."""

    run_a: str
    run_b: str
    ids: tuple[str, str]
    verdicts: tuple[str | None, str | None]
    settings: tuple[SettingRow, ...]  # the differing settings first, then the rest
    first_divergence: dict[str, Any] | None
    stat: str
    modules: list[str] = field(default_factory=list)  # the delta grid's rows
    columns: list[Column] = field(default_factory=list)  # its (phase, step) columns
    deltas: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # relative delta of `stat`
    differs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))
    final_a: np.ndarray | None = None
    final_b: np.ndarray | None = None
    final_diff: np.ndarray | None = None
    final_gain: float = 1.0

    @property
    def same(self) -> bool:
        return self.first_divergence is None


def difference_image(a: np.ndarray | None, b: np.ndarray | None) -> tuple[np.ndarray | None, float]:
    """|A−B| of two RGB uint8 images, stretched so the largest difference is white; (image, gain). None when
    either is missing or their shapes differ."""
    if a is None or b is None or a.shape != b.shape:
        return None, 1.0
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16)).astype(np.float32)
    top = float(diff.max())
    gain = 255.0 / top if top > 0 else 1.0
    return np.clip(diff * gain, 0, 255).astype(np.uint8), gain


def _settings_rows(a: dict[str, Any], b: dict[str, Any], env: dict[str, list[Any]]) -> tuple[SettingRow, ...]:
    rows = [SettingRow(k, a.get(k), b.get(k), a.get(k) != b.get(k)) for k in sorted(set(a) | set(b))]
    rows += [SettingRow(f"environment: {k}", va, vb, True) for k, (va, vb) in sorted(env.items())]
    return tuple(sorted(rows, key=lambda r: not r.differs))


def load_comparison(run_a: str, run_b: str, stat: str = "std") -> Comparison:
    """Read both records and compare them (no Qt: runs on a worker). RecordError when either is unreadable."""
    a, b = RunRecord(run_a), RunRecord(run_b)
    result = compare_records(a, b)
    modules, columns, deltas, differs = delta_grid(*comparable_stats(a, b), stat)
    final_a, final_b = read_rgb(a.image_path("final")), read_rgb(b.image_path("final"))
    final_diff, gain = difference_image(final_a, final_b)
    words = tuple(run_words(r.status, v, r.first_anomaly) if v else None  # as the badge and history say it
                  for r, v in zip((a, b), result["verdicts"], strict=True))
    return Comparison(
        str(a.path), str(b.path), (a.run_id, b.run_id), words,  # type: ignore[arg-type]
        _settings_rows(a.settings, b.settings, result["environment_diff"]), result["first_divergence"], stat,
        modules, columns, deltas, differs, final_a, final_b, final_diff, gain)


class CompareModel(QObject):
    opened = Signal()  # a comparison was asked for (the window raises the Compare dock)
    comparisonChanged = Signal()  # `comparison` was (re)read; None with `error` set when it could not be
    stepDiffChanged = Signal()  # the |A−B| image of the shown step

    def __init__(self, timeline: TimelineModel | None = None, blocks: BlockModel | None = None,
                 parent: QObject | None = None, *, synchronous: bool = False) -> None:
        super().__init__(parent)
        self.timeline_a = timeline or TimelineModel(self)
        self.timeline_b = TimelineModel(self)
        self.blocks = blocks or BlockModel(self)
        self.synchronous = synchronous  # tests: read in the calling thread
        self.comparison: Comparison | None = None
        self.error = ""
        self.stat = DELTA_STATS[0]
        self.pending: tuple[str, str] | None = None  # the pair being read
        self._focus = False
        self.step_a: StepData | None = None
        self.step_b: StepData | None = None
        self.step_diff: np.ndarray | None = None
        self.step_gain = 1.0
        self._worker = Worker(1, latest=True, synchronous=synchronous, what="comparing two runs",
                              expected=(RecordError, OSError, ValueError), parent=self)
        self._worker.answered.connect(self._on_read)
        self.timeline_a.stepChanged.connect(self._follow)

    # -- opening ----------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.comparison is not None or self.pending is not None

    @property
    def a_shown(self) -> bool:
        """Run A is the shown run (the main timeline may have moved on to another one)."""
        c = self.comparison
        return c is not None and self.timeline_a.run_dir is not None and Path(self.timeline_a.run_dir) == Path(c.run_a)

    def open(self, run_a: str | Path, run_b: str | Path, focus: bool = True) -> bool:
        """Compare two runs: A becomes the shown run, B the second timeline; `focus`: then go to the first
        divergence. False (with `error`) when either cannot be opened."""
        run_a, run_b = str(run_a), str(run_b)
        try:
            if self.timeline_a.run_dir is None or Path(self.timeline_a.run_dir) != Path(run_a):
                self.timeline_a.open_run(run_a)
            self.timeline_b.open_run(run_b)
        except RecordError as exc:
            self._fail(str(exc))
            return False
        self._follow()
        self.opened.emit()
        self._read(run_a, run_b, focus)
        return True

    def compare_with(self, run_b: str | Path) -> bool:
        """Compare the shown run (A) with another one."""
        if self.timeline_a.run_dir is None:
            self._fail(messages.COMPARE_NO_RUN)
            return False
        return self.open(self.timeline_a.run_dir, run_b)

    def show_a(self) -> None:
        """Make run A the shown run again."""
        if self.comparison is not None and not self.a_shown:
            self.open(self.comparison.run_a, self.comparison.run_b, focus=False)

    def swap(self) -> None:
        if self.comparison is not None:
            self.open(self.comparison.run_b, self.comparison.run_a, focus=False)

    def set_stat(self, stat: str) -> None:
        if stat != self.stat and stat in DELTA_STATS:
            self.stat = stat
            if self.comparison is not None:
                self._read(self.comparison.run_a, self.comparison.run_b, False)

    def _read(self, run_a: str, run_b: str, focus: bool) -> None:
        self.pending, self._focus = (run_a, run_b), focus
        stat = self.stat
        self._worker.synchronous = self.synchronous
        self._worker.submit((run_a, run_b), lambda _task: load_comparison(run_a, run_b, stat))  # the newest wins

    def _on_read(self, pair: Any, result: Any) -> None:
        if self.pending != pair:
            return  # another pair was asked for meanwhile
        if isinstance(result, Exception):
            self.pending = None
            self._fail(str(result))
            return
        self.pending, self.comparison, self.error = None, result, ""
        self.comparisonChanged.emit()
        if self._focus:
            self.go_to_divergence()
        self.update_step_diff()

    def _fail(self, message: str) -> None:
        self.comparison, self.error = None, message
        self.comparisonChanged.emit()

    # -- scrubbing together -----------------------------------------------------------------------
    def _follow(self, _step: int = -1) -> None:
        """B follows A's step (the record's index: the nearest recorded one when B lacks it)."""
        if self.timeline_b.record is not None and self.timeline_a.step >= 0:
            self.timeline_b.set_step(self.timeline_a.step)

    def set_position(self, position: int) -> None:
        """The compare view's slider: A's step at this place; B follows."""
        self.timeline_a.set_position(position)

    def go_to_divergence(self) -> bool:
        """Both timelines to the first diverging step; its module in focus (tree, heat maps). False: none."""
        where = None if self.comparison is None else self.comparison.first_divergence
        if not where:
            return False
        step = where.get("step")
        if where.get("phase") == "denoise" and step is not None:
            self.timeline_a.set_step(int(step))
        elif where.get("phase") == "decode":
            self.timeline_a.go_last()
        if where.get("module"):
            self.blocks.select(str(where["module"]))
        return True

    def select_cell(self, module: str, column: Column) -> None:
        """A click in the delta heat map: the module in focus, both timelines to a denoise column's step."""
        self.blocks.select(module)
        if column[0] == "denoise" and column[1] is not None:
            self.timeline_a.set_step(int(column[1]))

    # -- the step difference ----------------------------------------------------------------------
    def attach_step_data(self, data_a: StepDataModel, data_b: StepDataModel) -> None:
        """The shown run's step-data model (A) and the second slot, which follows B's timeline."""
        data_b.bind(self.timeline_b)
        data_a.stepLoaded.connect(lambda data: self.set_step_data("a", data))
        data_b.stepLoaded.connect(lambda data: self.set_step_data("b", data))

    def set_step_data(self, which: str, data: StepData) -> None:
        """A step of A ("a") or B ("b") was read (the two step-data models' stepLoaded)."""
        if which == "a":
            self.step_a = data
        else:
            self.step_b = data
        self.update_step_diff()

    def update_step_diff(self) -> None:
        a, b = step_image(self.step_a), step_image(self.step_b)
        self.step_diff, self.step_gain = difference_image(a, b) if self.comparison is not None else (None, 1.0)
        self.stepDiffChanged.emit()

    def shutdown(self, timeout_ms: int = 2000) -> None:
        self._worker.shutdown(timeout_ms)


def step_image(data: StepData | None) -> np.ndarray | None:
    """What a step looks like: the predicted x0 preview, else the noisy latents' preview."""
    if data is None or data.empty:
        return None
    return data.x0_preview if data.x0_preview is not None else data.latents_preview
