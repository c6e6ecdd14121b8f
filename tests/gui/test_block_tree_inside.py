"""The Blocks tree marks a first anomaly named inside a block — a prompt sentinel's attention at block depth, any
layer at leaf depth — on the deepest block that holds it, says which module in its tooltip and shows it; on a REAL
demo run whose mid-block cross-attention went to zero on a short prompt (the pixels of the marked row checked)."""

from __future__ import annotations

import copy

import pytest
from PySide6.QtGui import QColor

from ghostviewer.gui.models.block_model import BlockModel
from ghostviewer.gui.widgets.block_tree import ANOMALY_BACKGROUND, ANOMALY_MARK, NAME, BlockTree
from ghostviewer.record import RunRecord
from tests.gui.demo_runs import demo_blocks
from tests.gui.live_window import needs_demo

pytestmark = needs_demo
BLOCK = "unet.mid_block.attentions.0.transformer_blocks.0"  # the deepest block of the tree that holds it
ATTN2 = f"{BLOCK}.attn2"


@pytest.fixture(scope="module")
def collapsed_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    from ghostviewer import api
    from ghostviewer.engine.loading.pipelines import load_pipeline
    from tests.engine.test_probe_short_prompt import _zeroed_cross_attention

    pipe = copy.deepcopy(load_pipeline("demo", device="cpu").pipe)
    _zeroed_cross_attention(pipe, max_tokens=4)
    result = api.run(pipe, "cat", steps=3, runs_dir=tmp_path_factory.mktemp("inside"), device="cpu")
    assert result["first_anomaly"]["module"] == ATTN2
    return str(result["run_dir"])


def test_an_anomaly_inside_a_block_marks_the_block_that_holds_it(qtbot, collapsed_run: str) -> None:  # noqa: ANN001
    blocks = BlockModel()
    blocks.set_blocks(demo_blocks())
    tree = BlockTree(blocks)
    qtbot.addWidget(tree)
    tree.resize(520, 700)
    tree.show()
    assert ATTN2 not in tree.items and BLOCK in tree.items  # the attention is no block of the tree
    blocks.show_run(RunRecord(collapsed_run))
    item = tree.items[BLOCK]
    assert blocks.anomaly == ATTN2 and item.text(NAME).startswith(ANOMALY_MARK)
    assert f"first anomaly inside it: {ATTN2}" in item.toolTip(NAME)
    marked = [m for m, it in tree.items.items() if it.text(NAME).startswith(ANOMALY_MARK)]
    assert marked == [BLOCK]  # not its parents (unet.mid_block.attentions.0 holds it too, less closely)
    qtbot.wait(50)
    rect = tree.tree.visualRect(tree.tree.indexFromItem(item, NAME))  # the name's cell: the marked one
    assert rect.isValid() and tree.tree.viewport().rect().contains(rect.center())  # revealed: expanded, in view
    image = tree.tree.viewport().grab().toImage()
    want = QColor(ANOMALY_BACKGROUND)
    row = [image.pixelColor(x, rect.center().y()) for x in range(rect.left() + 2, rect.right(), 3)]
    assert sum(abs(c.red() - want.red()) + abs(c.green() - want.green()) + abs(c.blue() - want.blue()) < 30
               for c in row) > len(row) // 3, (want.name(), [c.name() for c in row[:8]])

    blocks.show_run(None)
    assert not item.text(NAME).startswith(ANOMALY_MARK) and "first anomaly inside" not in item.toolTip(NAME)


def test_a_text_streams_anomaly_marks_its_block(qtbot) -> None:  # noqa: ANN001
    """SD3's and Flux's blocks record their text stream as `path#text`: an anomaly there is the block's."""
    blocks = BlockModel()
    blocks.set_blocks(demo_blocks())
    tree = BlockTree(blocks)
    qtbot.addWidget(tree)
    blocks.set_anomaly(f"{BLOCK}#text")
    assert tree.items[BLOCK].text(NAME).startswith(ANOMALY_MARK)
    assert f"first anomaly inside it: {BLOCK}#text" in tree.items[BLOCK].toolTip(NAME)
