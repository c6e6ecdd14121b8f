"""An img2img or inpaint run makes the strength's share of its steps (6 at strength 0.7: 4, as diffusers counts):
the timeline's step label, the stat plot's step axis, the badge and the queue's progress count those, not 6."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QApplication

from ghostviewer.gui.models.queue_model import Job
from ghostviewer.gui.models.stat_selection import StatSelection, StatSeries
from ghostviewer.gui.models.timeline_model import TimelineModel, planned_steps
from ghostviewer.gui.widgets.stat_plot import StatPlot
from ghostviewer.gui.widgets.timeline_bar import TimelineBar
from tests.gui.fake_runs import MODULES, write_fake_run

IMG2IMG = {"prompt": "a blue square on a yellow background", "seed": 10, "steps": 6, "kind": "img2img",
           "strength": 0.7}


def test_the_planned_steps_follow_the_strength() -> None:
    assert planned_steps(IMG2IMG) == 4 and planned_steps({**IMG2IMG, "strength": 1.0}) == 6
    assert planned_steps({"steps": 10, "kind": "img2img"}) == 8  # diffusers' default strength 0.8
    assert planned_steps({"steps": 10, "kind": "inpaint"}) == 10 and planned_steps({"steps": 20}) == 20
    assert planned_steps({"steps": 3, "kind": "img2img", "strength": 0.1}) == 1 and planned_steps({}) is None
    job = Job(1, dict(IMG2IMG))
    assert job.steps == 4  # the queue's progress bar fills at the run's last step


def test_an_img2img_run_shows_the_steps_it_made(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    timeline, selection = TimelineModel(), StatSelection()
    series = StatSeries(timeline, selection, synchronous=True)
    plot, bar = StatPlot(timeline, selection, series=series), TimelineBar(timeline)
    series.setParent(plot)
    for widget in (plot, bar):
        qtbot.addWidget(widget)
        widget.resize(560, 260)
        widget.show()
    qtbot.waitExposed(plot)
    timeline.open_run(write_fake_run(tmp_path, steps=4, settings=dict(IMG2IMG)))
    for module in MODULES:
        selection.toggle(module, True)
    qtbot.waitUntil(lambda: plot.idle and len(plot._curves) == len(MODULES))
    QApplication.processEvents()
    assert timeline.planned_steps == 4 and bar.step_label.full_text.startswith("step 3 of 0–3")
    low, high = plot.plot.getPlotItem().getViewBox().viewRange()[0]
    assert -0.2 < low <= 0 and 3 <= high < 3.2, (low, high)  # the axis ends at the last step made, not at 5
