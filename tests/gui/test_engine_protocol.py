"""The window refuses an engine process of another pipe protocol version (an install of mixed versions): one line on
screen and in the log, the engine stopped, and no command sent to it — against the stand-in engine process (the
real emitter and reader of engine/server.py, no torch: the real engine takes ~20 s to boot here) announcing
another version."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ghostviewer.engine.server import PROTOCOL_VERSION as ENGINE_PROTOCOL
from ghostviewer.gui import messages
from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.gui.link.engine_client import PROTOCOL_VERSION, EngineClient

OTHER = PROTOCOL_VERSION + 98


def test_the_window_speaks_the_engines_protocol_version() -> None:
    assert PROTOCOL_VERSION == ENGINE_PROTOCOL


def _refused_window(qtbot, arguments: list[str], timeout_ms: int) -> Iterator:  # noqa: ANN001
    from ghostviewer.gui.app import create_window

    win = create_window(AppSettings(), dialogs=False, engine=EngineClient(arguments=arguments))
    qtbot.addWidget(win)
    win.show()
    engine = win.state.engine
    job = win.state.controller.queue_run()  # queued before the engine is up: it must never be sent
    with qtbot.waitSignal(engine.sigRefused, timeout=timeout_ms) as refused:
        win.state.controller.start_engine()
    qtbot.waitUntil(lambda: engine.state == "refused" and not engine.running, timeout=10_000)  # it was stopped
    yield win, refused.args[0], job
    win.state.controller.shutdown()


def _check_refusal(win, line: str, job, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    state = win.state
    assert line == messages.ENGINE_PROTOCOL.format(theirs=OTHER, ours=PROTOCOL_VERSION) and "\n" not in line
    assert state.reporter.last_message == line  # on screen (the status bar; a dialog in the app)
    assert win.statusBar().currentMessage() == line
    assert win.engine_label.text().startswith("engine refused")
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("ghostviewer")]
    assert line in logged and any(f"announced protocol {OTHER}" in m for m in logged)
    assert state.pipeline.status != "loaded" and state.engine.info == {}
    assert state.queue.job(job.id).status == "queued"  # never sent: it waits for an engine it can talk to
    assert state.engine.send("blocks") == -1


@pytest.fixture
def commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    received = tmp_path / "commands.txt"
    monkeypatch.setenv("FAKE_ENGINE_PROTOCOL", str(OTHER))
    monkeypatch.setenv("FAKE_ENGINE_COMMANDS", str(received))
    return received


def test_an_engine_of_another_protocol_is_refused(qtbot, gui_env: Path, commands: Path,  # noqa: ANN001
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    for win, line, job in _refused_window(qtbot, ["-m", "tests.gui.fake_engine"], 20_000):
        _check_refusal(win, line, job, caplog)
        assert commands.read_text().split() == ["quit"]  # all the engine was ever told

