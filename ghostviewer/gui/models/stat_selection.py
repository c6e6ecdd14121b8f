"""What the statistic plot shows: which statistic, for which modules (StatSelection), and those modules' series
over the shown run's denoising steps (StatSeries), read off the GUI thread.

StatSeries reads with a plain function (read_series) on a Worker and keeps what it read: a new run or a newly
selected module is read whole once, a new step only that step's rows. One read at a time; when it ends, what is
missing then is read (the newest wish wins), and an answer for a run no longer shown is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from ghostviewer.analysis.stat_grid import stat_value
from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, RunRecord, StatRow

PLOT_STATS = ("absmax", "std", "mean", "nan_count", "fp16_headroom")
MAX_DEFAULT_MODULES = 6
MANY_STEPS = 8  # more new steps than this: one query over the whole run instead of one per step
LIVE_READ_MS = 100  # a live run's new steps are read together, at most ~10 times a second
RETRIES = 5  # reads in a row that may fail (a record mid-write) before waiting for the next step

Points = tuple[np.ndarray, np.ndarray]  # steps (n,) int, values (n, len(PLOT_STATS)) float
NO_POINTS: Points = (np.zeros(0, np.int64), np.zeros((0, len(PLOT_STATS))))


def default_modules(modules: Sequence[str]) -> list[str]:
    """The denoiser's outer blocks (down_blocks.N, mid_block, up_blocks.N, transformer_blocks.N), a handful."""
    def is_block(name: str) -> bool:
        parts = name.split(".")
        return (len(parts) == 3 and parts[-1].isdigit()) or (len(parts) == 2 and parts[-1] == "mid_block")

    blocks = [m for m in modules if is_block(m)]
    if len(blocks) > MAX_DEFAULT_MODULES:  # keep the first and the last ones: where trouble enters and leaves
        half = MAX_DEFAULT_MODULES // 2
        blocks = blocks[:half] + blocks[-half:]
    rest = [m for m in modules if m.count(".") == 1 and m not in blocks]
    return (blocks + rest)[:MAX_DEFAULT_MODULES]


class StatSelection(QObject):
    changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.stat = "absmax"
        self.modules: list[str] = []

    def set_stat(self, stat: str) -> None:
        if stat in PLOT_STATS and stat != self.stat:
            self.stat = stat
            self.changed.emit()

    def set_modules(self, modules: Sequence[str]) -> None:
        modules = list(dict.fromkeys(modules))
        if modules != self.modules:
            self.modules = modules
            self.changed.emit()

    def toggle(self, module: str, on: bool) -> None:
        if on and module not in self.modules:
            self.set_modules([*self.modules, module])
        elif not on and module in self.modules:
            self.set_modules([m for m in self.modules if m != module])


# -- the series ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SeriesRead:
    """One read's answer, made on a worker and merged on the GUI thread: call-0 denoise values of every
    PLOT_STATS for these modules, at `steps` (every step the run had when it was asked for, or only new ones)."""

    run_dir: str
    known: tuple[str, ...] | None  # the run's denoiser modules, when this read looked them up
    modules: tuple[str, ...]
    steps: tuple[int, ...]
    points: Mapping[str, Points]


def read_series(record: RunRecord, modules: Sequence[str], steps: Sequence[int], *, whole: bool = False,
                find_modules: bool = False) -> SeriesRead | None:
    """Read these modules' rows at these steps (whole: every step in the record). find_modules: look the
    denoiser's modules up in the first step first, and read the wanted ones among them, or the default ones when
    none is. A worker thread calls this; None when the record cannot be read now (mid-write)."""
    known: tuple[str, ...] | None = None
    try:
        if find_modules:
            known = tuple(dict.fromkeys(row.module for row in record.stats(phase="denoise", step=steps[0])))
            modules = [m for m in modules if m in known] or default_modules(known)
        rows: list[StatRow] = []
        if modules and (whole or len(steps) > MANY_STEPS):
            rows = record.stats(module=list(modules), phase="denoise")
        elif modules:
            for step in steps:
                rows += record.stats(module=list(modules), phase="denoise", step=step)
    except RecordError:
        return None
    wanted = None if whole else set(steps)
    per_module: dict[str, dict[int, list[float]]] = {m: {} for m in modules}
    for row in rows:
        if row.call == 0 and row.module in per_module and (wanted is None or row.step in wanted):
            per_module[row.module][int(row.step)] = [stat_value(row, stat) for stat in PLOT_STATS]  # type: ignore[arg-type]
    points = {m: _as_points(per_step) for m, per_step in per_module.items()}
    return SeriesRead(str(record.path), known, tuple(modules), tuple(steps), points)


def _as_points(per_step: dict[int, list[float]]) -> Points:
    if not per_step:
        return NO_POINTS
    steps = sorted(per_step)
    return np.asarray(steps, np.int64), np.asarray([per_step[s] for s in steps], np.float64).reshape(len(steps), -1)


def merge_points(old: Points, new: Points) -> Points:
    """old with new's steps added (new wins where both have a step), in step order."""
    if not len(new[0]):
        return old
    if not len(old[0]) or new[0][0] > old[0][-1]:  # the usual case: the next steps of a live run
        return np.concatenate([old[0], new[0]]), np.concatenate([old[1], new[1]])
    keep = ~np.isin(old[0], new[0])
    steps, values = np.concatenate([old[0][keep], new[0]]), np.concatenate([old[1][keep], new[1]])
    order = np.argsort(steps, kind="stable")
    return steps[order], values[order]


class StatSeries(QObject):
    """The selected modules' series over the shown run's denoising steps (the record's step indexes), read off
    the GUI thread; follows a TimelineModel and a StatSelection. When none of the selected modules is in a run,
    it selects the run's default ones."""

    changed = Signal(object)  # the modules whose points changed (a tuple); () after a new run cleared them all

    def __init__(self, timeline: TimelineModel, selection: StatSelection, *, synchronous: bool = False,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.timeline, self.selection = timeline, selection
        self.run_dir: str | None = None
        self.known: tuple[str, ...] = ()  # the shown run's denoiser modules; () until read
        self.points: dict[str, Points] = {}
        self.dropped = 0  # answers that came back for a run no longer shown
        self._shown = 0  # counts the runs shown (a run opened again is another one): answers carry it
        self._steps_read: set[int] = set()  # the steps whose rows of every module in self.points are in
        self._looked_up = 0  # how many steps the run had when its modules were looked up (0: not yet)
        self._reading = False
        self._failed = 0  # reads in a row that failed
        self._worker = Worker(1, synchronous=synchronous, what="reading a statistic series", parent=self)
        self._worker.answered.connect(self._on_read)
        self._later = QTimer(self, singleShot=True, interval=LIVE_READ_MS)  # a live run's steps, gathered; a retry
        self._later.timeout.connect(self.request)
        timeline.runChanged.connect(self._on_run)
        timeline.stepsChanged.connect(self._on_steps)
        timeline.statusChanged.connect(self._on_status)
        selection.changed.connect(self.request)
        self._on_run()

    @property
    def loading(self) -> bool:
        """A read is on its way, or will be shortly (tests wait on it)."""
        return self._reading or self._later.isActive()

    @property
    def modules(self) -> list[str]:
        """The selected modules that the shown run has, in the selection's order."""
        return [m for m in self.selection.modules if m in self.known]

    def series(self, module: str, stat: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one module's statistic, as floats; empty when not read (or not in the run)."""
        steps, values = self.points.get(module, NO_POINTS)
        return steps.astype(np.float64), values[:, PLOT_STATS.index(stat)]

    def _on_steps(self, _count: int) -> None:
        if not self.timeline.live:
            self.request()
        elif not self._later.isActive():
            self._later.start()

    def _on_status(self) -> None:
        if not self.timeline.live and self._later.isActive():  # the run ended: its last steps at once
            self._later.stop()
            self.request()

    def _on_run(self) -> None:
        self._later.stop()
        self._shown += 1
        self._failed = 0
        self.run_dir = self.timeline.run_dir
        self.known, self.points, self._steps_read, self._looked_up = (), {}, set(), 0
        self.changed.emit(())
        self.request()

    def request(self) -> None:
        """Read what the plot is missing, unless a read is on its way (its end asks again)."""
        record, steps = self.timeline.record, [info.index for info in self.timeline.steps]
        if self._reading or record is None or not steps:
            return
        if not self.known:
            if len(steps) <= self._looked_up:  # no denoiser rows in the run (yet)
                return
            kind = "run"
            work = partial(read_series, record, list(self.selection.modules), steps, whole=True, find_modules=True)
        else:
            wanted = self.modules
            for module in [m for m in self.points if m not in wanted]:  # not kept up to date once deselected
                del self.points[module]
            added = [m for m in wanted if m not in self.points]
            missing = [s for s in steps if s not in self._steps_read]
            if added:
                kind, work = "modules", partial(read_series, record, added, steps, whole=True)
            elif wanted and missing:
                kind, work = "steps", partial(read_series, record, wanted, missing)
            else:
                self._steps_read.update(missing)
                return
        self._reading = True
        self._worker.submit((self._shown, kind), lambda _task: work())

    def _on_read(self, tag: tuple[int, str], result: object) -> None:
        (shown, kind), self._reading = tag, False
        if shown != self._shown:
            self.dropped += 1
            self.request()
            return
        if not isinstance(result, SeriesRead):  # unreadable now (mid-write) or failed: again shortly, a few times
            self._failed += 1
            if self._failed < RETRIES and not self._later.isActive():
                self._later.start()
            return
        self._failed = 0
        if kind == "run":
            self.known, self._looked_up = result.known or (), len(result.steps)
            self._steps_read = set(result.steps)
            self.points = dict(result.points)
        elif kind == "modules":  # newly selected modules, read whole
            self.points.update(result.points)
        else:  # new steps
            self._steps_read.update(result.steps)
            for module, new in result.points.items():
                self.points[module] = merge_points(self.points.get(module, NO_POINTS), new)
        if kind == "run" and not set(self.selection.modules) & set(self.known):
            self.selection.set_modules(result.modules)
        self.changed.emit(tuple(result.points))
        if not self._later.isActive():  # else the timer asks, for every step in by then
            self.request()

    def shutdown(self, timeout_ms: int = 2000) -> None:
        self._worker.shutdown(timeout_ms)
