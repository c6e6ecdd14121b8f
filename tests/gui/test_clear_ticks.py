"""Clear ticks clears every tick that changes the next run, Capture attention included."""

from __future__ import annotations

from ghostviewer.gui.models.block_model import BlockModel


def test_clear_ticks_clears_capture_attention(qtbot) -> None:  # noqa: ANN001
    blocks = BlockModel()
    blocks.set_capture_attention(True)
    with qtbot.waitSignal(blocks.captureChanged, timeout=1000):
        blocks.clear_ticks()
    assert not blocks.capture_attention and not blocks.capture and not blocks.bypass
