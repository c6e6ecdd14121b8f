"""The Compare dock readable at 1280×720 and 1366×768, with the default layout and after Reset layout: both runs'
ids whole on their own line, the picker showing run B (never another run of the folder), every setting's name
and values as wide as their texts (the table scrolls sideways rather than cut "False" to "Fa…"), and the
settings, images and heat map as tabs across the dock where three columns would not fit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication

from ghostviewer.gui.app_settings import AppSettings
from tests.gui.fake_runs import write_fake_run

SIZES = [(1280, 720), (1366, 768)]


def _runs(folder: Path) -> list[Path]:
    """Four runs; the oldest first in the folder (a picker that falls back to an entry shows another run)."""
    settings = {"faults": ["unseeded-noise"], "capture_attention": False, "prompt": "a red circle on a blue background"}
    return [write_fake_run(folder, steps=4, seed=seed, run_id=f"20261201-1003{seed:02d}-a93{seed:03d}",
                           settings=settings) for seed in (1, 2, 3, 4)]


def _open(window, qtbot, size: tuple[int, int], reset: bool, a: Path, b: Path) -> object:  # noqa: ANN001
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    if reset:
        window.actions.reset_layout.trigger()
    QApplication.processEvents()
    window.state.history.refresh()
    model = window.state.controller.compare
    model.synchronous = True
    assert window.state.controller.compare_runs(str(a), str(b))
    qtbot.waitUntil(lambda: model.comparison is not None and Path(model.comparison.run_a) == a
                    and Path(model.comparison.run_b) == b)
    QApplication.processEvents()
    return window.compare_view


@pytest.fixture(scope="module")
def four_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The four runs, written once: the tests below only read them."""
    return _runs(tmp_path_factory.mktemp("compare-readable-runs"))


@pytest.fixture(scope="module", params=[(size, reset) for reset in (False, True) for size in SIZES],
                ids=lambda p: f"{p[0][0]}x{p[0][1]}-{'reset' if p[1] else 'default'}")
def sized(request: pytest.FixtureRequest, qapp, tmp_path_factory: pytest.TempPathFactory,  # noqa: ANN001
          four_runs: list[Path]) -> Iterator[tuple[object, tuple[int, int], bool]]:
    """One window per size and layout (default, or after Reset layout), new; both tests of that size compare in it,
    as a user compares one pair and then another."""
    from ghostviewer.gui.app import create_window

    size, reset = request.param
    window = create_window(AppSettings(tmp_path_factory.mktemp("compare-readable") / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(four_runs[0].parent)
    yield window, size, reset
    window.state.controller.shutdown()
    window.close()
    window.deleteLater()


def test_compare_names_both_runs_whole_and_picks_b(sized, qtbot, four_runs: list[Path]) -> None:  # noqa: ANN001
    window, size, reset = sized
    runs = four_runs
    view = _open(window, qtbot, size, reset, runs[3], runs[2])
    assert view.isVisible()
    assert runs[3].name in view.title.text() and runs[2].name in view.title.text(), view.title.text()
    assert not view.title.elided(), (view.title.text(), view.title.width())
    assert Path(view.picker.currentData()) == runs[2], view.picker.currentText()
    assert view.picker.currentText().startswith(runs[2].name)
    view.swap.click()
    qtbot.waitUntil(lambda: Path(view.model.comparison.run_b) == runs[3])
    assert Path(view.picker.currentData()) == runs[3]


def test_setting_values_are_never_cut(sized, qtbot, four_runs: list[Path]) -> None:  # noqa: ANN001
    window, size, reset = sized
    runs = four_runs
    view = _open(window, qtbot, size, reset, runs[0], runs[1])
    assert Path(view.picker.currentData()) == runs[1], view.picker.currentText()
    table = view.settings
    assert not view.wide, "at these sizes the three parts are tabs"
    view.tabs.setCurrentWidget(table)
    QApplication.processEvents()
    assert table.isVisible() and table.width() >= 400, table.width()
    metrics = QFontMetrics(table.font())
    values = set()
    for row in range(table.rowCount()):
        for column in range(3):
            item = table.item(row, column)
            font_metrics = QFontMetrics(item.font()) if item.font().bold() else metrics
            need = font_metrics.horizontalAdvance(item.text())
            assert table.columnWidth(column) >= need, (item.text(), table.columnWidth(column), need)
            assert item.toolTip() == item.text()
            values.add(item.text())
    assert "False" in values and "['unseeded-noise']" in values


def test_three_parts_side_by_side_when_wide(window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    runs = _runs(gui_env)
    view = _open(window, qtbot, (1366, 768), False, runs[0], runs[1])
    window.compare_view.parentWidget()  # the dock's scroll area
    dock = next(d for d in window.docks if d.windowTitle() == "Compare")
    dock.setFloating(True)
    dock.resize(1300, 420)
    QApplication.processEvents()
    assert view.wide and view.settings.isVisible() and view.heatmap.isVisible() and not view.tabs.isVisible()
    dock.resize(700, 420)
    QApplication.processEvents()
    assert not view.wide and view.tabs.count() == 3


def test_compare_says_the_verdicts_in_the_history_words(window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    a = write_fake_run(gui_env, steps=4, seed=1, run_id="20261201-100301-aaaaaa")
    from ghostviewer.record import RunWriter

    writer = RunWriter.create(gui_env, {"prompt": "p", "seed": 1, "steps": 1}, {"device": "cpu"},
                              run_id="20261201-100302-bbbbbb")
    writer.set_verdict({"label": "ok", "scores": {}},
                       {"phase": "denoise", "step": 0, "module": "scheduler.step", "kind": "drift"})
    writer.finish("done", 0.1)
    b = writer.path
    view = _open(window, qtbot, (1280, 720), True, a, b)
    entry = window.state.history.entry(str(b))
    assert entry is not None and entry.state(None) == "ok · drift"
    assert "(ok · drift)" in view.title.text(), view.title.text()
