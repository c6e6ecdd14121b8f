"""The stat plot's legend stands beside the curves, never over them; no two curves share a colour (however many
are added and removed); a 4-step run's step axis has whole-step ticks only."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QApplication

from ghostviewer.gui.models.stat_selection import StatSelection, StatSeries
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.stat_plot import StatPlot
from tests.gui.fake_runs import MODULES, write_fake_run


def _plot(qtbot, tmp_path: Path, steps: int, extra: tuple[str, ...] = ()) -> StatPlot:  # noqa: ANN001
    timeline, selection = TimelineModel(), StatSelection()
    series = StatSeries(timeline, selection, synchronous=True)
    plot = StatPlot(timeline, selection, series=series)
    series.setParent(plot)
    qtbot.addWidget(plot)
    plot.resize(560, 260)  # the plot's share of the window at 1280×720
    plot.show()
    qtbot.waitExposed(plot)
    timeline.open_run(write_fake_run(tmp_path, steps=steps))
    for module in (*MODULES, *extra):
        selection.toggle(module, True)
    qtbot.waitUntil(lambda: plot.idle and len(plot._curves) == len(MODULES))
    QApplication.processEvents()
    return plot


def _colours(plot: StatPlot) -> list[str]:
    return [curve.opts["pen"].color().name() for curve in plot._curves.values()]


def test_the_legend_never_covers_the_curves(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    plot = _plot(qtbot, tmp_path, steps=20)
    view = plot.plot.getPlotItem().getViewBox().sceneBoundingRect()
    legend = plot.legend.sceneBoundingRect()
    assert plot.legend.isVisible() and legend.width() > 0 and len(plot.legend.items) == len(MODULES)
    assert view.top() >= legend.bottom() - 1 or view.right() <= legend.left() + 1, (view, legend)
    assert view.width() * view.height() >= 3 * legend.width() * legend.height(), "the curves keep most of the plot"
    assert {label.text for _sample, label in plot.legend.items} >= {"down_blocks.0", "conv_in"}


def test_no_two_curves_share_a_colour(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    plot = _plot(qtbot, tmp_path, steps=4)
    assert len(set(_colours(plot))) == len(MODULES), _colours(plot)
    plot.selection.toggle(MODULES[0], False)  # one goes, the rest move up a place
    plot.selection.toggle(MODULES[0], True)  # and it comes back last
    qtbot.waitUntil(lambda: plot.idle and len(plot._curves) == len(MODULES))
    assert len(set(_colours(plot))) == len(MODULES), _colours(plot)
    samples = {sample.item.opts["pen"].color().name() for sample, _label in plot.legend.items}
    assert samples == set(_colours(plot))


def test_a_four_step_run_has_whole_step_ticks(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    plot = _plot(qtbot, tmp_path, steps=4)
    axis = plot.plot.getPlotItem().getAxis("bottom")
    low, high = plot.plot.getPlotItem().getViewBox().viewRange()[0]
    ticks = [v for _spacing, values in axis.tickValues(low, high, axis.width()) for v in values]
    assert ticks and all(float(v).is_integer() for v in ticks), ticks
    assert {0, 1, 2, 3} <= set(ticks)



def test_a_short_plot_names_the_colours_in_its_list(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    plot = _plot(qtbot, tmp_path, steps=4)
    plot.resize(560, 110)  # the plot squeezed by an open bottom dock at 1280×720
    QApplication.processEvents()
    plot._draw()
    assert not plot.legend.isVisible(), ("a crowding legend steps aside", plot.plot.height(), plot.legend.columnCount)
    from ghostviewer.gui.widgets.stat_plot import SWATCH_ROLE

    listed = {plot.modules.item(i).text(): plot.modules.item(i).data(SWATCH_ROLE)
              for i in range(plot.modules.count())}
    assert all(not plot.modules.item(i).icon().isNull() for i in range(plot.modules.count()))
    assert all(listed[m] == plot._curves[m].opts["pen"].color().name() for m in MODULES), listed


def test_a_legend_of_many_rows_still_stands_clear(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    plot = _plot(qtbot, tmp_path, steps=20)
    plot.resize(560, 300)
    for module in list(plot._curves)[:2]:  # the names change length: the rows re-flow
        plot.selection.toggle(module, False)
        plot.selection.toggle(module, True)
    qtbot.waitUntil(lambda: plot.idle)
    QApplication.processEvents()
    view = plot.plot.getPlotItem().getViewBox().sceneBoundingRect()
    legend = plot.legend.sceneBoundingRect()
    rows = -(-len(plot.legend.items) // plot.legend.columnCount)
    assert legend.height() >= rows * 12, (legend.height(), rows)
    assert view.top() >= legend.bottom() - 1, (view, legend)
