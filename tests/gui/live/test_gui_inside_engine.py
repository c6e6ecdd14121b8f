"""Inside the model on REAL demo runs: the block tree comes from the engine, a ticked bypass changes the run and
unticking it restores a bit-identical one; a ghost-lab fault is found by the first-anomaly jump and its
captured feature maps are shown. The live folder's window and engine (conftest.py); the tests run in file order."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from ghostviewer.analysis.compare import compare_runs
from ghostviewer.gui.widgets.block_tree import CAPTURE, NAME
from tests.gui.live_window import RUN_TIMEOUT_MS, needs_demo, run_job

pytestmark = needs_demo
BLOCK = "unet.mid_block.attentions.0"  # Transformer2DModel: shape-preserving
FAULTY = "unet.down_blocks.1.attentions.0"  # where short-prompt-attention strikes


@pytest.fixture(scope="module")
def win(live_window):  # noqa: ANN001, ANN201 - the folder's window and engine, handed to this module (conftest.py)
    return live_window


def _raise(win, widget) -> None:  # noqa: ANN001
    next(d for d in win.docks if d.widget() is widget).raise_()


def _run(qtbot, win, **prompt) -> object:  # noqa: ANN001
    job = run_job(qtbot, win, **prompt)
    assert job.status == "done", job.error
    return job


def test_blocks_arrive_and_bypass_is_a_clean_experiment(win, qtbot) -> None:  # noqa: ANN001
    blocks, tree = win.state.blocks, win.block_tree
    qtbot.waitUntil(lambda: BLOCK in tree.items, timeout=RUN_TIMEOUT_MS)
    assert blocks.block(BLOCK).bypassable and not blocks.block("unet.down_blocks.1").bypassable
    base = _run(qtbot, win, prompt="a red circle on a blue background", seed=5, seed_locked=True, steps=6, fault="")
    tree.items[BLOCK].setCheckState(NAME, Qt.CheckState.Checked)
    bypassed = _run(qtbot, win)
    assert bypassed.settings["bypass"] == [BLOCK]
    assert compare_runs(base.run_dir, bypassed.run_dir)["reproduced"] is False
    tree.items[BLOCK].setCheckState(NAME, Qt.CheckState.Unchecked)
    restored = _run(qtbot, win)
    assert restored.settings["bypass"] == []
    assert compare_runs(base.run_dir, restored.run_dir)["reproduced"] is True  # latents and image, bit for bit


def test_first_anomaly_jump_finds_the_fault(win, qtbot) -> None:  # noqa: ANN001
    state, tree = win.state, win.block_tree
    qtbot.waitUntil(lambda: FAULTY in tree.items, timeout=RUN_TIMEOUT_MS)  # the blocks arrive from the engine
    tree.items[FAULTY].setCheckState(CAPTURE, Qt.CheckState.Checked)
    tree.attention.setChecked(True)
    job = _run(qtbot, win, prompt="red circle", seed=0, steps=6, fault="short-prompt-attention")
    state.prompt.update(fault="")
    assert job.settings["capture"] == [FAULTY] and job.settings["capture_attention"] is True
    assert state.timeline.run_dir == job.run_dir
    state.timeline.set_step(state.timeline.count - 1)
    state.blocks.select("unet.conv_in")
    qtbot.waitUntil(lambda: not win.heatmap.loading, timeout=5000)  # the grid is read off the GUI thread
    win.heatmap.jump.click()
    assert state.blocks.selected.startswith(FAULTY)
    assert state.timeline.step_info().index == state.timeline.record.first_anomaly["step"]
    assert win.heatmap.cursor.isVisible() and win.heatmap.grid.bad.any()
    assert tree.items[FAULTY].text(0).startswith("⚠")
    _raise(win, win.feature_maps)  # docks tabbed behind the heat map draw only when raised
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    assert win.feature_maps.captured and win.feature_maps.grid is not None
    attention = win.attention
    _raise(win, attention)
    assert attention.maps is not None and attention.maps.shape[0] == len(attention.tokens) == 4
    assert "red" in attention.tokens[1] and "entropy" in attention.entropy.text()
    attention.whole_run.setChecked(True)
    qtbot.waitUntil(lambda: state.step_data.idle and state.step_data.attention_steps == state.timeline.count,
                    timeout=5000)
    assert attention.maps is not None and attention.maps.shape[0] == 4
    tree.items[FAULTY].setCheckState(CAPTURE, Qt.CheckState.Unchecked)
    tree.attention.setChecked(False)
