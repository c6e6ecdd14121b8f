"""Loading a pipeline is a transaction: a failed load puts back the pipeline that worked (runs go on with it), is
not in Recent, leaves the engine status "ready" rather than loading for ever, and says itself in one line with the
whole text behind Show details — a long error cannot push the panel's Device and Dtype out of the dock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from ghostviewer.gui.window_layout import default_dock_sizes
from tests.gui.fake_engine import LONG_LOAD_ERROR
from tests.gui.handover import hand_over, open_fake_window

WAIT_MS = 20000


def _loaded_as_new(window) -> tuple:  # noqa: ANN001
    """What these tests tell of a window: the pipeline it holds, its Recent list (model and combo) and its size."""
    pipeline, combo = window.state.pipeline, window.pipeline_panel.recent
    return (pipeline.key(), pipeline.status, list(pipeline.recent), [combo.itemData(i) for i in range(combo.count())],
            window.size().toTuple())


@pytest.fixture(scope="module")
def _module_window(qapp) -> Iterator[list]:  # noqa: ANN001 - pytest-qt's
    held: list = []  # [window, its generator, what it was when new] for the next test
    yield held
    for _window, opened, _new in held:
        next(opened, None)  # shuts it down


@pytest.fixture
def fake_window(_module_window: list, qtbot, gui_env: Path, request: pytest.FixtureRequest,  # noqa: ANN001
                tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A shown window on the stand-in engine with the demo loaded, as new: the test before's, handed over, when that
    test left its pipeline, Recent list and size as they were new (checked), else a new one."""
    from pytestqt.qtbot import QtBot

    if not _module_window:
        opened = open_fake_window(QtBot(request), tmp_path_factory, "load-transaction-window")
        window = next(opened)
        _module_window.append([window, opened, _loaded_as_new(window)])
    window, opened, new = _module_window[0]
    hand_over(window, qtbot, gui_env)
    assert _loaded_as_new(window) == new
    yield window
    hand_over(window, qtbot, gui_env)
    if _loaded_as_new(window) != new:
        _module_window.clear()
        next(opened, None)


def _fail_load(qtbot, win, source: str) -> None:  # noqa: ANN001
    state = win.state
    with qtbot.waitSignal(state.reporter.sigReported, timeout=WAIT_MS):
        state.pipeline.set_source(source)
    qtbot.waitUntil(lambda: state.pipeline.status == "loaded", timeout=WAIT_MS)


def test_a_failed_load_keeps_the_working_pipeline_and_leaves_nothing_behind(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    _fail_load(qtbot, fake_window, "broken")
    assert state.pipeline.key() == ("demo", "auto", "")  # back on the pipeline that worked
    assert "broken" not in state.pipeline.recent
    assert [fake_window.pipeline_panel.recent.itemData(i) for i in range(fake_window.pipeline_panel.recent.count())] \
        == ["demo"]
    qtbot.waitUntil(lambda: fake_window.engine_label.text() == "engine ready", timeout=WAIT_MS)
    job = state.controller.queue_run()  # a Run runs on the demo, never retries the bad folder
    assert job is not None and job.settings["source"] == "demo"
    qtbot.waitUntil(lambda: job.finished, timeout=WAIT_MS)
    assert job.status == "done"


def test_a_long_load_error_is_one_line_with_details(fake_window, qtbot) -> None:  # noqa: ANN001
    fake_window.resize(1280, 720)
    panel, state = fake_window.pipeline_panel, fake_window.state
    dock = next(d for d in fake_window.docks if d.windowTitle() == "Pipeline")
    default_dock_sizes(fake_window)  # the default layout at this size (the fixture showed it on a small screen)
    QApplication.processEvents()
    dock_width = panel.width()
    _fail_load(qtbot, fake_window, "broken-long")
    message = state.reporter.last_message or ""
    assert "\n" not in message and len(message) < 300 and "going back to the demo pipeline" in message
    QApplication.processEvents()
    assert panel.failure.isVisible() and panel.details.isVisible()
    assert panel.failure.height() < 2 * panel.fontMetrics().height()  # one line
    assert panel.width() <= dock_width + 1  # the text did not widen the dock
    for combo in (panel.device, panel.dtype):  # Device and Dtype stay in view, without scrolling
        corner = combo.mapTo(dock, combo.rect().bottomRight())
        assert combo.isVisible() and corner.x() <= dock.width() and corner.y() <= dock.height(), (corner, dock.size())
    box = panel.show_details()
    assert isinstance(box, QMessageBox) and box.detailedText() == LONG_LOAD_ERROR
    box.close()


def test_recent_holds_only_pipelines_that_loaded(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    with qtbot.waitSignal(state.pipeline.changed, timeout=WAIT_MS,
                          check_params_cb=lambda *a: state.pipeline.status == "loaded"):
        state.pipeline.set_source("other-pipeline")
    assert state.pipeline.recent[0] == "other-pipeline"
    _fail_load(qtbot, fake_window, "broken")
    assert state.pipeline.source == "other-pipeline" and state.pipeline.recent == ["other-pipeline", "demo"]
