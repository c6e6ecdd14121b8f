"""StatGridModel: the shown run's stat grid (every traced module × enc | the denoising steps | dec) and its first
anomaly's cell, for the stats heat map. Read off the GUI thread by a plain function (read_grid) on a Worker, only
while the view is on screen (a view that comes back reads then). While the engine writes the run, only the new
steps' rows are read (read_new_steps, at most every LIVE_READ_MS) and added to the grid as new columns
(extend_grid); when the run ends it is read whole once (its decode column, its first anomaly). An answer for a run,
or a moment of it, no longer wanted is dropped. The grid's |robust z| against the baseline the run was judged by
(read_baseline_z) is read the same way, when first asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QWidget

from ghostviewer.analysis.baseline import deviation_grid
from ghostviewer.analysis.baseline_store import recorded_baseline_key, run_baseline
from ghostviewer.analysis.stat_grid import StatGrid, stat_grid
from ghostviewer.gui.link.worker import Worker
from ghostviewer.gui.models.step_data_model import DrawWhenShown
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, RunRecord, StatRow
from ghostviewer.record.types import PHASE_ORDER

REFRESH_MS = 250  # new rows of a run that is not live (e.g. its last ones), read together
LIVE_READ_MS = 250  # a live run's new steps, read together at most four times a second

GridKey = tuple[str, str, int]  # (run folder, status — "live" while written —, recorded steps): what was read for


def _better(row: StatRow, than: StatRow) -> bool:
    """stat_grid's choice of the row a cell shows: a bad call first, then the first call."""
    def rank(r: StatRow) -> tuple[bool, int, int]:
        return not (r.nan_count or r.inf_count), r.call, r.seq
    return rank(row) < rank(than)


def extend_grid(grid: StatGrid | None, rows: Sequence[StatRow]) -> StatGrid | None:
    """`grid` with more rows added (a live run's next steps): new columns in phase and step order, modules first
    seen in them below the others (their outputs come later in execution order). The same grid stat_grid gives
    for all the rows at once; when the new columns only follow the old ones (the usual case) the old cells are
    kept as they are. None when there is nothing to show."""
    if grid is None or not grid.modules:
        return stat_grid(rows) if rows else grid
    more = stat_grid(rows)
    if not more.modules:
        return grid
    known = set(grid.modules)
    modules = grid.modules + [m for m in more.modules if m not in known]
    columns = sorted(set(grid.columns) | set(more.columns), key=lambda c: (PHASE_ORDER.get(c[0], 1), c[1] or 0))
    col_of = {c: j for j, c in enumerate(columns)}
    if columns[:len(grid.columns)] == grid.columns:
        cells = dict(grid.rows)  # appended columns: every old cell keeps its place
    else:
        cells = {(i, col_of[grid.columns[j]]): r for (i, j), r in grid.rows.items()}
    row_of = {m: i for i, m in enumerate(modules)}
    for (i, j), r in more.rows.items():
        key = (row_of[more.modules[i]], col_of[more.columns[j]])
        if key not in cells or _better(r, cells[key]):
            cells[key] = r
    bad = np.zeros((len(modules), len(columns)), bool)
    for (i, j), r in cells.items():
        bad[i, j] = bool(r.nan_count or r.inf_count)
    return StatGrid(modules, columns, bad, cells)


def read_new_steps(record: RunRecord, grid: StatGrid | None, steps: Sequence[int]
                   ) -> tuple[StatGrid | None, tuple[int, int] | None] | None:
    """`grid` with the rows of these denoising steps added (with no grid yet: the encode rows too); a worker
    thread calls this while the run is written. None when the record cannot be read now (mid-write)."""
    try:
        rows = [] if grid is not None else record.stats(phase="encode")
        for step in steps:
            rows += record.stats(phase="denoise", step=int(step))
    except RecordError:
        return None
    return extend_grid(grid, rows), None  # the first anomaly is judged when the run ends


def read_grid(record: RunRecord) -> tuple[StatGrid | None, tuple[int, int] | None] | None:
    """The run's stat grid and its first anomaly's cell (a worker thread calls this); None when unreadable."""
    try:
        rows = record.stats()
        grid = stat_grid(rows) if rows else None
        return grid, None if grid is None else grid.anomaly_cell(record.first_anomaly)
    except RecordError:
        return None


def read_baseline_z(record: RunRecord, grid: StatGrid) -> np.ndarray:
    """|z| of each cell's output against the baseline the run was judged by (deviation_grid), shaped like the
    grid; NaN where the baseline has no envelope, or everywhere when the run had none (a worker calls this)."""
    values = np.full(grid.bad.shape, np.nan)
    try:
        baseline = run_baseline(record.path, recorded_baseline_key(record.events(kind="baseline")))
    except RecordError:
        baseline = None
    if baseline is not None:
        z = deviation_grid(grid.rows.values(), baseline)
        for (i, j), row in grid.rows.items():
            values[i, j] = z.get((row.module, row.step), np.nan)
    return values


class StatGridModel(QObject):
    gridChanged = Signal()  # grid and anomaly_cell are new (None while there is nothing to show)
    baselineZChanged = Signal()  # baseline_z() has the shown grid's values now

    def __init__(self, timeline: TimelineModel, view: QWidget, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.timeline, self.view = timeline, view
        self.grid: StatGrid | None = None
        self.anomaly_cell: tuple[int, int] | None = None  # read once per reload, not once per step shown
        self._wanted: GridKey | None = None  # what is being read, or was read last
        self._reading = False
        self._worker = Worker(1, latest=True, what="reading the stat grid", parent=self)
        self._worker.answered.connect(self._on_grid)
        self._z: tuple[StatGrid, np.ndarray] | None = None  # the baseline z of a grid
        self._z_worker = Worker(1, latest=True, what="reading the baseline z", parent=self)
        self._z_worker.answered.connect(self._on_z)
        self.reads = {"whole": 0, "steps": 0}  # reads so far, by kind (tests count them)
        self._pending = QTimer(self, singleShot=True, interval=REFRESH_MS)
        self._pending.timeout.connect(self.reload)
        timeline.runChanged.connect(self.reload)
        timeline.stepsChanged.connect(self._on_steps)
        timeline.statusChanged.connect(lambda: self._on_steps(timeline.count))  # the run's last rows
        self._drawing = DrawWhenShown(view, self._read, stale=False)  # read while on screen, else once back

    @property
    def loading(self) -> bool:
        """A grid is being read, or will be shortly (a refresh is pending)."""
        return self._reading or self._pending.isActive() or self._z_worker.busy

    def baseline_z(self) -> np.ndarray | None:
        """|z| of each cell of the shown grid against the run's baseline (read_baseline_z); None while it is
        read: baselineZChanged follows."""
        grid, record = self.grid, self.timeline.record
        if grid is None or record is None:
            return None
        if self._z is not None and self._z[0] is grid:
            return self._z[1]
        if not self._z_worker.busy:
            self._z_worker.submit(grid, lambda _task: read_baseline_z(record, grid))
        return None

    def _on_z(self, grid: Any, result: Any) -> None:
        if grid is not self.grid:
            return  # another grid is shown since
        self._z = (grid, result if isinstance(result, np.ndarray) else np.full(grid.bad.shape, np.nan))
        self.baselineZChanged.emit()

    def _on_steps(self, _count: int) -> None:
        # A live run's steps come in one by one: only theirs are read, LIVE_READ_MS apart at most, and added as
        # columns; the whole grid is read again only once the run has ended.
        if not self._pending.isActive():
            self._pending.setInterval(LIVE_READ_MS if self.timeline.live else REFRESH_MS)
            self._pending.start()

    def reload(self) -> None:
        self._drawing.changed()

    def _read(self) -> None:
        record = self.timeline.record
        if record is None:
            self._worker.cancel()
            self._wanted, self._reading = None, False
            self._set(None, None)
            return
        live = self.timeline.live
        key = (str(record.path), "live" if live else self.timeline.status, self.timeline.count)
        same_run = self._wanted is not None and self._wanted[0] == key[0]
        if not same_run:  # another run: not a moment of the old grid
            self._set(None, None)
        if live:
            if self._reading and same_run and self._wanted is not None and self._wanted[1] == "live":
                return  # one step read at a time: its answer asks for what came in meanwhile
            grid = self.grid if same_run else None
            have = set(grid.steps) if grid is not None else set()
            steps = [info.index for info in self.timeline.steps if info.index not in have]
            if not steps:
                return
            self._wanted, self._reading = key, True
            self.reads["steps"] += 1
            self._worker.submit(key, lambda _task: read_new_steps(record, grid, steps))
            return
        self._wanted, self._reading = key, True
        self.reads["whole"] += 1
        self._worker.submit(key, lambda _task: read_grid(record))  # cancels a read not wanted any more

    def _on_grid(self, key: Any, result: Any) -> None:
        if key != self._wanted:
            return  # another run (or more of it) was asked for since
        self._reading = False
        if isinstance(result, tuple):
            self._set(*result)
        if key[1] == "live" and self.timeline.live:
            if self.timeline.count != key[2]:
                self._drawing.changed()  # steps that came in during the read
            elif not isinstance(result, tuple):
                self._on_steps(self.timeline.count)  # unreadable mid-write: again shortly

    def _set(self, grid: StatGrid | None, anomaly_cell: tuple[int, int] | None) -> None:
        self.grid, self.anomaly_cell = grid, anomaly_cell
        self._z_worker.cancel()  # a z read for the grid before is not wanted
        self.gridChanged.emit()
