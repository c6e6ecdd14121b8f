"""Each pipeline family's recorded run in the real main window, offscreen, with no engine: the timeline has every
step, the step images (latent channels, previews, final) are pictures rather than one flat colour or magenta,
the heat map has rows for the family's blocks over encode | steps | decode columns, and a captured block's
feature map is a 2-D picture. The runs are made here with the engine on tiny random pipelines
(tests/engine/tiny_families.py); the window only reads their records."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from ghostviewer.gui.app_settings import AppSettings
from ghostviewer.record import RunRecord
from tests.engine.tiny_families import FAMILIES

PROMPT = "a red circle on blue background"
STEPS = 3
SIZE = 32  # px: a 16×16 latent; 8×8 tokens after the transformers' 2×2 patches (Flux: packed 2×2)
CAPTURED = {
    "sd": "unet.down_blocks.1.attentions.0",
    "sdxl": "unet.down_blocks.1.attentions.0",
    "sd3": "transformer.transformer_blocks.0",
    "flux": "transformer.transformer_blocks.0",  # a dual-stream block: its image stream
    "pixart": "transformer.transformer_blocks.0",
}
BLOCKS = {  # some rows each family's heat map must have
    "sd": ("unet.down_blocks.0.resnets.0", "unet.mid_block", "unet.up_blocks.0.attentions.0"),
    "sdxl": ("unet.down_blocks.1.attentions.0", "unet.mid_block", "text_encoder_2.text_model.encoder.layers.0"),
    "sd3": ("transformer.transformer_blocks.0", "transformer.transformer_blocks.2"),
    "flux": ("transformer.transformer_blocks.1", "transformer.single_transformer_blocks.1"),
    "pixart": ("transformer.transformer_blocks.0", "transformer.transformer_blocks.2"),
}
LATENT_CHANNELS = {"sd": 4, "sdxl": 4, "sd3": 16, "flux": 16, "pixart": 4}
MAGENTA = (255, 0, 255)


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One recorded run per family, made by the engine in this process (torch stays out of the window)."""
    import torch

    from ghostviewer import api
    from tests.engine.tiny_families import build_tiny

    runs = tmp_path_factory.mktemp("family-runs")
    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        made = {}
        for family in FAMILIES:
            result = api.run(build_tiny(family), PROMPT, seed=1, steps=STEPS, width=SIZE, height=SIZE,
                             device="cpu", runs_dir=runs, capture=[CAPTURED[family]])
            made[family] = result["run_dir"]
            assert RunRecord(made[family]).status == "done", result
    finally:
        torch.set_num_threads(threads)
    return made


@pytest.fixture(scope="module")
def win(qapp, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    """A shown window whose engine is never started: it shows recorded runs alone."""
    from ghostviewer.gui.app import create_window

    root = tmp_path_factory.mktemp("families-gui")
    window = create_window(AppSettings(root / "settings.ini"), dialogs=False)
    window.state.history.set_runs_dir(root / "runs")
    window.resize(1366, 768)
    window.show()
    yield window
    window.state.controller.shutdown()
    window.close()


def settle(qtbot, win) -> None:  # noqa: ANN001
    qtbot.waitUntil(lambda: win.state.step_data.idle and not win.step_images.final_loading
                    and not win.heatmap.loading, timeout=10_000)  # all read off the GUI thread


def raise_dock(win, widget) -> None:  # noqa: ANN001
    next(d for d in win.docks if d.widget() is widget).raise_()


def assert_picture(name: str, image: np.ndarray | None) -> None:
    """An RGB(A) picture: not one flat colour, and not all magenta (NaN/Inf)."""
    assert image is not None, f"{name}: nothing shown"
    assert image.ndim == 3 and image.shape[0] > 1 and image.shape[1] > 1, (name, image.shape)
    rgb = image[..., :3].reshape(-1, 3).astype(np.int32)
    assert rgb.std(axis=0).max() > 2, f"{name}: one flat colour"
    assert (np.abs(rgb - MAGENTA).max(axis=1) > 30).mean() > 0.5, f"{name}: magenta (NaN/Inf)"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_recorded_run_of_each_family_is_shown(family: str, family_runs: dict[str, str], win, qtbot) -> None:  # noqa: ANN001
    state = win.state
    assert state.engine.state != "ready"  # no engine: the record alone
    assert state.opener.open_run(family_runs[family])
    assert state.timeline.count == STEPS and state.timeline.step == STEPS - 1
    assert f"step {STEPS - 1} of 0–{STEPS - 1}" in win.timeline_bar.step_label.full_text

    for step in range(STEPS):
        state.timeline.set_step(step)
        settle(qtbot, win)
        qtbot.waitUntil(lambda s=step: win.step_images.shown.step == s, timeout=5000)
        shown = win.step_images.shown
        assert not shown.error, shown.error
        assert shown.latents is not None and shown.latents.shape == (LATENT_CHANNELS[family], 16, 16)
        assert f"{LATENT_CHANNELS[family]} ch" in win.step_images.panes["latents"].title.text
        for pane in ("latents", "x_t preview", "predicted x₀"):
            assert_picture(f"{family} step {step} {pane}", win.step_images.items[pane].image)
    assert_picture(f"{family} final image", win.step_images.items["final image"].image)

    raise_dock(win, win.heatmap)
    settle(qtbot, win)
    grid = win.heatmap.grid
    assert grid is not None
    assert grid.columns == [("encode", None), *(("denoise", s) for s in range(STEPS)), ("decode", None)]
    assert [grid.label(j) for j in range(len(grid.columns))] == ["enc", *map(str, range(STEPS)), "dec"]
    for block in BLOCKS[family]:
        assert block in grid.modules, (block, grid.modules)
    assert any(m.startswith("vae.") for m in grid.modules)
    if family in ("sd3", "flux"):  # dual-stream blocks: a row for the image stream and one for the text stream
        assert {CAPTURED[family], f"{CAPTURED[family]}#text"} <= set(grid.modules)

    view = win.feature_maps
    raise_dock(win, view)
    state.blocks.select(CAPTURED[family])
    settle(qtbot, win)
    qtbot.waitUntil(lambda: view.grid is not None, timeout=5000)
    assert view.captured and view.module == CAPTURED[family]
    assert view.fm.ndim == 3 and view.fm.shape[1:] == (8, 8), view.fm.shape  # tokens laid over the latent grid
    assert view.grid.height == view.grid.width == 8 and view.grid.count == view.fm.shape[0]
    assert_picture(f"{family} feature map", view.grid.image)


def test_stand_in_previews_of_16_channel_and_packed_latents_are_pictures() -> None:
    """Without a recorded preview the GUI colours the latents itself: 16 channels (SD3, Flux), or Flux latents
    still packed as (tokens, 4·C) in an older record, give an (H, W, 3) picture; NaN is magenta."""
    from ghostviewer.gui.data.step_data import channel_mosaic, channels_rgb

    rng = np.random.default_rng(0)
    latents = rng.standard_normal((16, 16, 16)).astype(np.float16)
    latents[5, 3, 4] = np.nan
    rgb = channels_rgb(latents)
    assert rgb.shape == (16, 16, 3) and tuple(rgb[3, 4]) == MAGENTA
    assert_picture("16-channel stand-in", rgb)
    assert_picture("packed stand-in", channels_rgb(rng.standard_normal((64, 64)).astype(np.float16)))
    lut = np.stack([np.arange(256)] * 3, axis=1).astype(np.uint8)
    mosaic, limit = channel_mosaic(latents, lut)
    assert mosaic.shape == (4 * 16 + 3, 4 * 16 + 3, 4) and np.isfinite(limit)  # 4×4 tiles, 1 px gaps
    assert_picture("16-channel mosaic", mosaic)
