"""The per-module difference of two runs as a heat map: modules (rows, execution order) × encode / denoise steps /
decode, coloured by log10 of the relative delta of one statistic. Bit-identical outputs are dark teal, a
difference that changes no statistic is the lowest colour, non-finite on one side only is red, missing is grey.
A click focuses the module and moves both timelines to the step. Bound to CompareModel."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QFont, QResizeEvent
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from ghostviewer.analysis.stat_grid import fmt, grid_rgba
from ghostviewer.gui.models.compare_model import DELTA_STATS, CompareModel
from ghostviewer.gui.widgets.image_pane import BACKGROUND
from ghostviewer.gui.widgets.stats_heatmap import short

COLORMAP = "inferno"
FLOOR = 1e-7  # a relative delta this small (or a bit difference that moves no statistic) gets the lowest colour
SAME_RGBA = (22, 58, 66, 255)
LABEL_PX = 11
LABEL_CHARS = 24
COLUMN_PX = 22  # the width one column label needs


def row_label(module: str, width: int = LABEL_CHARS) -> str:
    """A module's short name, its start elided when long (the axis would otherwise take the view's width)."""
    name = short(module)
    return name if len(name) <= width else "…" + name[-(width - 1):]


def column_label(column: tuple[str, int | None]) -> str:
    return {"encode": "enc", "decode": "dec"}.get(column[0], str(column[1]))


def delta_rgba(deltas: np.ndarray, differs: np.ndarray, lut: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """RGBA cells and the log10 range their colours span (see the module docstring)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        shown = np.where(np.isfinite(deltas), np.log10(np.maximum(deltas, FLOOR)), deltas)
    shown = np.where(differs | np.isnan(deltas), shown, np.nan)  # identical cells: coloured apart below
    rgba, levels = grid_rgba(np.where(np.isinf(shown), np.nan, shown), np.isinf(deltas), lut)
    rgba[~differs & np.isfinite(deltas)] = SAME_RGBA
    return rgba, levels


class DeltaHeatmap(QWidget):
    def __init__(self, model: CompareModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.stat = QComboBox(toolTip="The statistic whose relative difference colours the cells")
        self.stat.addItems(list(DELTA_STATS))
        self.info = QLabel()
        self.info.setStyleSheet("color: #aaa")
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Δ"))
        bar.addWidget(self.stat)
        bar.addWidget(self.info, 1)
        self.plot = pg.PlotWidget(background=BACKGROUND)
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.getAxis("left").setStyle(tickFont=QFont(self.font().family(), 7))
        self.image = pg.ImageItem()
        self.plot.addItem(self.image)
        self.cursor = pg.QtWidgets.QGraphicsRectItem(0, 0, 1, 1)
        self.cursor.setPen(pg.mkPen("#ffca28", width=2))
        self.cursor.setVisible(False)
        self.plot.addItem(self.cursor)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.plot, 1)
        self.lut = pg.colormap.get(COLORMAP).getLookupTable(nPts=256, alpha=False)
        self.levels: tuple[float, float] | None = None  # the log10 range drawn (tests read it)
        self.stat.currentTextChanged.connect(model.set_stat)
        self.plot.scene().sigMouseClicked.connect(self._on_click)
        self.plot.scene().sigMouseMoved.connect(self._on_hover)
        model.comparisonChanged.connect(self._draw)
        model.blocks.moduleSelected.connect(lambda _m: self._mark())
        model.timeline_a.stepChanged.connect(lambda _s: self._mark())
        self._draw()

    def _draw(self) -> None:
        c = self.model.comparison
        if c is None or not c.modules:
            self.image.clear()
            self.levels = None
            self.info.setText(self.model.error)
            self._mark()
            return
        rgba, self.levels = delta_rgba(c.deltas, c.differs, self.lut)
        self.image.setImage(rgba, autoLevels=False, levels=(0, 255))
        self.image.setRect(QRectF(-0.5, 0, len(c.columns), len(c.modules)))
        self._label_rows()
        self.plot.setXRange(-0.5, len(c.columns) - 0.5, padding=0)
        self.plot.setYRange(0, len(c.modules), padding=0)
        lo, hi = self.levels
        self.info.setText(f"log10 relative Δ{c.stat}: {fmt(lo)} … {fmt(hi)}")
        self.info.setToolTip(f"{self.info.text()}\nteal: bit-identical · lowest colour: differs bit for bit only "
                             "· red: non-finite in one run · grey: missing in one run")
        self._mark()

    def _label_rows(self) -> None:
        """One label per row and column where they fit, else every k-th (labels must not overlap)."""
        c = self.model.comparison
        if c is None or not c.modules:
            return
        every = max(1, math.ceil(LABEL_PX * len(c.modules) / max(self.plot.getViewBox().height(), 1.0)))
        ticks = [(i + 0.5, row_label(m)) for i, m in enumerate(c.modules) if i % every == 0]
        self.plot.getAxis("left").setTicks([ticks])
        step = max(1, math.ceil(COLUMN_PX * len(c.columns) / max(self.plot.getViewBox().width(), 1.0)))
        last = len(c.columns) - 1
        self.plot.getAxis("bottom").setTicks(
            [[(float(j), column_label(col)) for j, col in enumerate(c.columns) if j % step == 0 or j == last]])

    def _mark(self) -> None:
        c, step = self.model.comparison, self.model.timeline_a.step
        module = self.model.blocks.selected
        if c is None or module not in c.modules or ("denoise", step) not in c.columns:
            self.cursor.setVisible(False)
            return
        row, col = c.modules.index(module), c.columns.index(("denoise", step))
        self.cursor.setRect(QRectF(col - 0.5, row, 1, 1))
        self.cursor.setVisible(True)

    def cell_at(self, scene_pos: QPointF) -> tuple[int, int] | None:
        c = self.model.comparison
        if c is None:
            return None
        point = self.plot.getViewBox().mapSceneToView(scene_pos)
        row, col = int(np.floor(point.y())), int(np.floor(point.x() + 0.5))
        return (row, col) if 0 <= row < len(c.modules) and 0 <= col < len(c.columns) else None

    def _on_click(self, event: object) -> None:
        cell = self.cell_at(event.scenePos())  # type: ignore[attr-defined]
        c = self.model.comparison
        if cell is not None and c is not None:
            self.model.select_cell(c.modules[cell[0]], c.columns[cell[1]])

    def _on_hover(self, scene_pos: QPointF) -> None:
        cell, c = self.cell_at(scene_pos), self.model.comparison
        if cell is None or c is None:
            self.plot.setToolTip("")
            return
        (row, col), value = cell, float(c.deltas[cell])
        state = "missing in one run" if math.isnan(value) else (
            "differs" if c.differs[cell] else "bit-identical")
        where = column_label(c.columns[col])
        self.plot.setToolTip(f"{c.modules[row]} · {where}\nrelative Δ{c.stat} {fmt(value)} · {state}")

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._label_rows()
