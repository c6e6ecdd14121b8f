"""A batch as N images with a verdict each, on real runs made through the engine in-process: a watched img2img call
of three images whose second is made NaN at one step by the caller's own step callback (no fault preset poisons one
sample only: nan-latents poisons every sample), GhostViewer's own inpaint run of two, and a text-to-image run of one
(no strip). Selecting an image makes it the one the image panes describe: its final image and its own step tensors
(tests/gui/test_batch_steps.py looks at their pixels and at a record made before they were kept)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import Qt

from ghostviewer.gui.data.batch_images import Sample, read_batch, sample_words
from ghostviewer.gui.widgets.batch_strip import badge_text
from ghostviewer.record import RunRecord
from ghostviewer.record.types import CALLBACK_LATENTS
from tests.gui.batch_runs import BAD_SAMPLE, shared_runs
from tests.gui.handover import module_window
from tests.gui.live_window import needs_demo

pytestmark = needs_demo


@pytest.fixture(scope="module")
def runs(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: ANN001
    return shared_runs(demo_loaded.pipe, tmp_path_factory)


@pytest.fixture(scope="module")
def _module_window(qapp, runs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    yield from module_window(tmp_path_factory, "batch-images")


@pytest.fixture
def window(_module_window, qtbot):  # noqa: ANN001, ANN201
    """One window (no engine) for the module, each test's with no run shown: the test opens its own."""
    _module_window.state.timeline.close_run()
    qtbot.waitUntil(lambda: _module_window.state.timeline.record is None and not _module_window.batch.loading)
    return _module_window


def _open(window, qtbot, run_dir: str, size: tuple[int, int] = (1366, 768)) -> Any:  # noqa: ANN001
    window.resize(*size)
    window.show()
    window.state.opener.open_run(run_dir)
    images = window.step_images
    qtbot.waitUntil(lambda: not window.batch.loading and not images.final_loading
                    and images.shown.run_dir == run_dir, timeout=10000)
    return window.batch_strip


def _pixels(path: str) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def _near(image: np.ndarray, x: float, y: float) -> set[tuple[int, int, int]]:
    """The colours of the source pixels a nearest-neighbour scaling can draw at (x, y): the one there and its
    neighbours (the thumbnail is smaller than the image)."""
    row, col = int(y * image.shape[0]), int(x * image.shape[1])
    patch = image[max(row - 1, 0):row + 2, max(col - 1, 0):col + 2].reshape(-1, 3)
    return {tuple(int(v) for v in p) for p in patch}


def test_a_batch_shows_each_image_with_its_own_verdict(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    run = runs["watched"]
    strip = _open(window, qtbot, run["run_dir"])
    assert strip.isVisible() and len(strip.tiles) == 3
    badges = [tile.badge for tile in strip.tiles]
    assert all(b.isVisible() for b in badges)
    bad = run["sample_anomalies"][BAD_SAMPLE]
    assert bad is not None and run["verdicts"][BAD_SAMPLE]["label"] == "nan"
    words = badges[BAD_SAMPLE].text().replace("\u200b", "").replace("\n", " ")
    assert words == f"image 2 of 3: NaN at step {bad['step']} in your step callback"  # the caller's code, said so
    assert bad["module"] == CALLBACK_LATENTS
    assert badges[BAD_SAMPLE].kind == "bad"
    for index, badge in enumerate(badges):
        assert badge.text().startswith(f"image {index + 1} of 3:\n{run['verdicts'][index]['label']}"
                                       if index != BAD_SAMPLE else "image 2 of 3:\nNaN")
        if run["verdicts"][index]["label"] == "ok":
            assert badge.kind == "ok"
    for tile, path in zip(strip.tiles, run["images"], strict=True):  # each thumbnail is its own image, as drawn
        image = _pixels(path)
        for x, y in ((0.2, 0.2), (0.5, 0.5), (0.8, 0.7), (0.33, 0.9)):
            assert tile.thumb.shown_pixel(x, y) in _near(image, x, y), (tile.index, x, y)


def test_the_strip_fits_a_laptop_screen_with_every_word_shown(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    strip = _open(window, qtbot, runs["watched"]["run_dir"])
    assert not strip.horizontalScrollBar().isVisible()  # three tiles side by side, none scrolled away
    right = max(t.mapTo(window, t.rect().topRight()).x() for t in strip.tiles)
    assert right <= strip.mapTo(window, strip.rect().topRight()).x()
    for tile in strip.tiles:
        badge = tile.badge
        assert badge.heightForWidth(badge.width()) <= badge.height(), badge.text()  # no line cut off
    assert window.step_images.height() >= 150  # the step panes keep their room


def test_selecting_an_image_makes_it_the_one_the_panes_describe(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    run = runs["watched"]
    strip = _open(window, qtbot, run["run_dir"])
    images = window.step_images
    assert images.panes["latents"].image is not None and "image 1 of 3" in images.panes["latents"].full_title
    qtbot.mouseClick(strip.tiles[2], Qt.MouseButton.LeftButton)
    assert window.batch.selected == 2 and strip.tiles[2].selected and not strip.tiles[0].selected
    qtbot.waitUntil(lambda: not images.final_loading, timeout=5000)
    assert np.array_equal(images.panes["final image"].image, _pixels(run["images"][2]))
    assert images.panes["final image"].full_title == "final image 3 of 3"
    # Every image's step tensors are recorded: the step panes show image 3's own.
    qtbot.waitUntil(lambda: images.shown.run_dir == run["run_dir"], timeout=5000)
    step = RunRecord(run["run_dir"]).step_tensors(images.shown.step)
    assert np.array_equal(images.panes["x_t preview"].image, step["sample_latents_preview"][2])
    assert np.array_equal(images.panes["predicted x₀"].image, step["sample_preview"][2])
    assert "image 3 of 3" in images.panes["latents"].full_title and not images.message.isVisible()
    qtbot.mouseClick(strip.tiles[0], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not images.final_loading, timeout=5000)
    assert images.panes["latents"].image is not None and not images.message.isVisible()
    assert np.array_equal(images.panes["final image"].image, _pixels(run["images"][0]))


def test_the_header_names_the_image_of_the_first_anomaly(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    _open(window, qtbot, runs["watched"]["run_dir"])
    text = window.run_header.text()
    assert "img2img" in text and "batch 3" in text and "first anomaly in image 2 of 3: nan in" in text


def test_an_own_inpaint_batch_and_a_single_image_run(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    strip = _open(window, qtbot, runs["inpaint"]["run_dir"])
    assert strip.isVisible() and [t.badge.text() for t in strip.tiles] == ["image 1 of 2:\nok", "image 2 of 2:\nok"]
    window.batch.select(1)
    strip = _open(window, qtbot, runs["text2img"]["run_dir"])
    assert not strip.isVisible() and window.batch.count == 0 and window.batch.selected == 0  # a new run: image 1
    assert window.step_images.panes["final image"].full_title == "final image"
    assert "image" not in window.step_images.panes["latents"].full_title.removeprefix("latents")


def test_sample_words_and_their_badge_lines() -> None:
    nan = {"phase": "denoise", "step": 7, "module": "unet.up_blocks.1", "kind": "nan"}
    assert sample_words(2, 4, "nan", nan) == "image 3 of 4: NaN at step 7 in unet.up_blocks.1"
    assert sample_words(0, 4, "ok", None) == "image 1 of 4: ok"
    decode = {"phase": "decode", "step": None, "module": "vae.decoder", "kind": "inf"}
    assert sample_words(1, 2, "ok", decode) == "image 2 of 2: ok · Inf in vae.decoder (decode)"
    deep = {**nan, "module": "unet.down_blocks.1.attentions.0"}
    sample = Sample(2, 4, None, {"label": "nan"}, deep)
    assert badge_text(sample) == ("image 3 of 4:\nNaN at step 7 in "
                                  + "unet.down_blocks.1.attentions.0".replace(".", ".\u200b"))


def test_the_batch_read_from_the_record_is_the_runs_own(runs: dict[str, Any]) -> None:
    batch = read_batch(RunRecord(runs["watched"]["run_dir"]))
    assert batch.count == 3 and [s.label for s in batch.samples] == [v["label"] for v in runs["watched"]["verdicts"]]
    assert all(Path(p).is_file() for p in runs["watched"]["images"])
