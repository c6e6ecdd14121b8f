"""The stats heat map: denoiser modules (rows, execution order) × steps, coloured by one statistic; NaN/Inf
cells red, the first anomaly outlined. A click moves the timeline's step and the module in focus (BlockModel).
Columns are the record's step indexes; the grid is read again only while the view is on screen."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QResizeEvent
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from ghostviewer.analysis.stat_grid import (
    HEATMAP_STATS,
    StatGrid,
    display_values,
    fmt,
    grid_rgba,
    grid_values,
    row_summary,
    stat_grid,
)
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.step_data_model import is_shown, watch_visibility
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.image_pane import BACKGROUND
from ghostviewer.record import RecordError

HEATMAP_COLORMAP = "inferno"
LIVE_REFRESH_MS = 250
LABEL_PX = 11  # the height one module label needs


def short(module: str) -> str:
    return module.removeprefix("unet.").removeprefix("transformer.")


class StatsHeatmap(QWidget):
    jumpRequested = Signal()

    def __init__(self, timeline: TimelineModel, blocks: BlockModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline, self.blocks = timeline, blocks
        self.stat = QComboBox(toolTip="The statistic that colours the cells")
        self.stat.addItems(list(HEATMAP_STATS))
        self.log = QCheckBox("log", checked=True, toolTip="log10 colour scale (absmax, std, fp16 headroom)")
        self.jump = QPushButton("Jump to first anomaly", toolTip="Select the first anomaly's module and step (Ctrl+J)")
        self.info = QLabel()
        self.info.setStyleSheet("color: #aaa")
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar = QHBoxLayout()
        for widget in (self.stat, self.log, self.jump):
            bar.addWidget(widget)
        bar.addWidget(self.info, 1)
        self.plot = pg.PlotWidget(background=BACKGROUND)
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setLabel("bottom", "step")
        self.plot.getAxis("left").setStyle(tickFont=QFont(self.font().family(), 7))
        self.image = pg.ImageItem()
        self.plot.addItem(self.image)
        pen = pg.mkPen("#ffca28", width=2)
        self.step_line = pg.InfiniteLine(angle=90, pen=pg.mkPen("#ffca28", width=1, style=Qt.PenStyle.DashLine))
        self.cursor = pg.QtWidgets.QGraphicsRectItem(0, 0, 1, 1)
        self.cursor.setPen(pen)
        self.anomaly = pg.QtWidgets.QGraphicsRectItem(0, 0, 1, 1)
        self.anomaly.setPen(pg.mkPen("#ffffff", width=2, style=Qt.PenStyle.DotLine))
        for item in (self.step_line, self.cursor, self.anomaly):
            self.plot.addItem(item)
            item.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.plot, 1)
        self.lut = pg.colormap.get(HEATMAP_COLORMAP).getLookupTable(nPts=256, alpha=False)
        self.grid: StatGrid | None = None
        self._stale = False  # the run changed while the view was hidden
        self._pending = QTimer(self, singleShot=True, interval=LIVE_REFRESH_MS)
        self._pending.timeout.connect(self.reload)
        self.stat.currentTextChanged.connect(lambda _s: self._draw())
        self.log.toggled.connect(lambda _on: self._draw())
        self.jump.clicked.connect(self.jumpRequested)
        self.plot.scene().sigMouseClicked.connect(self._on_click)
        self.plot.scene().sigMouseMoved.connect(self._on_hover)
        timeline.runChanged.connect(self.reload)
        timeline.stepsChanged.connect(self._on_steps)
        timeline.statusChanged.connect(lambda: self._on_steps(self.timeline.count))  # the run's last rows
        timeline.stepChanged.connect(lambda _s: self._mark())
        blocks.moduleSelected.connect(lambda _m: self._mark())
        blocks.anomalyChanged.connect(lambda _m: self._mark())
        watch_visibility(self, lambda: self.reload() if self._stale else None)
        self.reload()

    # -- data -------------------------------------------------------------------------------------
    def _on_steps(self, _count: int) -> None:
        # Re-reading every row and redrawing the grid costs tens of milliseconds on the GUI thread; during a
        # live run that would stall the window once a refresh, so the grid fills in when the run ends.
        if self.timeline.live:
            return
        if not self._pending.isActive():
            self._pending.start()

    def reload(self) -> None:
        if not is_shown(self):
            self._stale = True
            return
        self._stale = False
        record = self.timeline.record
        try:
            rows = record.stats(phase="denoise") if record is not None else []
        except RecordError:
            return
        self.grid = stat_grid(rows) if rows else None
        self._draw()

    def _draw(self) -> None:
        grid, stat = self.grid, self.stat.currentText()
        if grid is None or not grid.modules:
            self.image.clear()
            self.plot.getAxis("left").setTicks([[]])
            self.plot.getAxis("bottom").setTicks(None)
            self.plot.setRange(xRange=(0, 20), yRange=(0, 1), padding=0.02)
            self._mark()
            return
        values = grid_values(grid, stat)
        rgba, (lo, hi) = grid_rgba(display_values(values, stat, self.log.isChecked()), grid.bad, self.lut)
        self.image.setImage(rgba, autoLevels=False, levels=(0, 255))
        self.image.setRect(QRectF(-0.5, 0, len(grid.steps), len(grid.modules)))
        self._label_rows()
        bottom = self.plot.getAxis("bottom")
        every = max(1, len(grid.steps) // 6)
        bottom.setTicks([[(float(j), str(s)) for j, s in enumerate(grid.steps) if j % every == 0]])
        self.plot.setXRange(-0.5, len(grid.steps) - 0.5, padding=0)
        self.plot.setYRange(0, len(grid.modules), padding=0)
        scale = "log10 " if self.log.isChecked() and stat != "nan_count" else ""
        self.info.setText(f"{scale}{stat}: {fmt(lo)} … {fmt(hi)} · red = NaN/Inf")
        self._mark()

    def _label_rows(self) -> None:
        """One module label per row where they fit, else every k-th (labels must not overlap)."""
        grid = self.grid
        if grid is None or not grid.modules:
            return
        row_px = max(self.plot.getViewBox().height(), 1.0) / len(grid.modules)
        every = max(1, math.ceil(LABEL_PX / row_px))
        self.plot.getAxis("left").setTicks(
            [[(i + 0.5, short(m)) for i, m in enumerate(grid.modules) if i % every == 0]])

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._label_rows()

    # -- markers ----------------------------------------------------------------------------------
    def _step_number(self) -> int | None:
        return None if self.timeline.step < 0 else self.timeline.step

    def _place(self, item: pg.QtWidgets.QGraphicsRectItem, module: str, step: int | None) -> None:
        cell = self.grid.cell(module, step) if self.grid is not None and step is not None else None
        item.setVisible(cell is not None)
        if cell is not None:
            item.setRect(QRectF(cell[1] - 0.5, cell[0], 1, 1))

    def _mark(self) -> None:
        step = self._step_number()
        grid = self.grid
        self.step_line.setVisible(grid is not None and step in (grid.steps if grid else []))
        if grid is not None and step in grid.steps:
            self.step_line.setValue(grid.steps.index(step))
        self._place(self.cursor, self.blocks.selected, step)
        record = self.timeline.record
        anomaly = (record.first_anomaly if record is not None else None) or {}
        self._place(self.anomaly, str(anomaly.get("module") or ""), anomaly.get("step"))

    # -- mouse ------------------------------------------------------------------------------------
    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        if self.grid is None:
            return None
        point = self.plot.getViewBox().mapSceneToView(scene_pos)
        row, col = int(np.floor(point.y())), int(np.floor(point.x() + 0.5))
        if 0 <= row < len(self.grid.modules) and 0 <= col < len(self.grid.steps):
            return row, col
        return None

    def select_cell(self, row: int, col: int) -> None:
        """Focus the module of `row` (tree, feature maps) and move the timeline to the step of `col`."""
        if self.grid is None:
            return
        module, step = self.grid.modules[row], self.grid.steps[col]
        self.blocks.select(module)
        if self.timeline.position_of(step) is not None:
            self.timeline.set_step(step)
        self._mark()

    def _on_click(self, event: object) -> None:
        cell = self.cell_at(event.scenePos())  # type: ignore[attr-defined]
        if cell is not None:
            self.select_cell(*cell)

    def _on_hover(self, scene_pos: QPointF) -> None:
        cell = self.cell_at(scene_pos)
        row = self.grid.rows.get(cell) if self.grid is not None and cell is not None else None
        if row is None:
            self.plot.setToolTip("")
            return
        self.plot.setToolTip(f"{row.module} · step {row.step}\n{row_summary(row)}\n"
                             f"fp16 headroom {fmt(row.fp16_headroom)} · NaN {row.nan_count} · Inf {row.inf_count}")
