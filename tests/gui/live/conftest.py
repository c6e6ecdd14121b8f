"""One real window and engine process for the whole live folder (starting an engine costs ~9 CPU s: torch,
diffusers, the demo): every module gets it through `live_window`, handed over as if new (tests/gui/handover.py) —
its own runs folder, the default prompt, no ticks, no run shown, the engine up with the demo loaded. A test that
kills or restarts the engine leaves the fresh one to the modules after it. The folder's tests share one xdist
worker (the live-engine group, tests/conftest.py), so the window is built once per run of the suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gui.handover import hand_over
from tests.gui.live_window import RUN_TIMEOUT_MS, open_live_window


@pytest.fixture(scope="package")
def _package_window(qapp, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001 - pytest-qt's
    yield from open_live_window(tmp_path_factory, "live")


@pytest.fixture(scope="module")
def live_window(_package_window, request: pytest.FixtureRequest,  # noqa: ANN001
                tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The folder's window, handed over to this module (see the module doc); the module's tests run in file order."""
    from pytestqt.qtbot import QtBot

    name = request.module.__name__.rpartition(".")[2]
    hand_over(_package_window, QtBot(request), tmp_path_factory.mktemp(name) / "runs", RUN_TIMEOUT_MS)
    yield _package_window
