"""A curve that turns NaN does not just stop: each step whose value is NaN/Inf is marked × in the curve's colour,
along the top of the finite values, so the plot says which module went bad and from which step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.models.stat_selection import StatSelection, StatSeries
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.stat_plot import StatPlot
from ghostviewer.record import RunWriter, StatRow, StepInfo

MODULES = ("unet.down_blocks.0", "unet.up_blocks.1")


def _run(runs_dir: Path, steps: int = 5, nan_from: int = 2) -> Path:
    """unet.up_blocks.1's output NaN from `nan_from` on (its statistics NaN, as the tracer records them)."""
    writer = RunWriter.create(runs_dir, {"prompt": "p", "seed": 1, "steps": steps, "guidance": 7.5,
                                         "source": "demo", "device": "cpu"}, {"device": "cpu"})
    seq = 0
    for step in range(steps):
        rows = []
        for i, module in enumerate(MODULES):
            bad = module == "unet.up_blocks.1" and step >= nan_from
            value = float("nan") if bad else 2.0 + step + i
            rows.append(StatRow("denoise", step, module, 0, seq, (2, 4, 8, 8), "float32", -value, value, 0.0,
                                value / 3, value, 512 if bad else 0, 0))
            seq += 1
        writer.add_stats(rows)
        latents = np.zeros((4, 8, 8), np.float32)
        writer.add_step(StepInfo(step, 999.0 - 50 * step, None, 0.01, 1, 1, None, "rss"), {"latents": latents},
                        {"preview": np.zeros((8, 8, 3), np.uint8)})
    writer.set_verdict({"label": "nan", "scores": {}}, {"phase": "denoise", "step": nan_from,
                                                        "module": "unet.up_blocks.1", "kind": "nan"})
    writer.finish("done", 0.1)
    return writer.path


def test_nan_steps_are_marked_in_the_curves_colour(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    timeline, selection = TimelineModel(), StatSelection()
    series = StatSeries(timeline, selection, synchronous=True)
    plot = StatPlot(timeline, selection, series=series)
    series.setParent(plot)
    qtbot.addWidget(plot)
    plot.resize(560, 260)
    plot.show()
    qtbot.waitExposed(plot)
    timeline.open_run(_run(tmp_path))
    for module in MODULES:
        selection.toggle(module, True)
    qtbot.waitUntil(lambda: plot.idle and len(plot._curves) == len(MODULES))
    QApplication.processEvents()
    assert set(plot._nan_marks) == {"unet.up_blocks.1"}  # the healthy curve has no marks
    mark = plot._nan_marks["unet.up_blocks.1"]
    xs, ys = mark.getData()
    assert list(xs) == [2.0, 3.0, 4.0] and np.all(ys == 6.0)  # its NaN steps, at the highest finite absmax
    assert mark.opts["symbolPen"].color() == plot._curves["unet.up_blocks.1"].opts["pen"].color()
    (x_lo, x_hi), (y_lo, y_hi) = plot.plot.getPlotItem().getViewBox().viewRange()
    assert x_lo <= 2 and x_hi >= 4 and y_lo <= 6.0 <= y_hi  # in view

    image = plot.plot.grab().toImage()  # and drawn: the marks' colour is on screen along their row
    colour = mark.opts["symbolPen"].color()
    box = plot.plot.getPlotItem().getViewBox()
    hits = 0
    for step in (2, 3, 4):
        centre = plot.plot.mapFromScene(box.mapViewToScene(pg_point(step, 6.0)))
        for dx in range(-3, 4):
            for dy in range(-3, 4):
                pixel = image.pixelColor(centre.x() + dx, centre.y() + dy)
                hits += abs(pixel.red() - colour.red()) + abs(pixel.green() - colour.green()) + \
                    abs(pixel.blue() - colour.blue()) < 60
    assert hits >= 6, hits

    selection.toggle("unet.up_blocks.1", False)  # its curve goes: so do its marks
    qtbot.waitUntil(lambda: plot.idle and len(plot._curves) == 1)
    assert plot._nan_marks == {}


def pg_point(x: float, y: float):  # noqa: ANN201
    from PySide6.QtCore import QPointF

    return QPointF(x, y)
