"""StatGridModel: the shown run's stat grid (every traced module × enc | the denoising steps | dec) and its first
anomaly's cell, for the stats heat map. Read off the GUI thread by a plain function (read_grid) on a Worker, only
while the view is on screen (a view that comes back reads then), and not while the engine writes the run: it
fills in when the run ends. An answer for a run, or a moment of it, no longer wanted is dropped."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QWidget

from ghostviewer.analysis.stat_grid import StatGrid, stat_grid
from ghostviewer.gui.models.step_data_model import DrawWhenShown, Worker
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


class StatGridModel(QObject):
    gridChanged = Signal()  # grid and anomaly_cell are new (None while there is nothing to show)

    def __init__(self, timeline: TimelineModel, view: QWidget, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.timeline, self.view = timeline, view
        self.grid: StatGrid | None = None
        self.anomaly_cell: tuple[int, int] | None = None  # read once per reload, not once per step shown
        self._wanted: GridKey | None = None  # what is being read, or was read last
        self._reading = False
        self._worker = Worker(1, what="reading the stat grid", parent=self)
        self._worker.answered.connect(self._on_grid)
        self._pending = QTimer(self, singleShot=True, interval=REFRESH_MS)
        self._pending.timeout.connect(self.reload)
        timeline.runChanged.connect(self.reload)
        timeline.stepsChanged.connect(self._on_steps)
        timeline.statusChanged.connect(lambda: self._on_steps(timeline.count))  # the run's last rows
        self._drawing = DrawWhenShown(view, self._read, stale=False)  # read while on screen, else once back

    @property
    def loading(self) -> bool:
        """A grid is being read, or will be shortly (a refresh is pending)."""
        return self._reading or self._pending.isActive()

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
            self._wanted, self._reading = None, False
            self._set(None, None)
            return
        key = (str(record.path), self.timeline.status, self.timeline.count)
        if self._wanted is None or self._wanted[0] != key[0]:  # another run: not a moment of the old grid
            self._set(None, None)
        self._wanted, self._reading = key, True
        self._worker.submit(key, lambda: read_grid(record) if key == self._wanted else None)  # not if passed by

    def _on_grid(self, key: Any, result: Any) -> None:
        if key != self._wanted:
            return  # another run (or more of it) was asked for since
        self._reading = False
        if isinstance(result, tuple):
            self._set(*result)

    def _set(self, grid: StatGrid | None, anomaly_cell: tuple[int, int] | None) -> None:
        self.grid, self.anomaly_cell = grid, anomaly_cell
        self.gridChanged.emit()
