"""The statistic plot reads its series off the GUI thread (a run or a newly selected module whole, once; then only
each new step's rows), drops answers for a run no longer shown, and redraws a live run at most ~10 times a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.models.stat_selection import StatSelection, StatSeries, default_modules, merge_points
from ghostviewer.gui.models.timeline_model import TimelineModel
from ghostviewer.gui.widgets.stat_plot import LIVE_REDRAW_MS, StatPlot
from ghostviewer.record import RunRecord
from tests.gui.fake_runs import MODULES, write_fake_run


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict]]:
    """Every RunRecord.stats call: its thread and its arguments."""
    calls: list[dict] = []
    original = RunRecord.stats

    def stats(self, module=None, phase=None, step=None):  # noqa: ANN001, ANN202
        calls.append({"main": threading.current_thread() is threading.main_thread(), "module": module,
                      "step": step})
        return original(self, module, phase, step)

    monkeypatch.setattr(RunRecord, "stats", stats)
    yield calls


def make_plot(qtbot, synchronous: bool = False) -> StatPlot:  # noqa: ANN001
    timeline, selection = TimelineModel(), StatSelection()
    series = StatSeries(timeline, selection, synchronous=synchronous)
    plot = StatPlot(timeline, selection, series=series)
    series.setParent(plot)
    qtbot.addWidget(plot)
    return plot


def curve_data(plot: StatPlot, module: str) -> tuple[np.ndarray, np.ndarray]:
    return plot._curves[module].getData()


def test_a_live_run_is_read_off_the_gui_thread_one_new_step_at_a_time(qtbot, tmp_path: Path, reads) -> None:  # noqa: ANN001
    plot = make_plot(qtbot)
    timeline = plot.timeline

    def on_step(run_dir: Path, step: int) -> None:
        if step == 0:
            timeline.open_run(run_dir, live=True)
        else:
            timeline.refresh()
        qtbot.waitUntil(lambda: plot.idle, timeout=5000)

    run = write_fake_run(tmp_path, steps=6, on_step=on_step)
    timeline.set_live(False)
    qtbot.waitUntil(lambda: plot.idle, timeout=5000)
    assert reads and not any(call["main"] for call in reads), "a statistic was read on the GUI thread"
    whole = [c for c in reads if c["step"] is None]
    assert len(whole) == 1, "the run's series is read whole once, when it opens"
    new_steps = [c["step"] for c in reads if c["module"] is not None and c["step"] is not None]
    assert sorted(new_steps) == [1, 2, 3, 4, 5], "then only each new step, once"
    wanted = default_modules(MODULES)
    assert plot.selection.modules == wanted and set(plot._curves) == set(wanted)
    record = RunRecord(run)
    for module in wanted:
        x, y = curve_data(plot, module)
        steps, values = record.series(module, "absmax")
        assert list(x) == list(steps) and np.allclose(y, values)


def test_a_stat_change_redraws_from_memory(qtbot, tmp_path: Path, reads) -> None:  # noqa: ANN001
    plot = make_plot(qtbot, synchronous=True)
    run = write_fake_run(tmp_path, steps=4)
    plot.timeline.open_run(run)
    module = plot.selection.modules[0]
    before = len(reads)
    plot.selection.set_stat("std")
    assert len(reads) == before, "another statistic needs no read"
    assert np.allclose(curve_data(plot, module)[1], RunRecord(run).series(module, "std")[1])
    assert plot.plot.getAxis("left").labelText == "std"


def test_a_newly_selected_module_is_read_whole_and_a_removed_one_dropped(qtbot, tmp_path: Path, reads) -> None:  # noqa: ANN001
    plot = make_plot(qtbot, synchronous=True)
    plot.timeline.open_run(write_fake_run(tmp_path, steps=4))
    extra = plot.selection.modules[-1]
    plot.selection.toggle(extra, False)
    assert extra not in plot._curves and extra not in plot.series.points
    before = len(reads)
    plot.selection.toggle(extra, True)
    assert [c["module"] for c in reads[before:]] == [[extra]], "only the module added, read whole"
    assert len(curve_data(plot, extra)[0]) == 4


def test_the_runs_default_modules_when_none_selected_is_in_it(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    plot = make_plot(qtbot, synchronous=True)
    plot.selection.set_modules(["text_encoder.final_layer_norm"])
    plot.timeline.open_run(write_fake_run(tmp_path, steps=3))
    assert plot.selection.modules == default_modules(MODULES)
    assert [plot.modules.item(i).text() for i in range(plot.modules.count())] == MODULES
    plot.timeline.close_run()
    assert not plot._curves and plot.modules.count() == 0


def test_an_answer_for_a_run_no_longer_shown_is_dropped(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    first = write_fake_run(tmp_path, steps=3, seed=1)
    second = write_fake_run(tmp_path, steps=5, seed=2)
    gate, started = threading.Event(), threading.Event()
    original = RunRecord.stats

    def stats(self, module=None, phase=None, step=None):  # noqa: ANN001, ANN202
        if Path(self.path) == first:
            started.set()
            gate.wait(5)
        return original(self, module, phase, step)

    monkeypatch.setattr(RunRecord, "stats", stats)
    plot = make_plot(qtbot)
    plot.timeline.open_run(first)
    assert started.wait(5)
    plot.timeline.open_run(second)  # while the first run is being read
    gate.set()
    qtbot.waitUntil(lambda: plot.idle, timeout=5000)
    assert plot.series.dropped == 1 and plot.series.run_dir == str(second)
    module = plot.selection.modules[0]
    assert np.allclose(curve_data(plot, module)[1], RunRecord(second).series(module, "absmax")[1])


def test_a_live_run_is_redrawn_at_most_ten_times_a_second(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    plot = make_plot(qtbot)
    timeline = plot.timeline
    clock: dict[str, float] = {}

    def on_step(run_dir: Path, step: int) -> None:
        if step == 0:
            timeline.open_run(run_dir, live=True)
            clock["start"], clock["draws"] = time.monotonic(), plot.draws
        else:
            timeline.refresh()
        end = time.monotonic() + 0.01  # a step every ~10 ms, events handled meanwhile
        while time.monotonic() < end:
            QApplication.processEvents()

    write_fake_run(tmp_path, steps=40, on_step=on_step)
    elapsed_ms = 1000 * (time.monotonic() - clock["start"])
    draws = plot.draws - clock["draws"]
    assert 1 <= draws <= elapsed_ms / LIVE_REDRAW_MS + 2, (draws, elapsed_ms)
    timeline.set_live(False)
    qtbot.waitUntil(lambda: plot.idle, timeout=5000)
    assert all(len(curve.getData()[0]) == 40 for curve in plot._curves.values())
    assert abs(plot.line.value() - 39) < 1e-9


def test_merge_points_keeps_step_order() -> None:
    a = (np.array([0, 1, 3]), np.array([[0.0], [1.0], [3.0]]))
    steps, values = merge_points(a, (np.array([4, 5]), np.array([[4.0], [5.0]])))
    assert list(steps) == [0, 1, 3, 4, 5] and list(values[:, 0]) == [0, 1, 3, 4, 5]
    steps, values = merge_points(a, (np.array([1, 2]), np.array([[10.0], [2.0]])))
    assert list(steps) == [0, 1, 2, 3] and list(values[:, 0]) == [0, 10, 2, 3]


def test_a_value_with_no_finite_neighbour_is_drawn_as_a_point(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    """A run that turns NaN after step 0 leaves each curve one finite value: a line would draw nothing."""
    import sqlite3

    healthy = write_fake_run(tmp_path / "a", steps=4)
    broken = write_fake_run(tmp_path / "b", steps=4)
    with sqlite3.connect(broken / "run.sqlite") as conn:
        conn.execute("UPDATE stats SET absmax = NULL, min = NULL, max = NULL WHERE step >= 1")
    plot = make_plot(qtbot, synchronous=True)
    plot.resize(600, 300)
    plot.show()
    qtbot.waitExposed(plot)  # pyqtgraph fits its range when it paints
    plot.timeline.open_run(healthy)
    module = plot.selection.modules[0]
    qtbot.waitUntil(lambda: module in plot._curves and len(curve_data(plot, module)[0]) == 4)
    assert plot._curves[module].opts["symbol"] is None
    plot.timeline.open_run(broken)
    qtbot.waitUntil(lambda: plot._curves[module].opts["symbol"] == "o")
    x, y = curve_data(plot, module)
    assert np.isfinite(y).sum() == 1
    value = float(y[np.isfinite(y)][0])
    view = plot.plot.getViewBox()
    qtbot.waitUntil(lambda: view.viewRange()[1][0] <= value <= view.viewRange()[1][1])


def test_a_plot_whose_every_value_is_nan_says_so(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    import sqlite3

    healthy = write_fake_run(tmp_path / "a", steps=3)
    broken = write_fake_run(tmp_path / "b", steps=3)
    with sqlite3.connect(broken / "run.sqlite") as conn:
        conn.execute("UPDATE stats SET absmax = NULL, min = NULL, max = NULL")
    plot = make_plot(qtbot, synchronous=True)
    plot.show()
    qtbot.waitExposed(plot)
    plot.timeline.open_run(broken)
    qtbot.waitUntil(lambda: plot.no_finite.isVisible())
    assert "NaN" in plot.no_finite.text()
    plot.timeline.open_run(healthy)
    qtbot.waitUntil(lambda: not plot.no_finite.isVisible())
