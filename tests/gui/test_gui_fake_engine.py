"""The window's run flow against a stand-in engine process (real protocol and records, no torch): queue,
cancel, replay, engine death and restart. The same flows with the real demo pipeline: live/test_gui_engine.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gui.handover import hand_over, open_fake_window


@pytest.fixture(scope="module")
def _module_window(qapp, request: pytest.FixtureRequest,  # noqa: ANN001 - pytest-qt's
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from pytestqt.qtbot import QtBot

    yield from open_fake_window(QtBot(request), tmp_path_factory, "fake-engine-window")


@pytest.fixture
def fake_window(_module_window, qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    """One window and stand-in engine for the module (a window costs ~0.5 CPU s), handed to each test as new."""
    hand_over(_module_window, qtbot, tmp_path / "runs")
    return _module_window


def _finish(qtbot, win, job_id: int, timeout: int = 20000) -> None:  # noqa: ANN001
    qtbot.waitUntil(lambda: win.state.queue.job(job_id).finished, timeout=timeout)


def test_queue_runs_and_follows_them(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=6, seed=11, seed_locked=True)
    fake_window.actions.run.trigger()
    job = state.queue.jobs()[-1]
    _finish(qtbot, fake_window, job.id)
    assert job.status == "done" and job.step == 6
    assert state.timeline.run_dir == job.run_dir and state.timeline.count == 6
    assert fake_window.timeline_bar.badge.kind == "ok"
    qtbot.waitUntil(lambda: "first anomaly: none" in fake_window.log_panel.toPlainText(), timeout=5000)
    assert f"run {Path(job.run_dir).name} verdict: ok" in fake_window.log_panel.toPlainText()
    qtbot.waitUntil(lambda: any(e.path == job.run_dir for e in state.history.entries), timeout=5000)


def test_cancel_mid_run(fake_window, qtbot, monkeypatch) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=200)
    job = state.controller.queue_run()
    qtbot.waitUntil(lambda: job.step >= 3, timeout=10000)
    fake_window.actions.cancel.trigger()
    _finish(qtbot, fake_window, job.id)
    assert job.status == "cancelled" and 3 <= job.step < 200
    assert fake_window.timeline_bar.badge.kind == "cancelled"


def test_replay_reproduces(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=4, seed=5)
    original = state.controller.queue_run()
    _finish(qtbot, fake_window, original.id)
    with qtbot.waitSignal(state.controller.sigReplayChecked, timeout=20000) as blocker:
        fake_window.actions.replay.trigger()
    assert blocker.args[0]["reproduced"] is True
    assert "reproduced" in fake_window.timeline_bar.replay_result.words


def test_engine_death_and_restart(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=300)
    job = state.controller.queue_run()
    qtbot.waitUntil(lambda: job.step >= 2, timeout=10000)
    with qtbot.waitSignal(state.engine.sigEngineDied, timeout=10000) as died:
        os.kill(state.engine.pid, signal.SIGKILL)
    assert "SIGKILL" in died.args[0]
    assert job.status == "failed" and fake_window.isVisible()
    assert "engine process stopped" in state.reporter.last_message
    assert fake_window.timeline_bar.badge.kind == "incomplete" and state.timeline.count >= 2
    assert Path(job.run_dir).is_dir()
    state.prompt.update(steps=3)
    follow_up = state.controller.queue_run()  # waits for the restart
    with qtbot.waitSignal(state.engine.sigReady, timeout=20000):
        fake_window.actions.restart_engine.trigger()
    _finish(qtbot, fake_window, follow_up.id)
    assert follow_up.status == "done"


def test_load_failure_is_reported(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    with qtbot.waitSignal(state.reporter.sigReported, timeout=10000):
        state.pipeline.set_source("broken")
    assert "Could not load the pipeline broken" in state.reporter.last_message
    qtbot.waitUntil(lambda: state.pipeline.status == "loaded", timeout=10000)  # the demo, loaded again
    assert state.pipeline.source == "demo" and "broken" not in state.pipeline.recent


def test_decode_step_shows_the_decoded_image(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    state.prompt.update(steps=4)
    job = state.controller.queue_run()
    _finish(qtbot, fake_window, job.id)
    state.timeline.set_step(1)
    qtbot.waitUntil(lambda: state.step_data.idle and fake_window.step_images.shown.step == 1, timeout=5000)
    assert fake_window.step_images.items["VAE decode"].image is None
    with qtbot.waitSignal(state.timeline.decodedChanged, timeout=10000):
        fake_window.timeline_bar.decode.click()
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)  # the step is read again, off the GUI thread
    assert fake_window.step_images.items["VAE decode"].image is not None
