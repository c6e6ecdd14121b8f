"""The call's inputs beside the step images, on real runs made through the engine in-process: GhostViewer's own
inpaint run of a batch (init image and mask), a watched img2img call (its `image` keyword), and a plain
text-to-image run — for which the panel is hidden and takes no room. The thumbnails are compared with the input
files pixel by pixel, as drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ghostviewer.gui.data.call_inputs import as_rgb, read_call_inputs
from ghostviewer.record import RunRecord
from tests.gui.batch_runs import shared_runs
from tests.gui.live_window import needs_demo

pytestmark = needs_demo
# (x, y) as fractions of the image, inside flat areas of the init image (yellow, the green square, the red bar) and
# of the mask (kept: black, repainted: white), away from their edges
POINTS = [(0.08, 0.08), (0.35, 0.35), (0.5, 0.87), (0.9, 0.5), (0.25, 0.6), (0.75, 0.2)]


@pytest.fixture(scope="module")
def runs(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: ANN001
    return shared_runs(demo_loaded.pipe, tmp_path_factory)


def _open(window, qtbot, run_dir: str) -> Any:  # noqa: ANN001
    window.resize(1366, 768)
    window.show()
    window.state.opener.open_run(run_dir)
    panel = window.call_inputs
    qtbot.waitUntil(lambda: not panel.loading and panel._for is not None and panel._for[0] == run_dir,
                    timeout=10000)
    return panel


def _file_pixel(path: Path, x: float, y: float) -> tuple[int, int, int]:
    image = np.asarray(Image.open(path).convert("RGB"))
    return tuple(int(v) for v in image[int(y * image.shape[0]), int(x * image.shape[1])])


def test_an_inpaint_run_shows_its_init_image_and_mask_as_drawn(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    panel = _open(window, qtbot, runs["inpaint"]["run_dir"])
    assert panel.isVisible() and panel.width() < 200  # beside the images, narrow
    assert panel.kind.text() == "inpaint"
    assert panel.values.text().splitlines() == ["strength 1", "batch 2"]
    tiles = panel.tiles[:len(panel.inputs.images)]
    assert [t.name.text() for t in tiles] == ["init image", "mask"]
    for tile, source in zip(tiles, (runs["init"], runs["mask"]), strict=True):
        assert tile.isVisible() and "64×64" in tile.toolTip()
        for x, y in POINTS:
            assert tile.thumb.shown_pixel(x, y) == _file_pixel(source, x, y), (tile.name.text(), x, y)


def test_a_watched_img2img_call_shows_the_image_it_was_given(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    panel = _open(window, qtbot, runs["watched"]["run_dir"])
    assert panel.isVisible() and panel.kind.text() == "img2img"
    assert panel.values.text().splitlines() == ["strength 0.75", "batch 3"]
    (tile,) = panel.tiles[:len(panel.inputs.images)]
    assert tile.name.text() == "init image"
    for x, y in POINTS[:4]:
        assert tile.thumb.shown_pixel(x, y) == _file_pixel(runs["init"], x, y)


def test_the_panel_is_hidden_for_text_to_image_and_costs_no_room(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    panel = _open(window, qtbot, runs["inpaint"]["run_dir"])
    narrowed = window.step_images.width()
    panel = _open(window, qtbot, runs["text2img"]["run_dir"])
    qtbot.waitUntil(lambda: window.step_images.width() > narrowed, timeout=5000)
    assert not panel.isVisible() and not panel.inputs.images  # the inpaint run's inputs are not left standing
    assert window.step_images.width() == window.step_images.parentWidget().width()


def test_the_images_are_read_off_the_gui_thread(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    window.show()
    window.state.opener.open_run(runs["inpaint"]["run_dir"])
    panel = window.call_inputs
    assert panel.loading and not panel.inputs.images  # asked for, not read yet: the Worker answers later
    qtbot.waitUntil(lambda: not panel.loading, timeout=10000)
    assert len(panel.inputs.images) == 2


def test_the_record_names_each_input_and_the_calls_values(runs: dict[str, Any]) -> None:
    own = read_call_inputs(RunRecord(runs["inpaint"]["run_dir"]))
    watched = read_call_inputs(RunRecord(runs["watched"]["run_dir"]))
    plain = read_call_inputs(RunRecord(runs["text2img"]["run_dir"]))
    assert own.summary == "inpaint · strength 1 · batch 2" and [i.name for i in own.images] == ["init image", "mask"]
    assert watched.summary == "img2img · strength 0.75 · batch 3" and watched.images[0].note == "64×64"
    assert not plain.shown and plain.kind == "text2img"


def test_tensor_inputs_read_as_images_the_diffusers_way() -> None:
    chw = np.zeros((1, 3, 4, 4), np.float32)
    chw[0, 0] = 1.0  # red, in [-1, 1]: diffusers' tensor convention
    chw[0, 1:] = -1.0
    assert as_rgb(chw, channels_first=True)[0, 0].tolist() == [255, 0, 0]
    mask = np.full((1, 4, 4, 1), 0.5, np.float32)  # a numpy mask in [0, 1], (B, H, W, C)
    assert as_rgb(mask, channels_first=False)[0, 0].tolist() == [128, 128, 128]
    assert as_rgb(np.zeros((1, 77, 768), np.float32), channels_first=False) is None  # embeddings are no image
