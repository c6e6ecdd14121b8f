"""A main window (no engine) handed from test to test while it can be put back exactly as new; else a new one.

A module opts in with `windows = as_new_windows()` and `window = as_new_window()` at its top level: each test then gets
the window the test before used when, after that test, its prompt (as the panel shows it and as it would run), run
shown, queue, visibility and size are those of a new window again — checked before the test — and a new one otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.models.prompt_model import FIELDS, PromptModel
from tests.gui.handover import close_window


def as_new(window) -> tuple:  # noqa: ANN001 - the main window
    """What a test could tell of a window: its prompt as the panel shows it and as it would run, no run shown,
    nothing queued, its size and whether it is shown."""
    panel = window.prompt_panel
    texts = (panel.steps.lineEdit().text(), panel.guidance.lineEdit().text(), panel.seed.text(),
             panel.width_box.lineEdit().text(), panel.height_box.lineEdit().text(), panel.lock.isChecked(),
             panel.prompt.toPlainText())
    return (texts, window.state.prompt.take_settings("demo", "auto", ""), window.state.timeline.record is None,
            window.state.queue.jobs() == [], window.isVisible(), window.size().toTuple())




def as_new_windows() -> Callable:
    @pytest.fixture(scope="module")
    def _as_new_windows(qapp) -> Iterator[list]:  # noqa: ANN001 - pytest-qt's
        held: list = []  # [window, what it was when new] for the next test
        yield held
        for window, _new in held:
            close_window(window)

    return _as_new_windows


def as_new_window() -> Callable:
    @pytest.fixture
    def window(_as_new_windows: list, qtbot, gui_env: Path) -> Iterator:  # noqa: ANN001
        """A main window (no engine) as new, on the test's runs folder and settings file (see the module's doc)."""
        from ghostviewer.gui.app import create_window

        if not _as_new_windows:
            new = create_window(AppSettings(gui_env.parent / "settings.ini"), dialogs=False)
            _as_new_windows.append([new, as_new(new)])
        win, new_state = _as_new_windows[0]
        win.state.history.set_runs_dir(gui_env)
        assert as_new(win) == new_state
        yield win
        win.state.timeline.close_run()
        qtbot.waitUntil(lambda: win.state.step_data.idle, timeout=10_000)
        defaults = PromptModel()
        win.state.prompt.update(**{key: getattr(defaults, key) for key in FIELDS})
        defaults.deleteLater()
        win.state.reporter.messages.clear()
        win.state.reporter.notes.clear()
        win.statusBar().clearMessage()
        if as_new(win) != new_state:
            _as_new_windows.clear()
            close_window(win)

    return window
