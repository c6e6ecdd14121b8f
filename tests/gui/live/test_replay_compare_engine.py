"""Replay ×N from the window with the REAL engine process: "replay k/N" while it goes, "reproduced k/N" at the
end; a ghost that does not reproduce (unseeded-noise) opens the comparison at the first diverging module."""

from __future__ import annotations

import pytest

from tests.gui.live_window import RUN_TIMEOUT_MS, needs_demo, run_job

pytestmark = needs_demo
PROMPT = "a red circle on a blue background"


@pytest.fixture(scope="module")
def win(live_window):  # noqa: ANN001, ANN201 - the folder's window and engine, handed to this module (conftest.py)
    return live_window


def test_replay_twice_reports_k_of_n(win, qtbot) -> None:  # noqa: ANN001
    state, c = win.state, win.state.controller
    original = run_job(qtbot, win, prompt=PROMPT, seed=3, seed_locked=True, steps=3, fault="")
    assert original.status == "done", original.error
    said: list[str] = []
    c.sigMessage.connect(said.append)
    with qtbot.waitSignal(c.sigReplayChecked, timeout=3 * RUN_TIMEOUT_MS) as checked:
        first = c.replay(times=2)
    result = checked.args[0]
    assert first is not None and (result["times"], result["reproduced_count"], result["reproduced"]) == (2, 2, True)
    assert "Replay 1/2 of seed 3…" in said and "Replay 2/2 of seed 3…" in said
    replays = [j for j in state.queue.jobs() if j.replay_of == original.run_dir]
    assert [j.extra.get("label") for j in replays] == ["replay 1/2", "replay 2/2"]
    assert win.statusBar().currentMessage() == "Replays of seed 3: reproduced 2/2."
    assert state.controller.compare.comparison is None  # reproduced: nothing to compare


def test_a_divergence_opens_the_comparison_there(win, qtbot) -> None:  # noqa: ANN001
    state, c = win.state, win.state.controller
    original = run_job(qtbot, win, prompt=PROMPT, seed=4, seed_locked=True, steps=3, fault="unseeded-noise")
    state.prompt.update(fault="")
    assert original.status == "done", original.error
    with qtbot.waitSignal(c.compare.comparisonChanged, timeout=3 * RUN_TIMEOUT_MS):
        c.replay(times=2)
    comparison, where = c.compare.comparison, c.compare.comparison.first_divergence
    assert comparison.run_a == original.run_dir and comparison.run_b != original.run_dir
    assert where["module"] == "unet.up_blocks.1.attentions.0" and where["phase"] == "denoise"
    assert state.blocks.selected == where["module"] and state.timeline.step == where["step"]
    assert c.compare.timeline_b.step == where["step"] and win.compare_view.isVisible()
    assert "reproduced 0/2" in win.statusBar().currentMessage() and "NOT" in win.timeline_bar.replay_result.words
