"""The stats heat map: every traced module (rows, execution order: text encoder, denoiser, VAE) × the run's
phases (columns: enc | the denoising steps | dec), coloured by one statistic (or "z (baseline)": |robust z| against
the baseline the run was judged by, read off the GUI thread when first shown); NaN/Inf cells red, the first
anomaly outlined wherever it happened. A click moves the timeline's step and the module in focus (BlockModel).
Step columns are the record's step indexes. The grid comes from a StatGridModel (read off the GUI thread, only
while this view is on screen; a live run's new steps as new columns); this file draws it and handles the mouse.
A new grid is drawn at the next frame (several in one frame: once); a grid that only adds columns to the one drawn
colours only its new cells and keeps the labels and phase lines that did not change."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from ghostviewer.analysis.stat_grid import (
    HEATMAP_STATS,
    StatGrid,
    display_values,
    fmt,
    grid_rgba,
    grid_values,
    row_summary,
    stat_value,
)
from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.models.stat_grid_model import StatGridModel
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.image_pane import BACKGROUND

HEATMAP_COLORMAP = "inferno"
BASELINE_Z = "z (baseline)"  # |robust z| of each output against the shown run's baseline (analysis/baseline.py)
READING_Z = f"reading the run's baseline for {BASELINE_Z}…"
LABEL_PX = 11  # the height one module label needs
COLUMN_LABEL_PX = 24  # the width one column label ("dec", "18") needs
FRAME_MS = 16  # new grids drawn at most once a frame


def extends(grid: StatGrid, drawn: StatGrid | None) -> bool:
    """`grid` is `drawn` with columns added after its own (a live run's next steps), its modules the same."""
    return (drawn is not None and grid.modules == drawn.modules and len(grid.columns) >= len(drawn.columns)
            and grid.columns[:len(drawn.columns)] == drawn.columns)


def short(module: str) -> str:
    return module.removeprefix("unet.").removeprefix("transformer.").replace("text_encoder.", "text.", 1)


class StatsHeatmap(QWidget):
    jumpRequested = Signal()

    def __init__(self, timeline: TimelineModel, blocks: BlockModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline, self.blocks = timeline, blocks
        self.stat = QComboBox(toolTip="The statistic that colours the cells")
        self.stat.addItems([*HEATMAP_STATS, BASELINE_Z])
        self.log = QCheckBox("log", checked=True, toolTip="log10 colour scale (absmax, std, fp16 headroom)")
        self.jump = QPushButton("⚠ First anomaly", toolTip="Select the first anomaly's module and step (Ctrl+J)")
        self.info = QLabel()
        self.info.setStyleSheet("color: #aaa")
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar = QHBoxLayout()
        for widget in (self.stat, self.log, self.jump):
            bar.addWidget(widget)
        bar.addStretch(1)
        self.plot = pg.PlotWidget(background=BACKGROUND)
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.setLabel("bottom", "enc · denoising step · dec")
        self.plot.getAxis("bottom").setStyle(hideOverlappingLabels=False)  # "enc" and "dec" sit at the edges
        self.plot.getPlotItem().setContentsMargins(2, 2, 14, 2)  # room for "dec" past the last column
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
        self.phase_lines: list[pg.InfiniteLine] = []  # between enc | steps | dec
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.info)
        self.lut = pg.colormap.get(HEATMAP_COLORMAP).getLookupTable(nPts=256, alpha=False)
        self.draws = {"full": 0, "columns": 0, "cells": 0}  # redraws: whole, new columns only; cells valued
        self._drawn: tuple[StatGrid, str, np.ndarray] | None = None  # the grid drawn, its stat, the raw values
        self._ticks: tuple[object, object, object] = (None, None, None)  # row labels, column labels, phase spans
        self._frame = QTimer(self, singleShot=True, interval=FRAME_MS)
        self._frame.timeout.connect(self._draw)
        self.data = StatGridModel(timeline, self, parent=self)
        self.data.gridChanged.connect(self._frame.start)  # at the next frame: a burst of grids is drawn once
        self.data.baselineZChanged.connect(self._draw)
        self.stat.currentTextChanged.connect(lambda _s: self._draw())
        self.log.toggled.connect(lambda _on: self._draw())
        self.jump.clicked.connect(self.jumpRequested)
        self.plot.getViewBox().sigResized.connect(lambda _box: (self._label_rows(), self._label_columns()))
        self.plot.scene().sigMouseClicked.connect(self._on_click)
        self.plot.scene().sigMouseMoved.connect(self._on_hover)
        timeline.stepChanged.connect(self._on_step)
        blocks.moduleSelected.connect(lambda _m: self._mark())
        blocks.anomalyChanged.connect(lambda _m: self._mark())
        self.data.reload()

    # -- data -------------------------------------------------------------------------------------
    @property
    def grid(self) -> StatGrid | None:
        return self.data.grid

    @property
    def loading(self) -> bool:
        """A grid is being read, or will be shortly (a refresh is pending), or waits for the next frame."""
        return self.data.loading or self._frame.isActive()

    def reload(self) -> None:
        self.data.reload()

    def _values(self, grid: StatGrid, stat: str) -> np.ndarray:
        """The raw values of `stat` over the grid: only the new columns' cells when it extends the grid drawn."""
        drawn = self._drawn
        if drawn is not None and drawn[1] == stat and extends(grid, drawn[0]):
            old = drawn[2]
            start = old.shape[1]
            values = np.full(grid.bad.shape, np.nan)
            values[:, :start] = old
            for (i, j), row in grid.rows.items():
                if j >= start:
                    values[i, j] = stat_value(row, stat)
                    self.draws["cells"] += 1
            self.draws["columns"] += 1
            return values
        self.draws["full"] += 1
        self.draws["cells"] += len(grid.rows)
        return grid_values(grid, stat)

    def _draw(self) -> None:
        self._frame.stop()
        grid, stat = self.grid, self.stat.currentText()
        if grid is None or not grid.modules:
            self._drawn, self._ticks = None, (None, None, None)
            self.image.clear()
            self.plot.getAxis("left").setTicks([[]])
            self.plot.getAxis("bottom").setTicks(None)
            self.plot.setRange(xRange=(0, 20), yRange=(0, 1), padding=0.02)
            self._mark()
            return
        z = self.data.baseline_z() if stat == BASELINE_Z else None  # None while read: baselineZChanged follows
        reading = stat == BASELINE_Z and z is None
        if stat != BASELINE_Z:
            values = self._values(grid, stat)
            self._drawn = (grid, stat, values)
        else:
            values = np.full(grid.bad.shape, np.nan) if z is None else z
            self._drawn = None
            self.draws["full"] += 1
        rgba, (lo, hi) = grid_rgba(display_values(values, stat, self.log.isChecked()), grid.bad, self.lut)
        self.image.setImage(rgba, autoLevels=False, levels=(0, 255))
        columns = len(grid.columns)
        self.image.setRect(QRectF(-0.5, 0, columns, len(grid.modules)))
        self._label_rows()
        self._label_columns()
        self._draw_phase_lines(grid)
        self.plot.setRange(xRange=(-0.5, columns - 0.5), yRange=(0, len(grid.modules)), padding=0)
        scale = "log10 " if self.log.isChecked() and stat not in ("nan_count", BASELINE_Z) else ""
        unjudged = stat == BASELINE_Z and not np.isfinite(values).any()
        self.info.setText(READING_Z if reading else f"{BASELINE_Z}: this run was judged against no baseline"
                          if unjudged else f"{scale}{stat}: {fmt(lo)} … {fmt(hi)} · red = NaN/Inf")
        self._mark()

    def _label_columns(self) -> None:
        """enc and dec always; the step columns (their record index) every k-th, where they fit beside them."""
        grid = self.grid
        if grid is None or not grid.columns:
            return
        col_px = max(self.plot.getViewBox().width(), 1.0) / len(grid.columns)
        every = max(1, math.ceil(COLUMN_LABEL_PX / col_px))
        fixed = [j for j, (phase, _s) in enumerate(grid.columns) if phase != "denoise"]
        steps = [j for j, (phase, _s) in enumerate(grid.columns) if phase == "denoise"]
        shown = set(fixed) | {j for n, j in enumerate(steps)
                              if n % every == 0 and all(abs(j - f) >= every for f in fixed)}
        ticks = [[(float(j), grid.label(j)) for j in sorted(shown)]]
        if ticks != self._ticks[1]:  # the axis lays itself out again at every setTicks
            self._ticks = (self._ticks[0], ticks, self._ticks[2])
            self.plot.getAxis("bottom").setTicks(ticks)

    def _draw_phase_lines(self, grid: StatGrid) -> None:
        """A line between enc | the steps | dec."""
        spans = grid.phase_spans()[:-1]
        if spans == self._ticks[2]:
            return
        self._ticks = (self._ticks[0], self._ticks[1], spans)
        for line in self.phase_lines:
            self.plot.removeItem(line)
        self.phase_lines = [pg.InfiniteLine(end + 0.5, angle=90, pen=pg.mkPen("#9e9e9e", width=1))
                            for _phase, _start, end in spans]
        for line in self.phase_lines:
            self.plot.addItem(line)

    def _label_rows(self) -> None:
        """One module label per row where they fit, else every k-th (labels must not overlap)."""
        grid = self.grid
        if grid is None or not grid.modules:
            return
        row_px = max(self.plot.getViewBox().height(), 1.0) / len(grid.modules)
        every = max(1, math.ceil(LABEL_PX / row_px))
        ticks = [[(i + 0.5, short(m)) for i, m in enumerate(grid.modules) if i % every == 0]]
        if ticks != self._ticks[0]:
            self._ticks = (ticks, self._ticks[1], self._ticks[2])
            self.plot.getAxis("left").setTicks(ticks)

    # -- markers ----------------------------------------------------------------------------------
    def _step_number(self) -> int | None:
        return None if self.timeline.step < 0 else self.timeline.step

    def _place(self, item: pg.QtWidgets.QGraphicsRectItem, cell: tuple[int, int] | None) -> None:
        item.setVisible(cell is not None)
        if cell is not None:
            item.setRect(QRectF(cell[1] - 0.5, cell[0], 1, 1))

    def _cursor_cell(self, module: str, step: int | None) -> tuple[int, int] | None:
        """The selected module at the shown step, or in its own phase's column (a text-encoder or VAE module)."""
        grid = self.grid
        if grid is None or module not in grid.modules:
            return None
        cell = grid.cell(module, step) if step is not None else None
        home = grid.home_column(module)
        return cell if cell is not None or home is None else (grid.modules.index(module), home)

    def anomaly_cell(self) -> tuple[int, int] | None:
        """The first anomaly's cell: its module in its phase (and step); None when there is none."""
        return self.data.anomaly_cell

    def _on_step(self, step: int) -> None:
        grid = self.grid
        if self.timeline.live and self.data.loading and grid is not None and grid.step_column(step) is None:
            return  # a live run's new step: its column is being read, and is marked when drawn (one repaint)
        self._mark()

    def _mark(self) -> None:
        step = self._step_number()
        grid = self.grid
        column = grid.step_column(step) if grid is not None and step is not None else None
        self.step_line.setVisible(column is not None)
        if column is not None:
            self.step_line.setValue(column)
        self._place(self.cursor, self._cursor_cell(self.blocks.selected, step))
        self._place(self.anomaly, self.data.anomaly_cell)

    # -- mouse ------------------------------------------------------------------------------------
    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        if self.grid is None:
            return None
        point = self.plot.getViewBox().mapSceneToView(scene_pos)
        row, col = int(np.floor(point.y())), int(np.floor(point.x() + 0.5))
        if 0 <= row < len(self.grid.modules) and 0 <= col < len(self.grid.columns):
            return row, col
        return None

    def select_cell(self, row: int, col: int) -> None:
        """Focus the module of `row` (tree, feature maps) and move the timeline to the step of `col` (a step
        column; enc and dec leave the timeline where it is)."""
        if self.grid is None:
            return
        module, (phase, step) = self.grid.modules[row], self.grid.columns[col]
        self.blocks.select(module)
        if phase == "denoise" and step is not None and self.timeline.position_of(step) is not None:
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
        call = f" (call {row.call})" if row.call else ""
        where = f"step {row.step}" if row.phase == "denoise" else row.phase + call
        self.plot.setToolTip(f"{row.module} · {where}\n{row_summary(row)}\n"
                             f"fp16 headroom {fmt(row.fp16_headroom)} · NaN {row.nan_count} · Inf {row.inf_count}")
