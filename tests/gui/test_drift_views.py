"""Silent ghosts in the GUI, on REAL demo runs at the defaults the shipped baseline was built for (made once,
tests/gui/demo_runs.py): the Blocks tree marks the blocks whose outputs drift, with how far
and where, and a healthy run marks none; the heat map's "z (baseline)" mode is hottest at the faulty block."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.widgets.block_tree import ANOMALY_MARK, DRIFT_MARK, NAME, BlockTree
from ghostviewer.record import RunRecord
from tests.gui.demo_runs import demo_blocks, demo_run
from tests.gui.live_window import needs_demo

pytestmark = needs_demo
PROMPT = "a yellow circle on a blue background"
FAULTY = "unet.down_blocks.1.resnets.0"  # where scaled-block scales the output ×1.5


@pytest.fixture(scope="module")
def drift_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    runs = tmp_path_factory.mktemp("drift-runs")  # the demo's 20 steps: what its baseline was built for
    return {"scaled": str(demo_run(tmp_path_factory, runs, PROMPT, faults=["scaled-block"], seed=21)),
            "healthy": str(demo_run(tmp_path_factory, runs, PROMPT, seed=21)), "blocks": demo_blocks()}


@pytest.mark.slow
def test_the_blocks_tree_marks_the_drifting_block(qtbot, drift_runs: dict) -> None:  # noqa: ANN001
    blocks = BlockModel()
    blocks.set_blocks(drift_runs["blocks"])
    tree = BlockTree(blocks)
    qtbot.addWidget(tree)
    record = RunRecord(drift_runs["scaled"])
    assert record.first_anomaly["kind"] == "drift" and record.first_anomaly["module"] == FAULTY
    with qtbot.waitSignal(blocks.driftChanged, timeout=5000):
        blocks.show_run(record)
    assert blocks.anomaly == FAULTY and FAULTY in blocks.drift
    item = tree.items[FAULTY]
    assert item.text(NAME).startswith(ANOMALY_MARK)  # the first anomaly keeps its own mark
    assert re.search(r"^drift: std z=\d+\.\d at step 0$", item.toolTip(NAME), re.M), item.toolTip(NAME)
    assert item.toolTip(NAME).startswith(FAULTY + "\n")
    for module, line in blocks.drift.items():  # any other drifting block: marked, and its tooltip says how
        if module != FAULTY and module in tree.items:
            assert tree.items[module].text(NAME).startswith(DRIFT_MARK) and line in tree.items[module].toolTip(NAME)
    unmarked = [m for m, it in tree.items.items() if m not in blocks.drift and blocks.block(m) is not None]
    assert unmarked and not any(tree.items[m].text(NAME).startswith((DRIFT_MARK, ANOMALY_MARK)) for m in unmarked)
    assert not any("drift:" in tree.items[m].toolTip(NAME) for m in unmarked)

    blocks.show_run(RunRecord(drift_runs["healthy"]))  # the same baseline, no false marks
    assert blocks.anomaly == "" and blocks.drift == {}
    assert not item.text(NAME).startswith((DRIFT_MARK, ANOMALY_MARK)) and "drift:" not in item.toolTip(NAME)
    blocks.show_run(None)
    assert blocks.drift == {}


def test_the_heat_map_draws_the_deviation_from_the_baseline(qtbot, drift_runs: dict) -> None:  # noqa: ANN001
    from ghostviewer.gui.models.timeline_model import TimelineModel
    from ghostviewer.gui.widgets.stats_heatmap import BASELINE_Z, StatsHeatmap

    timeline, blocks = TimelineModel(), BlockModel()
    heat = StatsHeatmap(timeline, blocks)
    qtbot.addWidget(heat)
    heat.resize(700, 600)
    heat.show()
    qtbot.waitExposed(heat)
    timeline.open_run(drift_runs["scaled"])
    qtbot.waitUntil(lambda: heat.grid is not None and not heat.loading, timeout=10_000)
    assert heat.stat.findText(BASELINE_Z) >= 0
    heat.stat.setCurrentText(BASELINE_Z)
    assert heat.loading  # the baseline z is read off the GUI thread
    qtbot.waitUntil(lambda: not heat.loading, timeout=10_000)
    grid, rgba = heat.grid, np.asarray(heat.image.image)
    assert rgba.shape[:2] == grid.bad.shape
    assert len(np.unique(rgba.reshape(-1, rgba.shape[-1]), axis=0)) > 8  # not one colour: the |z| vary
    lut = np.asarray(heat.lut)[:, :3].astype(int)
    heat_index = np.abs(rgba[..., None, :3].astype(int) - lut[None, None]).sum(-1).argmin(-1)  # cell → lut index
    row, col = grid.cell(FAULTY, 0)
    column = [heat_index[i, col] for i in range(len(grid.modules)) if (i, col) in grid.rows and i != row]
    assert heat_index[row, col] > max(column), (heat_index[row, col], max(column))
    assert heat.info.text().startswith(BASELINE_Z)
