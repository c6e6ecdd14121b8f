"""A statistic (absmax, std, mean, NaN count, fp16 headroom) over the steps, for chosen modules, with a
vertical line that follows the step slider (drag it to scrub). Bound to TimelineModel and StatSelection.

x is the record's step index. The y range follows the data (pyqtgraph's auto-range, which also works in log mode
and skips NaN/Inf) from each new run or selection until the user pans or zooms; the x range spans the run's
planned steps and every recorded one."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QComboBox, QLineEdit, QListWidget, QListWidgetItem, QSplitter, QVBoxLayout, QWidget

from ghostviewer.gui.models.stat_selection import PLOT_STATS, StatSelection, default_modules
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.record import RecordError, StatRow


class StatPlot(QSplitter):
    def __init__(self, timeline: TimelineModel, selection: StatSelection, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.timeline, self.selection = timeline, selection
        side = QWidget()
        self.stat = QComboBox()
        self.stat.addItems(list(PLOT_STATS))
        self.filter = QLineEdit(placeholderText="filter modules", clearButtonEnabled=True)
        self.modules = QListWidget()
        column = QVBoxLayout(side)
        column.setContentsMargins(0, 0, 0, 0)
        for widget in (self.stat, self.filter, self.modules):
            column.addWidget(widget)
        self.plot = pg.PlotWidget(background="#202124")
        self.plot.setLabel("bottom", "step")
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.legend = self.plot.addLegend(offset=(-10, 10), labelTextSize="8pt", brush=pg.mkBrush(32, 33, 36, 210))
        self.line = pg.InfiniteLine(angle=90, movable=True, pen=pg.mkPen("#ffca28", width=2))
        self.plot.addItem(self.line)
        self.addWidget(side)
        self.addWidget(self.plot)
        self.setStretchFactor(1, 1)
        self.setSizes([220, 600])
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._known: list[str] = []
        self._rows: dict[str, dict[int, StatRow]] = {}
        self._cache_key: tuple | None = None
        self._ylabel = ""
        self._pending = QTimer(self)  # new steps replot in their own event-loop pass, after the images
        self._pending.setSingleShot(True)
        self._pending.setInterval(0)
        self._pending.timeout.connect(self._replot)
        self._fit_y = True  # re-fit y to the data at the next replot
        self._x_span = (0, 20)  # the steps the x axis spans now
        self.stat.currentTextChanged.connect(selection.set_stat)
        self.filter.textChanged.connect(self._apply_filter)
        self.modules.itemChanged.connect(self._on_item)
        self.line.sigPositionChangeFinished.connect(lambda line: timeline.set_step(round(line.value())))
        selection.changed.connect(self._on_selection)
        timeline.runChanged.connect(self._on_run)
        timeline.stepsChanged.connect(self._on_steps)
        timeline.stepChanged.connect(lambda step: self.line.setValue(max(step, 0)))
        self._on_run()

    # -- module list ------------------------------------------------------------------------------
    def _denoise_modules(self) -> list[str]:
        record = self.timeline.record
        if record is None or self.timeline.count == 0:
            return []
        try:
            first = self.timeline.steps[0].index
            return list(dict.fromkeys(row.module for row in record.stats(phase="denoise", step=first)))
        except RecordError:
            return []

    def _on_run(self) -> None:
        self._known, self._cache_key = [], None
        self._fit_y = True
        if self.timeline.record is None:  # nothing shown: a plain step axis rather than autorange's ±500
            self._x_span = (0, 20)
            self.plot.setRange(xRange=self._x_span, yRange=(0, 1), padding=0.02)
        self._fit_x()
        self._on_steps(self.timeline.count)

    def _fit_x(self) -> None:
        """A fixed x range over the planned steps (the run fills it as it goes) and every recorded step."""
        total = self.timeline.settings.get("steps")
        recorded = [info.index for info in self.timeline.steps]
        if not (isinstance(total, int) and total > 1) and not recorded:
            if self.timeline.record is not None:
                self.plot.enableAutoRange(x=True)
            return
        last = max([total - 1 if isinstance(total, int) else 0, *recorded])
        first = min([0, *recorded])
        self._x_span = (first, max(last, first + 1))
        self.plot.setXRange(*self._x_span, padding=0.02)

    def _on_steps(self, _count: int) -> None:
        if self.timeline.steps and self.timeline.steps[-1].index > self._x_span[1]:
            self._fit_x()  # a step beyond the planned ones
        if not self._known:
            self._known = self._denoise_modules()
            if self._known and not set(self.selection.modules) & set(self._known):
                self.selection.set_modules(default_modules(self._known))
            self._fill_list()
        if self.timeline.live:
            self._pending.start()
        else:
            self._replot()

    def _fill_list(self) -> None:
        self.modules.blockSignals(True)
        self.modules.clear()
        for module in self._known:
            item = QListWidgetItem(module)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            on = module in self.selection.modules
            item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
            self.modules.addItem(item)
        self.modules.blockSignals(False)
        self._apply_filter(self.filter.text())

    def _apply_filter(self, text: str) -> None:
        needle = text.strip().lower()
        for i in range(self.modules.count()):
            item = self.modules.item(i)
            item.setHidden(bool(needle) and needle not in item.text().lower())

    def _on_item(self, item: QListWidgetItem) -> None:
        self.selection.toggle(item.text(), item.checkState() == Qt.CheckState.Checked)

    def _on_selection(self) -> None:
        if self.stat.currentText() != self.selection.stat:
            self.stat.setCurrentText(self.selection.stat)
        self._fill_list()
        self._fit_y = True
        self._replot()

    # -- curves ---------------------------------------------------------------------------------
    def _wanted(self) -> list[str]:
        return [m for m in self.selection.modules if m in self._known] if self.timeline.record is not None else []

    def _fetch(self, wanted: list[str]) -> None:
        """Keep call-0 denoise rows of the wanted modules: everything once, then only the new steps."""
        record = self.timeline.record
        key = (self.timeline.run_dir, tuple(wanted))
        try:
            if key != self._cache_key:
                self._rows = {m: {} for m in wanted}
                rows = record.stats(module=wanted, phase="denoise") if wanted and record else []
                self._cache_key = key
            else:
                have = {s for per in self._rows.values() for s in per}
                rows = [row for info in self.timeline.steps if info.index not in have
                        for row in record.stats(module=wanted, phase="denoise", step=info.index)]  # type: ignore[union-attr]
        except RecordError:
            return
        for row in rows:
            if row.call == 0 and row.module in self._rows:
                self._rows[row.module][int(row.step)] = row  # type: ignore[arg-type]

    def _replot(self) -> None:
        wanted, stat = self._wanted(), self.selection.stat
        for module in [m for m in self._curves if m not in wanted]:
            self.plot.removeItem(self._curves.pop(module))
            self.legend.removeItem(module)
        if stat != self._ylabel:
            self.plot.setLabel("left", stat)
            self._ylabel = stat
        self._fetch(wanted)
        for i, module in enumerate(wanted):
            per_step = self._rows.get(module, {})
            steps = sorted(per_step)
            values = [stat_value(per_step[s], stat) for s in steps]
            curve = self._curves.get(module)
            if curve is None:
                curve = self.plot.plot(name=module, pen=pg.mkPen(pg.intColor(i, hues=max(len(wanted), 6)), width=2))
                self._curves[module] = curve
            curve.setData(np.asarray(steps, float), np.asarray(values, float))
        if self._fit_y and any(len(self._rows.get(m, {})) for m in wanted):
            self._fit_y = False  # from now on pyqtgraph follows the data, until the user pans or zooms
            self.plot.enableAutoRange(y=True)
        self.line.setValue(max(self.timeline.step, 0))


def stat_value(row: StatRow, stat: str) -> float:
    return float(row.fp16_headroom if stat == "fp16_headroom" else getattr(row, stat))
