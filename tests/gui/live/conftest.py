"""One real window and engine process for the whole live folder (starting an engine costs ~9 CPU s: torch,
diffusers, the demo): every module gets it through `live_window`, handed over as if new — its own runs folder,
the default prompt, no ticks, no run shown, the engine up with the demo loaded. A test that kills or restarts the
engine leaves the fresh one to the modules after it. The folder's tests share one xdist worker (the live-engine
group, tests/conftest.py), so the window is built once per run of the suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ghostviewer.gui.models.prompt_model import FIELDS, PromptModel
from tests.gui.live_window import RUN_TIMEOUT_MS, open_live_window


@pytest.fixture(scope="package")
def _package_window(qapp, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001 - pytest-qt's
    yield from open_live_window(tmp_path_factory, "live")


def hand_over(window, qtbot, runs_dir: Path) -> None:  # noqa: ANN001 - the main window, pytest-qt's fixture
    """The window as a module that opened it would find it: nothing queued or shown, nothing said yet, defaults, a
    fresh runs folder, and the engine back (restarted when a test before left it dead) with the pipeline loaded."""
    state = window.state
    for job in state.queue.jobs():
        if not job.finished:
            state.controller.cancel(job.id)
    if state.engine.state == "stopped":
        state.controller.restart_engine()
    qtbot.waitUntil(lambda: state.controller.engine_state == "ready" and state.pipeline.status == "loaded"
                    and all(job.finished for job in state.queue.jobs()), timeout=RUN_TIMEOUT_MS)
    defaults = PromptModel()
    state.prompt.update(**{key: getattr(defaults, key) for key in FIELDS})
    defaults.deleteLater()
    state.blocks.clear_ticks()
    compare = state.controller.compare  # no comparison open (the model has no close: a user opens another one)
    if compare.comparison is not None or compare.pending is not None:
        compare.pending, compare.comparison, compare.error = None, None, ""
        compare.timeline_b.close_run()
        compare.comparisonChanged.emit()
    state.timeline.close_run()
    state.history.set_runs_dir(runs_dir)
    state.reporter.messages.clear()
    state.reporter.notes.clear()
    window.statusBar().clearMessage()


@pytest.fixture(scope="module")
def live_window(_package_window, request: pytest.FixtureRequest,  # noqa: ANN001
                tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The folder's window, handed over to this module (see the module doc); the module's tests run in file order."""
    from pytestqt.qtbot import QtBot

    qtbot = QtBot(request)
    name = request.module.__name__.rpartition(".")[2]
    hand_over(_package_window, qtbot, tmp_path_factory.mktemp(name) / "runs")
    yield _package_window
