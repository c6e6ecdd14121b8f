"""Inside the model, without an engine: the block tree's ticks become run settings, the heat map's click and
the first-anomaly jump move the step and the module in focus, the feature maps follow (synthetic runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from ghostviewer.analysis.stat_grid import array_summary, display_values, grid_values, stat_grid
from ghostviewer.gui.data.attention_data import aggregate
from ghostviewer.gui.data.feature_maps import channel_grid, channel_stats
from ghostviewer.gui.models.block_model import BlockModel, parse_range
from ghostviewer.gui.widgets.block_tree import CAPTURE, NAME, STEPS
from tests.gui.fake_runs import MODULES, write_fake_run

BLOCKS = [
    {"module": "unet.down_blocks.0", "kind": "DownBlock2D", "bypassable": False},
    {"module": "unet.down_blocks.0.resnets.0", "kind": "ResnetBlock2D", "bypassable": True},
    {"module": "unet.mid_block", "kind": "UNetMidBlock2DCrossAttn", "bypassable": True},
    {"module": "unet.mid_block.attentions.0", "kind": "Transformer2DModel", "bypassable": True},
    {"module": "vae.decoder", "kind": "Decoder", "bypassable": False},
]


def test_block_model_ticks_become_run_settings() -> None:
    model = BlockModel()
    model.set_blocks(BLOCKS)
    assert model.set_bypass("unet.down_blocks.0", True) is False  # not bypassable: refused
    model.set_bypass("unet.mid_block.attentions.0", True)
    model.set_bypass("unet.down_blocks.0.resnets.0", True, parse_range("0:10"))
    model.set_capture("unet.down_blocks.0", True)
    assert model.run_fields() == {"bypass": ["unet.down_blocks.0.resnets.0@0:10", "unet.mid_block.attentions.0"],
                                  "capture": ["unet.down_blocks.0"], "capture_attention": False}
    model.set_blocks(BLOCKS[:2])  # another pipeline: ticks on blocks it lacks are dropped
    assert model.run_fields()["bypass"] == ["unet.down_blocks.0.resnets.0@0:10"]
    with pytest.raises(ValueError):
        parse_range("9:3")
    assert parse_range("all") == (None, None) and parse_range(":8") == (None, 8)


def test_block_tree_binds_to_the_model(window) -> None:  # noqa: ANN001
    state, tree = window.state, window.block_tree
    state.blocks.set_blocks(BLOCKS)
    item = tree.items["unet.mid_block.attentions.0"]
    assert item.parent() is tree.items["unet.mid_block"]  # nested by path
    assert item.parent().parent() is tree.items["unet"]  # under its component
    item.setCheckState(NAME, Qt.CheckState.Checked)
    item.setCheckState(CAPTURE, Qt.CheckState.Checked)
    assert state.blocks.bypass == {"unet.mid_block.attentions.0": (None, None)}
    assert state.blocks.capture == {"unet.mid_block.attentions.0"}
    item.setText(STEPS, "2:5")
    assert state.blocks.bypass["unet.mid_block.attentions.0"] == (2, 5)
    fixed = tree.items["vae.decoder"]
    assert fixed.data(NAME, Qt.ItemDataRole.CheckStateRole) is None and "cannot be bypassed" in fixed.toolTip(NAME)
    settings = state.controller.queue_run().settings  # no engine: it waits in the queue
    assert settings["bypass"] == ["unet.mid_block.attentions.0@2:5"]
    assert settings["capture"] == ["unet.mid_block.attentions.0"]
    tree.clear.click()
    assert state.controller.queue_run().settings["bypass"] == []


def test_heatmap_click_and_first_anomaly_jump(window, gui_env: Path, qtbot) -> None:  # noqa: ANN001
    state, heatmap = window.state, window.heatmap
    state.blocks.set_blocks([{"module": m, "kind": "X", "bypassable": True} for m in MODULES])
    run = write_fake_run(gui_env, steps=6, nan_at=3, capture=("unet.mid_block",))
    state.timeline.open_run(run)
    assert state.blocks.anomaly == "unet.mid_block" and "⚠" in window.block_tree.items["unet.mid_block"].text(0)
    qtbot.waitUntil(lambda: not heatmap.loading, timeout=5000)  # the grid is read off the GUI thread
    grid = heatmap.grid
    assert grid is not None and grid.modules == MODULES and grid.steps == list(range(6))
    assert grid.bad[MODULES.index("unet.mid_block"), 3:].all() and not grid.bad[:, :3].any()
    window.resize(1400, 900)
    window.show()
    heatmap.plot.getViewBox().updateMatrix()
    cell = heatmap.cell_at(heatmap.image.mapToScene(QPointF(2.5, 1.5)))  # the middle of pixel (col 2, row 1)
    assert cell == (1, 2)
    heatmap.select_cell(*cell)
    assert state.timeline.step == 2 and state.blocks.selected == MODULES[1]
    assert window.block_tree.tree.currentItem() is window.block_tree.items[MODULES[1]]
    next(d for d in window.docks if d.widget() is window.feature_maps).raise_()  # it shares a tab with the map
    qtbot.waitUntil(lambda: state.step_data.idle and window.feature_maps.step_data.step == 2, timeout=5000)
    assert not window.feature_maps.captured and "not captured" in window.feature_maps.message.text()
    heatmap.stat.setCurrentText("nan_count")
    window.actions.jump_anomaly.trigger()
    assert state.timeline.step == 3 and state.blocks.selected == "unet.mid_block"
    qtbot.waitUntil(lambda: state.step_data.idle, timeout=5000)
    view = window.feature_maps
    assert view.captured and view.grid is not None and view.grid.count == 8
    assert "channel 0: min" in view.channel_tooltip(0)


def test_heatmap_and_feature_map_numbers() -> None:
    from ghostviewer.record import StatRow

    rows = [StatRow("denoise", s, m, 0, 0, (1, 2), "float32", -1.0, 1.0, 0.0, 0.5, 10.0 ** s, s, 0)
            for s in range(3) for m in ("a", "b")]
    grid = stat_grid(rows)
    assert grid.modules == ["a", "b"] and grid.bad.tolist() == [[False, True, True]] * 2
    assert np.allclose(display_values(grid_values(grid, "absmax"), "absmax", log=True), [[0, 1, 2]] * 2)
    fm = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)
    fm[1, 0, 0] = np.nan
    lut = np.zeros((256, 3), np.uint8)
    shared, per = channel_grid(fm, lut, False), channel_grid(fm, lut, True)
    assert shared.image.shape == per.image.shape == (3, 7, 4) and shared.channel_at(4.5, 1) == 1
    assert shared.channel_at(3.2, 1) is None  # the gap
    assert channel_stats(fm)["nan"].tolist() == [0, 1]
    assert array_summary(fm).startswith("tensor[2,3,3] float32 x∈[0, 17]") and "NaN!" in array_summary(fm)
    maps = aggregate([np.ones((32, 4, 4), np.float16), np.zeros((32, 8, 8), np.float16)], tokens=3)
    assert maps is not None and maps.shape == (3, 8, 8) and np.allclose(maps, 0.5)
