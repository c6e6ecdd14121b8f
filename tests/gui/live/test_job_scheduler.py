"""The job scheduler ends every job, and the window shows how: an `error` event for the running job, a run
folder that never appears, the engine killed or restarted mid-run, the window closing with jobs queued; the
queue rows colour the verdict; cancelled and failed runs keep showing their first anomaly. The stand-in engine
(tests/gui/fake_engine.py) where a real one cannot produce the event on demand; the real engine at the end."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.gui import messages
from ghostviewer.gui.models.queue_model import QueueModel
from ghostviewer.gui.widgets.queue_panel import QueuePanel
from ghostviewer.gui.widgets.verdict_badge import COLOURS
from ghostviewer.record import RunWriter, StatRow, StepInfo
from tests.gui.handover import hand_over, open_fake_window
from tests.gui.live_window import RUN_TIMEOUT_MS, needs_demo

WAIT_MS = 20_000


@pytest.fixture(scope="module")
def _module_fake_window(qapp, request: pytest.FixtureRequest,  # noqa: ANN001 - pytest-qt's
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from pytestqt.qtbot import QtBot

    yield from open_fake_window(QtBot(request), tmp_path_factory, "job-scheduler-fake")


@pytest.fixture
def fake_window(_module_fake_window, qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    """One window and stand-in engine for the module's stand-in tests, handed to each as new (the engine restarted
    where the test before killed or stopped it)."""
    hand_over(_module_fake_window, qtbot, tmp_path / "runs", WAIT_MS)
    return _module_fake_window


def _ended(state) -> list[tuple[int, str]]:  # noqa: ANN001 - the window's AppState
    ended: list[tuple[int, str]] = []
    state.controller.scheduler.jobEnded.connect(lambda job_id, status: ended.append((job_id, status)))
    return ended


def _row(win, job_id: int) -> tuple[str, str]:  # noqa: ANN001 - the main window
    item = win.queue_panel._items[job_id]
    return item.text(1), item.foreground(1).color().name()


def _start(qtbot, state, **prompt) -> tuple[object, int]:  # noqa: ANN001
    """Queue a run and wait for the engine's 'started': the job and its run command's id."""
    state.prompt.update(**prompt)
    with qtbot.waitSignal(state.engine.sigStarted, timeout=WAIT_MS) as started:
        job = state.controller.queue_run()
    return job, started.args[0]["id"]


def _inject(state, **event) -> None:  # noqa: ANN001
    """An event line as the engine would write it, through the client's own dispatch."""
    state.engine._dispatch(json.dumps(event).encode("utf-8"))


def test_an_error_event_fails_the_running_job_and_the_next_one_runs(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    ended = _ended(state)
    job, ident = _start(qtbot, state, steps=6, seed=1, seed_locked=True)  # the follow-up waits for all 6
    state.prompt.update(steps=3)
    follow_up = state.controller.queue_run()
    _inject(state, event="error", cmd="run", id=ident, message="RuntimeError: CUDA error\n  (device-side assert)")
    assert job.status == "failed" and job.ended_by == "run" and "CUDA error" in job.error
    assert ended == [(job.id, "failed")]
    assert state.reporter.last_message == "The run failed: RuntimeError: CUDA error (device-side assert)"
    assert _row(fake_window, job.id) == ("failed", COLOURS["failed"][0])
    assert not state.timeline.live and state.history.live_run is None
    qtbot.waitUntil(lambda: follow_up.finished, timeout=WAIT_MS)  # the engine's late events for job are ignored
    assert follow_up.status == "done" and ended == [(job.id, "failed"), (follow_up.id, "done")]
    assert _row(fake_window, follow_up.id) == ("ok", COLOURS["ok"][0])


def test_a_run_folder_that_never_appears_fails_the_job(fake_window, qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    state = fake_window.state
    ended = _ended(state)
    job, ident = _start(qtbot, state, steps=6)  # the next test waits for the engine to finish them
    gone = tmp_path / "not-there"
    _inject(state, event="finished", id=ident, run_dir=str(gone), verdict={"label": "ok"})
    assert ended == [(job.id, "failed")] and job.run_dir is None
    assert job.error == messages.RUN_FOLDER_MISSING.format(path=gone)
    assert "cannot be found" in (state.reporter.last_message or "")
    assert not state.timeline.live
    assert state.controller.engine_state in ("ready", "running")  # free for the next job


def test_engine_killed_mid_run_ends_the_job(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    ended = _ended(state)
    job, _ = _start(qtbot, state, steps=300)
    state.prompt.update(steps=3)  # the job that waits: short, it only has to run once the engine is back
    waiting = state.controller.queue_run()
    qtbot.waitUntil(lambda: job.step >= 2, timeout=WAIT_MS)
    with qtbot.waitSignal(state.engine.sigEngineDied, timeout=WAIT_MS):
        os.kill(state.engine.pid, signal.SIGKILL)
    assert ended == [(job.id, "failed")] and job.error == "the engine process killed by SIGKILL"
    assert fake_window.isVisible() and waiting.status == "queued"
    assert _row(fake_window, job.id) == ("engine died", COLOURS["incomplete"][0])
    assert "killed by SIGKILL" in fake_window.queue_panel._items[job.id].toolTip(1)
    assert not state.timeline.live and fake_window.timeline_bar.badge.kind == "incomplete"
    entry = state.history.entry(job.run_dir)  # re-read when the job ended, no refresh asked
    assert entry is not None and entry.state(state.history.live_run) == "incomplete"
    with qtbot.waitSignal(state.engine.sigReady, timeout=WAIT_MS):
        fake_window.actions.restart_engine.trigger()
    qtbot.waitUntil(lambda: waiting.finished, timeout=WAIT_MS)
    assert waiting.status == "done" and waiting.step == 3 and len(ended) == 2


def test_restart_mid_run_ends_the_job(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    ended = _ended(state)
    job, _ = _start(qtbot, state, steps=300)
    qtbot.waitUntil(lambda: job.step >= 2 and state.timeline.live, timeout=WAIT_MS)
    with qtbot.waitSignal(state.engine.sigReady, timeout=WAIT_MS):
        fake_window.actions.restart_engine.trigger()
        assert ended == [(job.id, "cancelled")]  # at once, not when the new engine is up
    assert job.error == messages.JOB_ENGINE_RESTARTED
    assert not state.timeline.live and fake_window.timeline_bar.badge.kind in ("cancelled", "incomplete")
    assert state.history.live_run is None
    state.prompt.update(steps=3)
    follow_up = state.controller.queue_run()
    qtbot.waitUntil(lambda: follow_up.finished, timeout=WAIT_MS)
    assert follow_up.status == "done" and ended[-1] == (follow_up.id, "done")


def test_engine_stopped_behind_the_schedulers_back_ends_the_job(fake_window, qtbot) -> None:  # noqa: ANN001
    state = fake_window.state
    ended = _ended(state)
    job, _ = _start(qtbot, state, steps=300)
    qtbot.waitUntil(lambda: job.step >= 2, timeout=WAIT_MS)
    # Held still first, so it cannot answer 'quit' with 'cancelled' in the moment before the kill lands (on a
    # loaded machine it sometimes did); then killed at once: no 'cancelled' on its way out, no sigEngineDied.
    os.kill(state.engine.pid, signal.SIGSTOP)
    with qtbot.waitSignal(state.controller.scheduler.jobEnded, timeout=WAIT_MS):
        state.engine.stop(timeout_ms=0)
    assert ended == [(job.id, "failed")] and job.error == messages.JOB_ENGINE_STOPPED
    assert state.controller.engine_state == "stopped" and not state.timeline.live


def test_closing_ends_the_queued_jobs(window) -> None:  # noqa: ANN001
    state = window.state
    ended = _ended(state)
    jobs = state.controller.queue_many([{"prompt": "a", "seed": 1}, {"prompt": "b", "seed": 2}])  # no engine
    state.controller.cancel(jobs[0].id)
    state.controller.shutdown()
    assert ended == [(jobs[0].id, "cancelled"), (jobs[1].id, "cancelled")]
    assert jobs[0].ended_by == "user" and jobs[1].ended_by == "shutdown"
    state.controller.shutdown()  # twice: nothing more ends
    assert len(ended) == 2


def test_queue_rows_colour_the_verdict(qtbot) -> None:  # noqa: ANN001
    model = QueueModel()
    panel = QueuePanel(model)
    qtbot.addWidget(panel)
    jobs = [model.add({"prompt": f"p{i}", "seed": i, "steps": 4}) for i in range(6)]
    anomaly = {"kind": "nan", "phase": "denoise", "step": 2, "module": "unet.mid_block"}
    model.update(jobs[0].id, status="done", verdict="ok", step=4)
    model.update(jobs[1].id, status="done", verdict="nan", step=4, first_anomaly=anomaly)
    model.update(jobs[2].id, status="failed", ended_by="run", error="boom")
    model.update(jobs[3].id, status="cancelled", ended_by="user", first_anomaly=anomaly)
    model.update(jobs[4].id, status="running", step=2)
    rows = [(panel._items[j.id].text(1), panel._items[j.id].foreground(1).color().name()) for j in jobs]
    assert rows == [("ok", COLOURS["ok"][0]), ("nan", COLOURS["bad"][0]), ("failed", COLOURS["failed"][0]),
                    ("cancelled", COLOURS["cancelled"][0]), ("running", COLOURS["running"][0]),
                    ("queued", COLOURS["none"][0])]
    assert "first anomaly: nan at denoise step 2 in unet.mid_block" in panel._items[jobs[3].id].toolTip(1)
    assert "failed: boom" in panel._items[jobs[2].id].toolTip(0)
    assert not panel._cancels[jobs[2].id].isEnabled() and panel._cancels[jobs[5].id].isEnabled()


def _failed_run_with_anomaly(runs: Path) -> Path:
    """A run that failed at step 2 after a NaN at step 1, recorded as the runner records it now."""
    writer = RunWriter.create(runs, {"prompt": "a red circle", "seed": 3, "steps": 6}, {"device": "cpu"},
                              run_id="failed-with-nan")
    latents = np.ones((4, 8, 8), np.float32)
    for step in range(2):
        nan = 4 if step >= 1 else 0
        writer.add_stats([StatRow("denoise", step, "unet.mid_block", 0, step, (1, 4, 8, 8), "float32", -1.0, 1.0,
                                  0.0, 0.5, 1.0, nan, 0)])
        writer.add_step(StepInfo(step, 999.0 - step, None, 0.01, 1, 1, None, "rss"),
                        {"latents": latents, "x0": latents}, {"preview": np.zeros((8, 8, 3), np.uint8)})
    writer.set_verdict(None, {"kind": "nan", "phase": "denoise", "step": 1, "module": "unet.mid_block"})
    writer.finish("failed", 0.2, error="RuntimeError: boom")
    return writer.path


def test_a_failed_run_keeps_showing_its_first_anomaly(window, gui_env: Path) -> None:  # noqa: ANN001
    state = window.state
    run = _failed_run_with_anomaly(gui_env)
    assert state.opener.open_run(run)
    assert window.timeline_bar.badge.kind == "failed" and state.blocks.anomaly == "unet.mid_block"
    state.timeline.set_step(0)
    assert state.controller.jump_to_first_anomaly() and state.timeline.step == 1


# -- the real engine ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live(live_window):  # noqa: ANN001, ANN201 - the folder's window and engine, handed to this module (conftest.py)
    return live_window


@needs_demo
def test_real_failed_run_is_reported_and_the_next_one_runs(live, qtbot) -> None:  # noqa: ANN001
    state = live.state
    qtbot.waitUntil(lambda: state.pipeline.status == "loaded", timeout=RUN_TIMEOUT_MS)
    ended = _ended(state)
    base = state.prompt.take_settings(*state.pipeline.key())
    bad, good = state.controller.queue_many([base | {"width": 12, "steps": 2}, base | {"steps": 2}])
    qtbot.waitUntil(lambda: good.finished, timeout=RUN_TIMEOUT_MS)
    assert bad.status == "failed" and "multiple of 8" in (bad.error or ""), bad.error
    assert ended == [(bad.id, "failed"), (good.id, "done")], good.error
    assert any("The run failed:" in m and "multiple of 8" in m for m in state.reporter.messages)
    assert _row(live, bad.id)[0] == "failed"


@needs_demo
def test_real_cancelled_run_keeps_its_first_anomaly(live, qtbot) -> None:  # noqa: ANN001
    state = live.state
    ended = _ended(state)
    job, _ = _start(qtbot, state, steps=400, seed=7, seed_locked=True, fault="nan-latents")
    state.prompt.update(fault="")
    qtbot.waitUntil(lambda: job.step >= 3, timeout=RUN_TIMEOUT_MS)
    live.actions.cancel.trigger()
    qtbot.waitUntil(lambda: job.finished, timeout=RUN_TIMEOUT_MS)
    assert ended == [(job.id, "cancelled")] and job.first_anomaly, job.error
    assert live.timeline_bar.badge.kind == "cancelled" and not state.timeline.live
    assert state.blocks.anomaly == job.first_anomaly["module"]
    assert state.controller.jump_to_first_anomaly()


@needs_demo
def test_real_restart_mid_run_ends_the_job(live, qtbot) -> None:  # noqa: ANN001
    state = live.state
    ended = _ended(state)
    job, _ = _start(qtbot, state, steps=400)
    qtbot.waitUntil(lambda: job.step >= 3, timeout=RUN_TIMEOUT_MS)
    live.actions.restart_engine.trigger()
    assert ended == [(job.id, "cancelled")] and job.error == messages.JOB_ENGINE_RESTARTED
    assert not state.timeline.live and live.timeline_bar.badge.kind in ("cancelled", "incomplete")
    state.prompt.update(steps=3)
    after = state.controller.queue_run()  # waits for the fresh engine
    qtbot.waitUntil(lambda: after.finished, timeout=RUN_TIMEOUT_MS)
    assert after.status == "done", after.error
