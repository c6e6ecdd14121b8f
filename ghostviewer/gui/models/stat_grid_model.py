"""StatGridModel: the shown run's stat grid (every traced module × enc | the denoising steps | dec) and its first
anomaly's cell, for the stats heat map. Read off the GUI thread by a plain function (read_grid) on a Worker, only
while the view is on screen (a view that comes back reads then), and not while the engine writes the run: it
fills in when the run ends. An answer for a run, or a moment of it, no longer wanted is dropped. The grid's
|robust z| against the baseline the run was judged by (read_baseline_z) is read the same way, when first asked
for."""

from __future__ import annotations

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
from ghostviewer.record import RecordError, RunRecord

REFRESH_MS = 250  # new rows of a run that is not live (e.g. its last ones), read together

GridKey = tuple[str, str, int]  # (run folder, status, recorded steps): what a grid was read for


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
        # Re-reading every row and redrawing the grid costs tens of milliseconds on the GUI thread; during a
        # live run that would stall the window once a refresh, so the grid fills in when the run ends.
        if self.timeline.live:
            return
        if not self._pending.isActive():
            self._pending.start()

    def reload(self) -> None:
        self._drawing.changed()

    def _read(self) -> None:
        record = self.timeline.record
        if record is None or self.timeline.live:
            self._worker.cancel()
            self._wanted, self._reading = None, False
            self._set(None, None)
            return
        key = (str(record.path), self.timeline.status, self.timeline.count)
        if self._wanted is None or self._wanted[0] != key[0]:  # another run: not a moment of the old grid
            self._set(None, None)
        self._wanted, self._reading = key, True
        self._worker.submit(key, lambda _task: read_grid(record))  # cancels a read not wanted any more

    def _on_grid(self, key: Any, result: Any) -> None:
        if key != self._wanted:
            return  # another run (or more of it) was asked for since
        self._reading = False
        if isinstance(result, tuple):
            self._set(*result)

    def _set(self, grid: StatGrid | None, anomaly_cell: tuple[int, int] | None) -> None:
        self.grid, self.anomaly_cell = grid, anomaly_cell
        self._z_worker.cancel()  # a z read for the grid before is not wanted
        self.gridChanged.emit()
