"""The window driving REAL runs of the demo pipeline through the real engine process: queue, scrub, replay,
decode, cancel, reopen from the history (the engine killed mid-run: test_gui_kill.py). The live folder's window and
engine (conftest.py: torch loads once for the folder); the tests run in file order."""

from __future__ import annotations

import pytest

from tests.gui.live_window import RUN_TIMEOUT_MS, needs_demo, run_job

pytestmark = needs_demo
STEPS = 12  # the run the module scrubs, decodes (step 10), replays and reopens


@pytest.fixture(scope="module")
def win(live_window):  # noqa: ANN001, ANN201 - the folder's window and engine, handed to this module (conftest.py)
    return live_window


def _run(qtbot, win, **prompt) -> object:  # noqa: ANN001
    job = run_job(qtbot, win, **prompt)
    return job


def test_window_is_up_before_the_engine(win, qtbot) -> None:  # noqa: ANN001
    assert win.isVisible() and win.started_before_ready
    qtbot.waitUntil(lambda: win.state.pipeline.status == "loaded", timeout=RUN_TIMEOUT_MS)
    assert "StableDiffusionPipeline" in win.pipeline_panel.status.full_text


def test_queue_a_run_and_watch_it(win, qtbot) -> None:  # noqa: ANN001
    job = _run(qtbot, win, prompt="a red circle on a blue background", seed=7, seed_locked=True, steps=STEPS)
    state = win.state
    assert job.status == "done", job.error
    assert state.timeline.run_dir == job.run_dir and state.timeline.count == STEPS
    assert win.timeline_bar.badge.kind in ("ok", "bad") and win.timeline_bar.badge.text() == job.verdict
    qtbot.waitUntil(lambda: win.step_images.items["final image"].image is not None, timeout=5000)
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)  # the step is read off the GUI thread
    assert win.step_images.items["latents"].image is not None
    qtbot.waitUntil(lambda: any(e.path == job.run_dir for e in state.history.entries), timeout=5000)


def _settled(win, qtbot) -> None:  # noqa: ANN001
    """The finished run is the timeline's, its steps on the slider (they are read off the GUI thread)."""
    qtbot.waitUntil(lambda: win.state.timeline.count == STEPS and win.timeline_bar.slider.maximum() == STEPS - 1
                    and win.state.step_data.idle, timeout=RUN_TIMEOUT_MS)


def test_scrub_the_timeline(win, qtbot) -> None:  # noqa: ANN001
    state = win.state
    _settled(win, qtbot)
    win.timeline_bar.slider.setValue(4)
    assert state.timeline.step == 4 and f"step 4 of 0–{STEPS - 1}" in win.timeline_bar.step_label.full_text
    win.actions.step_forward.trigger()
    assert state.timeline.step == 5 and abs(win.stat_plot.line.value() - 5) < 1e-9
    assert win.stat_plot._curves, "the statistic plot shows the default modules"
    state.selection.set_stat("std")
    x, _ = next(iter(win.stat_plot._curves.values())).getData()
    assert len(x) == STEPS


def test_decode_a_step(win, qtbot) -> None:  # noqa: ANN001
    win.state.timeline.set_step(10)
    with qtbot.waitSignal(win.state.timeline.decodedChanged, timeout=RUN_TIMEOUT_MS):
        win.timeline_bar.decode.click()
    qtbot.waitUntil(lambda: win.state.step_data.idle, timeout=5000)
    image = win.step_images.items["VAE decode"].image
    assert image is not None and image.shape[:2] == (64, 64)


def test_replay_reproduces(win, qtbot) -> None:  # noqa: ANN001
    _settled(win, qtbot)
    with qtbot.waitSignal(win.state.controller.sigReplayChecked, timeout=RUN_TIMEOUT_MS) as checked:
        win.actions.replay.trigger()
    assert checked.args[0]["reproduced"] is True, checked.args[0]


def test_replay_catches_an_unseeded_ghost(win, qtbot) -> None:  # noqa: ANN001
    job = _run(qtbot, win, steps=6, fault="unseeded-noise")
    win.state.prompt.update(fault="")
    assert job.status == "done", job.error
    with qtbot.waitSignal(win.state.controller.sigReplayChecked, timeout=RUN_TIMEOUT_MS) as checked:
        win.timeline_bar.replay.click()
    result = checked.args[0]
    assert result["reproduced"] is False and result["first_divergence"]["phase"] == "denoise"
    assert "NOT reproduced" in win.timeline_bar.replay_result.words


def test_cancel_mid_run(win, qtbot) -> None:  # noqa: ANN001
    state = win.state
    state.prompt.update(steps=400)
    job = state.controller.queue_run()
    qtbot.waitUntil(lambda: job.step >= 3, timeout=RUN_TIMEOUT_MS)
    win.actions.cancel.trigger()
    qtbot.waitUntil(lambda: job.finished, timeout=RUN_TIMEOUT_MS)
    assert job.status == "cancelled" and job.step < 400
    assert win.timeline_bar.badge.kind == "cancelled"


def test_reopen_from_history(win) -> None:  # noqa: ANN001
    state = win.state
    state.timeline.close_run()
    state.history.refresh()
    first = next(e for e in reversed(state.history.entries) if e.seed == 7 and e.steps == STEPS)  # test_queue_a_run…
    win.history_panel.select(first.path)
    assert state.timeline.run_dir == first.path and state.timeline.count == STEPS
    assert win.timeline_bar.badge.kind in ("ok", "bad")
