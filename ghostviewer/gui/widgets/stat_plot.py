"""A statistic (absmax, std, mean, NaN count, fp16 headroom) over the steps, for chosen modules, with a
vertical line that follows the step slider (drag it to scrub). Bound to TimelineModel, StatSelection and
StatSeries (which reads the series off the GUI thread, a new step's rows only).

x is the record's step index. The y range follows the data (pyqtgraph's auto-range, which also works in log mode
and skips NaN/Inf) from each new run or selection until the user pans or zooms; the x range spans the run's
planned steps and every recorded one. During a live run the plot redraws at most every LIVE_REDRAW_MS, and only
the curves that got new points."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.stat_selection import NO_POINTS, PLOT_STATS, StatSelection, StatSeries
from ghostviewer.gui.models.timeline_model import TimelineModel

LIVE_REDRAW_MS = 100  # at most ~10 redraws a second while the engine writes the run
LIVE_NEW_CURVES = 2  # curves made per redraw during a live run (each costs the GUI thread several ms): the rest next
LEGEND_CHARS = 18
LEGEND_ROW_PX = 14
SWATCH_ROLE = Qt.ItemDataRole.UserRole + 1  # the colour a module's list item shows
# Ten colours apart from each other on the dark background (Tableau 10, brightened), then hues beyond them.
PALETTE = ("#5fa2e8", "#ffa64d", "#5fd35f", "#ff6b6b", "#c39bff", "#e0e060", "#ff8fd6", "#cfcfcf", "#4fe0f0",
           "#d6a37c")


def curve_colour(index: int) -> str:
    """A colour per curve, none shared by two curves in the plot (beyond ten: evenly spaced hues, darker)."""
    if index < len(PALETTE):
        return PALETTE[index]
    return pg.intColor(index - len(PALETTE), hues=9, values=1, maxValue=200).name()


def no_finite_values(series: Sequence[object]) -> bool:
    """True when there are recorded values and none of them is finite."""
    arrays = [np.asarray(values, dtype=np.float64) for values in series]
    return any(a.size for a in arrays) and not any(np.isfinite(a).any() for a in arrays)


def isolated_points(values: object) -> bool:
    """True when some finite value has no finite neighbour, so a line through the curve would not show it."""
    y = np.asarray(values, dtype=np.float64)
    if y.size == 0:
        return False
    finite = np.isfinite(y)
    left = np.concatenate([[False], finite[:-1]])
    right = np.concatenate([finite[1:], [False]])
    return bool((finite & ~left & ~right).any())


class ClippedAxis(pg.AxisItem):
    """pyqtgraph's axis, its grid lines recorded with a clip to the axis' own area: the same picture, but Qt's
    raster engine replays it ~40× faster (unclipped translucent lines in a QPicture take ~2-5 ms a paint)."""

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs) -> None:  # noqa: ANN001, N802, N803 - pyqtgraph's
        p.setClipRect(self.boundingRect().toAlignedRect())
        super().drawPicture(p, axisSpec, tickSpecs, textSpecs)


def swatch(colour: str) -> QIcon:
    pixmap = QPixmap(10, 10)
    pixmap.fill(QColor(colour))
    return QIcon(pixmap)


def legend_labels(modules: Sequence[str], room: int = LEGEND_CHARS) -> dict[str, str]:
    """Short legend names: the component all curves share dropped ("down_blocks.0" for unet.down_blocks.0), and a
    name still longer than `room` cut in the middle — the legend stays narrow beside the curves."""
    heads = {m.split(".", 1)[0] for m in modules}
    shared = len(heads) == 1 and all("." in m for m in modules)
    labels = {}
    for module in modules:
        name = module.split(".", 1)[1] if shared else module
        labels[module] = name if len(name) <= room else name[: room // 2 - 1] + "…" + name[-(room - room // 2):]
    return labels


class StepAxis(ClippedAxis):
    """The step axis: ticks on whole steps only (never 0.5, 1.5 on a 4-step run)."""

    def tickValues(self, minVal, maxVal, size):  # noqa: ANN001, ANN201, N802, N803 - pyqtgraph's
        levels = []
        for spacing, values in super().tickValues(minVal, maxVal, size):
            if spacing < 1:
                spacing = 1.0
                values = [float(v) for v in range(int(np.ceil(minVal)), int(np.floor(maxVal)) + 1)]
            values = [v for v in values if float(v).is_integer()]
            if values and all(values != kept for _s, kept in levels):
                levels.append((spacing, values))
        return levels


class StatPlot(QSplitter):
    def __init__(self, timeline: TimelineModel, selection: StatSelection, parent: QWidget | None = None, *,
                 series: StatSeries | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.timeline, self.selection = timeline, selection
        self.series = series if series is not None else StatSeries(timeline, selection, parent=self)
        side = QWidget()
        self.stat = QComboBox()
        self.stat.addItems(list(PLOT_STATS))
        self.filter = QLineEdit(placeholderText="filter modules", clearButtonEnabled=True)
        self.modules = QListWidget()
        column = QVBoxLayout(side)
        column.setContentsMargins(0, 0, 0, 0)
        for widget in (self.stat, self.filter, self.modules):
            column.addWidget(widget)
        self.plot = pg.PlotWidget(background="#202124",
                                  axisItems={"left": ClippedAxis("left"), "bottom": StepAxis("bottom")})
        self.plot.setLabel("bottom", "step")
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        # The legend in rows of its own above the curves (in the title's empty cell), never over them.
        item = self.plot.getPlotItem()
        self.legend = pg.LegendItem(labelTextSize="8pt", verSpacing=-8, horSpacing=2)
        self.legend.layout.setContentsMargins(2, 0, 2, 0)
        item.layout.removeItem(item.titleLabel)  # the plot has no title: its cell holds the legend
        item.titleLabel.hide()
        item.layout.addItem(self.legend, 0, 1)
        item.legend = self.legend  # plot(name=...) adds its curve here
        item.getViewBox().sigResized.connect(lambda _box: (self._flow_legend(), self._place_notice()))
        self.line = pg.InfiniteLine(angle=90, movable=True, pen=pg.mkPen("#ffca28", width=2))
        self.plot.addItem(self.line)
        # Said in words when every shown value is NaN/Inf: an empty plot must not look like "nothing recorded".
        self.no_finite = QLabel("", self.plot)
        self.no_finite.setStyleSheet("color: #ff6b6b; background: rgba(32, 33, 36, 200); padding: 2px 6px;")
        self.no_finite.move(60, 8)
        self.no_finite.hide()
        self.addWidget(side)
        self.addWidget(self.plot)
        self.setStretchFactor(1, 1)
        self.setSizes([220, 600])
        self._curves: dict[str, pg.PlotDataItem] = {}
        # Each curve's steps whose value is NaN/Inf, marked × in its colour along the top of the finite values:
        # a line that just stops would hide where (and which module) went non-finite.
        self._nan_marks: dict[str, pg.PlotDataItem] = {}
        self._listed: tuple[str, ...] = ()  # the modules in the list
        self._ylabel = ""
        self._redraw = QTimer(self)  # a live run's redraws, LIVE_REDRAW_MS apart at least
        self._redraw.setSingleShot(True)
        self._redraw.timeout.connect(self._draw)
        self._last_draw = float("-inf")  # time.monotonic() of the last redraw
        self._dirty: set[str] = set()  # modules whose curves need their points again
        self._all_dirty = True
        self.draws = 0  # redraws so far (tests count them)
        self._fit_y = True  # re-fit y to the data at the next redraw
        self._x_span = (0, 20)  # the steps the x axis spans now
        self.stat.currentTextChanged.connect(selection.set_stat)
        self.filter.textChanged.connect(self._apply_filter)
        self.modules.itemChanged.connect(self._on_item)
        self.line.sigPositionChangeFinished.connect(lambda line: timeline.set_step(round(line.value())))
        selection.changed.connect(self._on_selection)
        self.series.changed.connect(self._on_series)
        timeline.runChanged.connect(self._on_run)
        timeline.stepsChanged.connect(self._on_steps)
        timeline.stepChanged.connect(self._on_step)
        timeline.statusChanged.connect(self._on_status)
        self._on_run()

    @property
    def idle(self) -> bool:
        """Nothing being read and nothing waiting to be drawn (tests wait on it)."""
        return not self.series.loading and not self._redraw.isActive()

    # -- what changed -----------------------------------------------------------------------------
    def _say_when_nothing_is_finite(self, modules: Sequence[str], stat: str) -> None:
        if no_finite_values([self.series.series(m, stat)[1] for m in modules]):
            self.no_finite.setText(f"all {stat} values NaN/Inf")
            self.no_finite.adjustSize()
            self._place_notice()
            self.no_finite.show()
        else:
            self.no_finite.hide()

    def _mark_non_finite(self, modules: Sequence[str], stat: str) -> None:
        """× at each curve's NaN/Inf steps, in the curve's colour, at the height of the highest finite value."""
        series = {m: self.series.series(m, stat) for m in modules if m in self._curves}
        finite = [np.asarray(y, dtype=np.float64) for _x, y in series.values()]
        finite = [y[np.isfinite(y)] for y in finite]
        top = max((float(y.max()) for y in finite if y.size), default=1.0)
        for module, (x, y) in series.items():
            values = np.asarray(y, dtype=np.float64)
            steps = np.asarray(x, dtype=np.float64)[~np.isfinite(values)] if values.size else np.zeros(0)
            mark = self._nan_marks.get(module)
            if mark is None and not steps.size:
                continue
            if mark is None:
                mark = pg.PlotDataItem(pen=None, symbol="x", symbolSize=10)
                self.plot.addItem(mark)
                self._nan_marks[module] = mark
            colour = self._curves[module].opts["pen"].color()  # curves change colour when one goes
            mark.setData(steps, np.full(steps.size, top), symbolPen=pg.mkPen(colour, width=2), symbolBrush=colour)

    def _place_notice(self) -> None:
        """The NaN notice inside the curves' box, below the legend."""
        box = self.plot.getPlotItem().getViewBox()
        top = self.plot.mapFromScene(box.sceneBoundingRect().topLeft())
        self.no_finite.move(top.x() + 6, top.y() + 4)

    def _on_run(self) -> None:
        self._fit_y, self._all_dirty = True, True
        if self.timeline.record is None:  # nothing shown: a plain step axis rather than autorange's ±500
            self._x_span = (0, 20)
            self.plot.setRange(xRange=self._x_span, yRange=(0, 1), padding=0.02)
            self._fill_list(())
        self._fit_x()
        self._schedule()

    def _fit_x(self) -> None:
        """A fixed x range over the planned steps (the run fills it as it goes) and every recorded step."""
        total = self.timeline.planned_steps
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

    def _on_step(self, step: int) -> None:
        if self.timeline.live:
            if not self.series.loading:  # else the new step's points are on their way: one redraw for both
                self._schedule()  # the line moves with the next redraw
        else:
            self.line.setValue(max(step, 0))

    def _on_status(self) -> None:
        if not self.timeline.live and self._redraw.isActive():  # the run ended: what is pending, at once
            self._redraw.stop()
            self._draw()

    def _on_series(self, modules: Sequence[str]) -> None:
        if not modules:
            self._all_dirty = True
        self._dirty.update(modules)
        if self.series.known and self.series.known != self._listed:
            self._fill_list(self.series.known)
        self._schedule()

    def _on_selection(self) -> None:
        if self.stat.currentText() != self.selection.stat:
            self.stat.setCurrentText(self.selection.stat)
        self._check_listed()
        self._fit_y, self._all_dirty = True, True
        self._schedule()

    # -- module list ------------------------------------------------------------------------------
    def _fill_list(self, modules: Sequence[str]) -> None:
        self._listed = tuple(modules)
        self.modules.blockSignals(True)
        self.modules.clear()
        for module in modules:
            item = QListWidgetItem(module)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            self.modules.addItem(item)
        self.modules.blockSignals(False)
        self._check_listed()
        self._apply_filter(self.filter.text())
        self._colour_list()  # the new items' swatches (the next redraw need not flow the legend)

    def _check_listed(self) -> None:
        self.modules.blockSignals(True)
        chosen = set(self.selection.modules)
        for i in range(self.modules.count()):
            item = self.modules.item(i)
            state = Qt.CheckState.Checked if item.text() in chosen else Qt.CheckState.Unchecked
            if item.checkState() != state:
                item.setCheckState(state)
        self.modules.blockSignals(False)

    def _apply_filter(self, text: str) -> None:
        needle = text.strip().lower()
        for i in range(self.modules.count()):
            item = self.modules.item(i)
            item.setHidden(bool(needle) and needle not in item.text().lower())

    def _on_item(self, item: QListWidgetItem) -> None:
        self.selection.toggle(item.text(), item.checkState() == Qt.CheckState.Checked)

    # -- curves ---------------------------------------------------------------------------------
    def _schedule(self) -> None:
        """Redraw now; during a live run at the next free slot, LIVE_REDRAW_MS after the last redraw."""
        if not self.timeline.live:
            self._redraw.stop()
            self._draw()
        elif not self._redraw.isActive():
            wait_ms = LIVE_REDRAW_MS - 1000 * (time.monotonic() - self._last_draw)
            self._redraw.start(max(0, round(wait_ms)))

    def _wanted(self) -> list[str]:
        if self.timeline.record is None:
            return []
        if not self.series.known:  # a new run whose modules are not read yet: keep the curves, emptied
            return [m for m in self._curves if m in self.selection.modules]
        return self.series.modules

    def _flow_legend(self, changed: bool = False) -> None:
        """As many legend entries a row as the plot's width holds (`changed`: entries or their names changed)."""
        items = self.legend.items
        if not items:
            return
        widest = max(sample.boundingRect().width() + label.item.boundingRect().width() for sample, label in items) + 8
        room = self.plot.getPlotItem().getViewBox().width() or self.plot.width()
        columns = max(1, min(len(items), int(room // max(widest, 1))))
        if columns != self.legend.columnCount:
            self.legend.setColumnCount(columns)
            changed = True
        if changed:
            self.legend.updateGeometry()  # the plot's layout gives the legend its new height now
            self.plot.getPlotItem().layout.invalidate()
        # A short plot: a legend of a third of its height or more would crowd the curves out; the module list
        # says which colour is which instead (its checked names in their curves' colours).
        rows = -(-len(items) // columns)
        visible = rows * LEGEND_ROW_PX < self.plot.height() / 3
        if visible != self.legend.isVisible():
            self.legend.setVisible(visible)
            self.plot.getPlotItem().layout.invalidate()
        self._colour_list()

    def _colour_list(self) -> None:
        """A swatch of its curve's colour before each plotted module in the list (the legend when it is hidden)."""
        colours = {m: c.opts["pen"].color().name() for m, c in self._curves.items()}
        self.modules.blockSignals(True)
        for i in range(self.modules.count()):
            item = self.modules.item(i)
            colour = colours.get(item.text(), "")
            if item.data(SWATCH_ROLE) != colour:
                item.setData(SWATCH_ROLE, colour)
                item.setIcon(swatch(colour) if colour else QIcon())
        self.modules.blockSignals(False)

    def _sample(self, curve: pg.PlotDataItem) -> pg.GraphicsObject:
        """The legend's line sample of a curve (repainted when its colour changes)."""
        return next(sample for sample, _label in self.legend.items if sample.item is curve)

    def _draw(self) -> None:
        self._last_draw = time.monotonic()
        self.draws += 1
        wanted, stat = self._wanted(), self.selection.stat
        gone = [m for m in self._curves if m not in wanted]
        for module in gone:
            self.plot.removeItem(self._curves.pop(module))
            self.legend.removeItem(module)
            if module in self._nan_marks:
                self.plot.removeItem(self._nan_marks.pop(module))
        changed = bool(gone) or self._all_dirty
        if stat != self._ylabel:
            self.plot.setLabel("left", stat)
            self._ylabel, self._all_dirty = stat, True
        new_curves = [m for m in wanted if m not in self._curves]
        later = new_curves[LIVE_NEW_CURVES:] if self.timeline.live else []
        for i, module in enumerate(wanted):
            curve = self._curves.get(module)
            colour = curve_colour(i)
            if curve is None and module in later:
                continue  # made at the next redraw, an event-loop pass of its own
            if curve is None:
                curve = self.plot.plot(name=module, pen=pg.mkPen(colour, width=2))
                self._curves[module] = curve
            elif curve.opts["pen"].color().name() != colour:  # another curve went: colours stay one a curve
                curve.setPen(pg.mkPen(colour, width=2))
                self._sample(curve).update()
            elif not (self._all_dirty or module in self._dirty):
                continue  # no new points
            x, y = self.series.series(module, stat)
            # A value with non-finite neighbours (a run that turns NaN after step 0) draws no line: mark it.
            alone = isolated_points(y)
            pen = curve.opts["pen"]
            curve.setData(x, y, symbol="o" if alone else None, symbolSize=6, symbolPen=pen,
                          symbolBrush=pen.color() if alone else None)
            changed = True
        if changed:
            self._mark_non_finite(wanted, stat)
        labels = legend_labels(wanted)
        relabelled = False
        for sample, label in self.legend.items:
            name = sample.item.name()
            if name in labels and label.text != labels[name]:
                label.setText(labels[name])
                relabelled = True
        if relabelled or new_curves or gone:  # else the legend is as it was (a resize flows it again itself)
            self._flow_legend(True)
        self._all_dirty = False
        self._dirty.clear()
        self._say_when_nothing_is_finite(wanted, stat)
        if self._fit_y and any(len(self.series.points.get(m, NO_POINTS)[0]) for m in wanted):
            self._fit_y = False  # from now on pyqtgraph follows the data, until the user pans or zooms
            self.plot.enableAutoRange(y=True)
        self.line.setValue(max(self.timeline.step, 0))
        if later:
            self._redraw.start(0)
