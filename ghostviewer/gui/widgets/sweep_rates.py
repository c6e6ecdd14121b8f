"""Failure rates of the shown sweep, per prompt or per seed: a table and a bar chart (pyqtgraph BarGraphItem).
Prompts are numbered in list order — the table, the chart's axis and the grid's rows say the same number.
Clicking a row filters the gallery to that prompt or seed."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QResizeEvent, QShowEvent
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from ghostviewer.gui.models.sweep_model import SweepModel

BY = ("prompt", "seed")
BAR_OK, BAR_BAD = "#2e7d32", "#c62828"
TICK_GAP_PX, AXIS_PX = 8, 40  # room between two axis labels; the chart's left axis and margins


class SweepRates(QWidget):
    rowChosen = Signal(str, str)  # "prompt" | "seed", the value

    def __init__(self, model: SweepModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self._labels: list[tuple[int, str]] = []
        self.by = QComboBox()
        self.by.addItems([f"per {b}" for b in BY])
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["", "failed", "rate"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        header = self.table.horizontalHeader()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, header.ResizeMode.Stretch)  # the prompt, elided; its numbers always show
        for column in (1, 2):
            header.setSectionResizeMode(column, header.ResizeMode.ResizeToContents)
        self.plot = pg.PlotWidget(background="#202124")
        self.plot.setLabel("left", "failure rate")
        self.plot.setLabel("bottom", "prompt")
        self.plot.setYRange(0, 1, padding=0.05)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.setMinimumHeight(120)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8)
        self.plot.addItem(self.bars)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(self.by)
        top.addStretch(1)
        column.addLayout(top)
        column.addWidget(self.table, 1)
        column.addWidget(self.plot, 1)
        self.by.currentIndexChanged.connect(self.refresh)
        self.table.cellClicked.connect(self._on_clicked)
        model.changed.connect(self.refresh)
        self._shown: tuple[str, list] | None = None  # the rates the table and chart show (by what, rows)
        self._stale = False  # asked to refresh while hidden
        self.refresh()

    @property
    def kind(self) -> str:
        return BY[max(0, self.by.currentIndex())]

    def rows(self) -> list[tuple[object, int, int, float]]:
        return self.model.stats.table(self.kind)

    def refresh(self) -> None:
        if not self.isVisible():  # hidden beside a narrow grid: filled when it shows (a live sweep's refreshes)
            self._stale = True
            return
        self._stale = False
        rows = self.rows()
        if (self.kind, rows) == self._shown:
            return  # a live sweep's progress only: the rates are those shown
        self._shown = (self.kind, rows)
        header = self.table.horizontalHeader()
        for column in (1, 2):  # fitted once at the end, not once per cell (100 prompts: 0.9 s -> a few ms)
            header.setSectionResizeMode(column, header.ResizeMode.Interactive)
        self.table.setUpdatesEnabled(False)
        try:
            self._fill(rows)
        finally:
            for column in (1, 2):
                header.setSectionResizeMode(column, header.ResizeMode.ResizeToContents)
            self.table.setUpdatesEnabled(True)
        heights = np.array([r[3] for r in rows], dtype=float)
        brushes = [pg.mkBrush(BAR_BAD if h > 0 else BAR_OK) for h in heights]
        self.bars.setOpts(x=np.arange(len(rows)), height=np.maximum(heights, 0.01), width=0.8, brushes=brushes)
        self.plot.setLabel("bottom", self.kind)
        self._labels = [(i, str(i + 1) if self.kind == "prompt" else str(r[0])) for i, r in enumerate(rows)]
        self._fit_ticks()
        self.plot.setXRange(-0.6, max(len(rows), 1) - 0.4, padding=0)

    def _fill(self, rows: list[tuple[object, int, int, float]]) -> None:
        self.table.setRowCount(len(rows))
        for i, (key, failed, total, rate) in enumerate(rows):
            name = f"{i + 1}. {key}" if self.kind == "prompt" else f"seed {key}"
            cells = (name, f"{failed}/{total}", f"{100 * rate:.0f} %")
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{key}: {failed}/{total} failed")
                if failed and j == 2:
                    item.setForeground(QColor(BAR_BAD))
                if j:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, item)

    def _fit_ticks(self) -> None:
        """As many axis labels as the chart's width holds (50 seeds in 200 px: every third), never overlapping."""
        labels = self._labels
        widest = max((self.fontMetrics().horizontalAdvance(text) for _, text in labels), default=0) + TICK_GAP_PX
        room = max(1, self.plot.width() - AXIS_PX)
        every = max(1, math.ceil(len(labels) * widest / room))
        self.plot.getAxis("bottom").setTicks([labels[::every]])

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if self._stale:
            self.refresh()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._fit_ticks()

    def _on_clicked(self, row: int, _column: int) -> None:
        rows = self.rows()
        if 0 <= row < len(rows):
            self.rowChosen.emit(self.kind, str(rows[row][0]))
