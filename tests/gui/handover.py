"""A window shared by several tests, handed to each as if new (live/conftest.py, the fake-engine modules)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ghostviewer.gui.models.prompt_model import FIELDS, PromptModel

READY_MS = 90_000


def hand_over(window, qtbot, runs_dir: Path, timeout_ms: int = READY_MS) -> None:  # noqa: ANN001 - main window, qtbot
    """The window as a test that opened it would find it: nothing queued or shown, nothing said yet, defaults, a
    fresh runs folder, and the engine back (restarted when a test before left it stopped) with the pipeline loaded."""
    state = window.state
    for job in state.queue.jobs():
        if not job.finished:
            state.controller.cancel(job.id)
    if state.engine.state == "stopped":
        state.controller.restart_engine()
    qtbot.waitUntil(lambda: state.controller.engine_state == "ready" and state.pipeline.status == "loaded"
                    and all(job.finished for job in state.queue.jobs()), timeout=timeout_ms)
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


def close_window(window) -> None:  # noqa: ANN001 - the main window
    """Shut a shared window down as the app does at exit: its reader threads, its engine, the window."""
    window.state.step_data.shutdown()
    window.state.controller.shutdown()
    window.close()
    window.deleteLater()


def module_window(tmp_path_factory, name: str) -> Iterator:  # noqa: ANN001 - pytest's factory
    """Yield a main window with no engine (nothing runs) on a runs folder of its own, for a module's tests to
    share; closed after."""
    from ghostviewer.gui.app import create_window
    from ghostviewer.gui.app_settings import AppSettings

    root = tmp_path_factory.mktemp(name)
    window = create_window(AppSettings(root / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(root / "runs")
    yield window
    close_window(window)


def fake_engine_window(qtbot, settings, runs_dir: Path | None = None):  # noqa: ANN001, ANN201 - qtbot, AppSettings
    """A shown main window driving the torch-free stand-in engine (tests/gui/fake_engine.py), started and loaded
    (on `runs_dir` from the start, when given)."""
    from ghostviewer.gui.app import create_window
    from ghostviewer.gui.link.engine_client import EngineClient

    window = create_window(settings, dialogs=False, engine=EngineClient(arguments=["-m", "tests.gui.fake_engine"]))
    if runs_dir is not None:
        window.state.history.set_runs_dir(runs_dir)
    window.show()
    with qtbot.waitSignal(window.state.pipeline.changed, timeout=20000,
                          check_params_cb=lambda *a: window.state.pipeline.status == "loaded"):
        window.state.controller.start_engine()
    return window


def open_fake_window(qtbot, tmp_path_factory, name: str) -> Iterator:  # noqa: ANN001 - qtbot, pytest's factory
    """Yield a shown window driving the torch-free stand-in engine (tests/gui/fake_engine.py), started and loaded,
    for a module's tests to share (each through hand_over); shut down after."""
    from ghostviewer.gui.app_settings import AppSettings

    root = tmp_path_factory.mktemp(name)
    window = fake_engine_window(qtbot, AppSettings(root / "settings.ini"), root / "runs")
    yield window
    window.state.controller.shutdown()
    window.close()
