"""A real window with a real engine process on the demo pipeline, shared by the modules that drive real runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ghostviewer.gui.app_settings import AppSettings

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo-pipeline" / "model_index.json"
needs_demo = pytest.mark.skipif(not DEMO.is_file(), reason="the demo pipeline is not built (resources/)")
RUN_TIMEOUT_MS = 90_000


def open_live_window(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator:
    """Yield a shown window whose engine starts after show(), as app.main does; shut both down after."""
    from ghostviewer.gui.app import create_window

    root = tmp_path_factory.mktemp(name)
    window = create_window(AppSettings(root / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(root / "runs")
    window.show()
    window.state.controller.start_engine()
    window.started_before_ready = window.state.engine.state == "starting"  # type: ignore[attr-defined]
    yield window
    window.state.controller.shutdown()
    window.close()


def run_job(qtbot, win, **prompt) -> object:  # noqa: ANN001 - pytest-qt's fixture, the window
    """Queue one run with these prompt settings and wait until it finishes."""
    win.state.prompt.update(**prompt)
    win.actions.run.trigger()
    job = win.state.queue.jobs()[-1]
    qtbot.waitUntil(lambda: job.finished, timeout=RUN_TIMEOUT_MS)
    return job
