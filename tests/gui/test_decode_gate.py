"""Decode is offered only on a step that kept its latents: a sweep's runs keep previews only, so on their steps the
button and Run ▸ Decode are off and say why (they used to stay on and fail with a dialog)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ghostviewer.record import RunWriter, StatRow, StepInfo
from tests.gui.fake_runs import write_fake_run


def _previews_only(folder: Path) -> Path:
    writer = RunWriter.create(folder, {"prompt": "p", "seed": 1, "steps": 2}, {"device": "cpu"})
    for step in range(2):
        writer.add_stats([StatRow("denoise", step, "unet.mid_block", 0, step, (1, 4, 8, 8), "float32",
                                  -1.0, 1.0, 0.0, 0.3, 1.0, 0, 0)])
        preview = np.zeros((8, 8, 3), np.uint8)
        writer.add_step(StepInfo(step, 999.0 - step, None, 0.01, 1, 1, None, "rss"), {}, {"preview": preview})
    writer.finish("done", 0.1)
    return writer.path


def test_decode_is_off_on_steps_without_latents(window, qtbot, gui_env: Path) -> None:  # noqa: ANN001
    window.show()
    state, bar = window.state, window.timeline_bar
    state.opener.open_run(str(_previews_only(gui_env)))
    qtbot.waitUntil(lambda: state.step_data.idle and not bar.decodable, timeout=10_000)
    assert not bar.decode.isEnabled() and not window.actions.decode.isEnabled()
    assert "no latents" in bar.decode.toolTip()
    state.opener.open_run(str(write_fake_run(gui_env, steps=3)))
    qtbot.waitUntil(lambda: state.step_data.idle and bar.decodable, timeout=10_000)
    assert bar.decode.isEnabled() and window.actions.decode.isEnabled()
