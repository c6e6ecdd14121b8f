"""Selecting image k of a batch shows image k's own step latents, x0 and previews, on real runs the engine records
in-process (watched calls of the demo pipeline): a batch of three whose second image the caller's step callback
makes NaN after step 0, a healthy batch of two made with two generators of one seed (the same image twice), and the
NaN batch as a record made before every sample's step tensors were kept (rewritten without them), which keeps saying
it has image 1's only. The badge names image k's first NaN/Inf step and module from the record's per-sample table."""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import Qt

from ghostviewer.gui.data.batch_images import MODULE_WORDS
from ghostviewer.record import RunRecord
from ghostviewer.record.samples import first_nonfinite, sample_nonfinite
from ghostviewer.record.types import CALLBACK_LATENTS
from tests.gui.batch_calls import nan_batch_call
from tests.gui.handover import module_window
from tests.gui.live_window import needs_demo

pytestmark = needs_demo

PROMPT = "a red circle on a blue background"
STEPS, TWIN_STEPS = 4, 3
BAD_SAMPLE, POISONED_AT = 1, 0  # the caller's callback makes image 2's latents NaN at the end of step 0
STEP_PANES = ("latents", "x_t preview", "predicted x₀")


def _strip_sample_tensors(run_dir: Path) -> None:
    """The record as one made before batches kept every sample's step tensors: its steps' `sample_*` entries and
    its per-sample table removed (the steps are kept in the record's database, run.sqlite#step_NNNN)."""
    from safetensors.numpy import save

    record = RunRecord(run_dir)
    with sqlite3.connect(run_dir / "run.sqlite") as db:
        for step in (info.index for info in record.steps()):
            kept = {k: v for k, v in record.step_tensors(step).items() if not k.startswith("sample_")}
            db.execute("UPDATE blobs SET data = ? WHERE name = ?", (save(kept), f"step_{step:04d}"))
        db.execute("DELETE FROM files WHERE name = 'sample_nonfinite'")
        db.execute("DELETE FROM blobs WHERE name = 'sample_nonfinite'")


@pytest.fixture(scope="module")
def runs(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: ANN001
    import torch

    import ghostviewer

    folder = tmp_path_factory.mktemp("batch-steps")
    pipe = demo_loaded.pipe

    with ghostviewer.watch(pipe, runs_dir=folder / "runs") as watcher, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        nan_batch_call(pipe, PROMPT, STEPS, BAD_SAMPLE, POISONED_AT)
        pipe(PROMPT, num_inference_steps=TWIN_STEPS, num_images_per_prompt=2, output_type="np",
             generator=[torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)])
    nan, twins = watcher.runs
    old = folder / "old"
    shutil.copytree(nan["run_dir"], old)
    _strip_sample_tensors(old)
    return {"nan": nan, "twins": twins, "old": str(old)}


@pytest.fixture(scope="module")
def _module_window(qapp, runs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # noqa: ANN001
    yield from module_window(tmp_path_factory, "batch-steps-window")


@pytest.fixture
def window(_module_window, qtbot):  # noqa: ANN001, ANN201
    """One window (no engine) for the module, each test's with no run shown: the test opens its own, read afresh."""
    _module_window.state.timeline.close_run()
    qtbot.waitUntil(lambda: _module_window.state.timeline.record is None and not _module_window.batch.loading
                    and _module_window.state.step_data.idle)
    return _module_window


def _open(window, qtbot, run_dir: str, size: tuple[int, int] = (1366, 768)) -> Any:  # noqa: ANN001
    window.resize(*size)
    window.show()
    window.state.opener.open_run(run_dir)
    _settle(window, qtbot, run_dir)
    return window.batch_strip


def _settle(window, qtbot, run_dir: str) -> None:  # noqa: ANN001
    images = window.step_images
    qtbot.waitUntil(lambda: not window.batch.loading and not images.final_loading and window.state.step_data.idle
                    and images.shown.run_dir == run_dir and images.shown.step == window.state.timeline.step,
                    timeout=10000)
    qtbot.wait(20)  # the panes repaint


def _at(window, qtbot, step: int, image: int) -> None:  # noqa: ANN001
    window.state.timeline.set_step(step)
    qtbot.mouseClick(window.batch_strip.tiles[image], Qt.MouseButton.LeftButton)
    _settle(window, qtbot, window.step_images.shown.run_dir)


def _drawn(pane) -> np.ndarray:  # noqa: ANN001 - ImagePane
    """The pane's image as drawn on screen now: the grabbed pixels inside the image item, (H, W, 3) uint8."""
    from PySide6.QtGui import QImage

    grabbed = pane.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(grabbed.constBits(), np.uint8).reshape(grabbed.height(), grabbed.bytesPerLine())
    shown = rows[:, :grabbed.width() * 3].reshape(grabbed.height(), grabbed.width(), 3)
    rect = pane.mapFromScene(pane.item.sceneBoundingRect()).boundingRect().adjusted(2, 2, -2, -2)
    assert rect.width() > 8 and rect.height() > 8, "the image is drawn"
    return shown[rect.top():rect.bottom(), rect.left():rect.right()].copy()


def test_the_per_sample_table_names_image_2s_first_nan(runs: dict[str, Any]) -> None:
    from ghostviewer.engine.run.recorder import SAMPLE_NONFINITE
    from ghostviewer.record.samples import SAMPLE_NONFINITE as READ_AS

    assert SAMPLE_NONFINITE == READ_AS  # the recorder writes the table under the name the record's reader reads
    record = RunRecord(runs["nan"]["run_dir"])
    lines = sample_nonfinite(record)
    assert lines and {line["sample"] for line in lines} == {BAD_SAMPLE}
    first = first_nonfinite(record, 3)
    assert first[0] is None and first[2] is None
    # First seen where the caller's own step callback hands the latents back (its row), at the step it poisoned.
    assert first[BAD_SAMPLE]["kind"] == "nan" and first[BAD_SAMPLE]["step"] == POISONED_AT
    assert first[BAD_SAMPLE]["module"] == CALLBACK_LATENTS
    assert first[BAD_SAMPLE]["module"] == lines[0]["module"] and first[BAD_SAMPLE]["outputs"] == len(lines)
    assert first_nonfinite(RunRecord(runs["twins"]["run_dir"]), 2) == []  # a healthy batch: no table


def test_image_2_shows_its_own_nan_steps_and_its_badge_names_them(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    run = runs["nan"]
    strip = _open(window, qtbot, run["run_dir"])
    first = first_nonfinite(RunRecord(run["run_dir"]), 3)[BAD_SAMPLE]
    badge = strip.tiles[BAD_SAMPLE].badge.text().replace("\u200b", "").replace("\n", " ")
    assert badge == f"image 2 of 3: NaN at step {first['step']} in {MODULE_WORDS.get(first['module'], first['module'])}"
    assert f"NaN/Inf in {first['outputs']} outputs" in strip.tiles[BAD_SAMPLE].toolTip()
    images = window.step_images
    after = first["step"] + 1
    _at(window, qtbot, after, 0)
    one = {name: _drawn(images.panes[name]) for name in STEP_PANES}
    _at(window, qtbot, after, BAD_SAMPLE)
    assert not images.message.isVisible()  # nothing is missing: image 2's own tensors are shown
    assert images.panes["latents"].full_title == "latents · 4 ch · all NaN/Inf · image 2 of 3"
    decode = images.panes["VAE decode"]
    assert decode.image is None and decode.full_title == "VAE decode (none yet)"  # image 2's own, not yet asked for
    assert decode.title.text == decode.full_title  # not cut short at 1366×768
    recorded = RunRecord(run["run_dir"]).step_tensors(after)
    assert np.isnan(recorded["sample_latents"][BAD_SAMPLE]).all()
    assert np.array_equal(images.panes["x_t preview"].image, recorded["sample_latents_preview"][BAD_SAMPLE])
    for name in STEP_PANES:
        two = _drawn(images.panes[name])
        assert one[name].shape == two.shape and not np.array_equal(one[name], two), name
    magenta = (two == (255, 0, 255)).all(axis=-1).mean()  # predicted x₀ of NaN latents: NaN, drawn magenta
    assert magenta > 0.5
    _at(window, qtbot, POISONED_AT, 2)  # image 3: healthy, its own latents (not image 1's)
    assert np.array_equal(images.panes["x_t preview"].image,
                          RunRecord(run["run_dir"]).step_tensors(POISONED_AT)["sample_latents_preview"][2])


def test_two_images_of_one_seed_show_the_same_pixels(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    _open(window, qtbot, runs["twins"]["run_dir"])
    images = window.step_images
    for step in (1, TWIN_STEPS - 1):
        _at(window, qtbot, step, 0)
        one = {name: _drawn(images.panes[name]) for name in STEP_PANES}
        _at(window, qtbot, step, 1)
        for name in STEP_PANES:
            assert np.array_equal(one[name], _drawn(images.panes[name])), (step, name)
    assert [t.badge.text() for t in window.batch_strip.tiles] == ["image 1 of 2:\nok", "image 2 of 2:\nok"]


def test_an_old_record_says_it_keeps_image_1s_step_tensors(window, qtbot, runs: dict[str, Any]) -> None:  # noqa: ANN001
    strip = _open(window, qtbot, runs["old"])
    images = window.step_images
    _at(window, qtbot, 2, BAD_SAMPLE)
    assert all(images.panes[name].image is None for name in STEP_PANES)
    assert "not recorded" in images.panes["latents"].full_title
    assert images.message.isVisible()
    assert "no step tensors for image 2 of 3 (the record keeps image 1's)" in images.message.toolTip()
    badge = strip.tiles[BAD_SAMPLE].badge.text().replace("\u200b", "").replace("\n", " ")
    assert badge.startswith("image 2 of 3: NaN at step")  # from the run's own report, without the table
    assert "outputs" not in strip.tiles[BAD_SAMPLE].toolTip()
    _at(window, qtbot, 2, 0)
    assert images.panes["latents"].image is not None and not images.message.isVisible()
