"""GUI test fixtures: offscreen Qt, an isolated settings file and runs folder, windows with or without a real
engine process."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from ghostviewer.gui.app_settings import AppSettings  # noqa: E402


@pytest.fixture
def gui_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh runs folder (GHOSTVIEWER_RUNS_DIR) and settings file for one test; returns the runs folder."""
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setenv("GHOSTVIEWER_RUNS_DIR", str(runs))
    monkeypatch.setenv("GHOSTVIEWER_SETTINGS", str(tmp_path / "settings.ini"))
    return runs


@pytest.fixture
def window(qtbot, gui_env: Path) -> Iterator:  # noqa: ANN001 - pytest-qt's fixture
    """A main window with its engine NOT started (tests that need one start it themselves)."""
    from ghostviewer.gui.app import create_window

    win = create_window(AppSettings(), dialogs=False)
    qtbot.addWidget(win)
    yield win
    win.state.controller.shutdown()


@pytest.fixture
def fake_window(qtbot, gui_env: Path) -> Iterator:  # noqa: ANN001
    """A shown main window driving the torch-free stand-in engine (tests/gui/fake_engine.py), started."""
    from tests.gui.handover import fake_engine_window

    win = fake_engine_window(qtbot, AppSettings())
    qtbot.addWidget(win)
    yield win
    win.state.controller.shutdown()
