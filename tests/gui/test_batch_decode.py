"""A batch's image k, on real runs made in-process on the demo pipeline: the on-demand VAE decode the window asks
for is image k's own (the decode command carries the sample; an old client's request without it decodes image 1),
and the feature and attention maps say plainly whose they are — a captured output keeps its last batch item, so a
batch's maps are its last image's (checked: the last image's mid-block output made 1000 larger shows in the map).

The window's engine pipe is replaced by an in-process EngineSession (the real command handler and events, JSON both
ways), so the decode runs on the demo's real VAE without a second process."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import Qt

from ghostviewer.engine.server import EngineSession
from ghostviewer.record import RunRecord
from tests.gui.batch_calls import nan_batch_call
from tests.gui.fake_runs import write_fake_run
from tests.gui.live_window import needs_demo

pytestmark = needs_demo

PROMPT = "a red circle on a blue background"
STEPS, BAD_SAMPLE, POISONED_AT, SHOWN_STEP = 3, 1, 0, 2
BUMP = 1000.0


@pytest.fixture(scope="module")
def runs(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: ANN001
    import torch

    import ghostviewer
    from ghostviewer import api

    folder = tmp_path_factory.mktemp("batch-decode")
    pipe = demo_loaded.pipe

    with ghostviewer.watch(pipe, runs_dir=folder / "runs") as watcher, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        nan_batch_call(pipe, PROMPT, STEPS, BAD_SAMPLE, POISONED_AT)
    (nan,) = watcher.runs

    def bump_last(_module: Any, _args: Any, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[1::2] += BUMP  # batch of 2 under guidance: [uncond 1, uncond 2, cond 1, cond 2]; image 2 both times
        return out

    handle = pipe.unet.mid_block.register_forward_hook(bump_last)
    try:
        maps = api.run_spec(pipe, {"prompt": PROMPT, "steps": 2, "seed": 3, "batch": 2,
                                   "capture": ["unet.mid_block"], "capture_attention": True}, runs_dir=folder / "runs")
    finally:
        handle.remove()
    return {"nan": nan["run_dir"], "maps": maps["run_dir"], "loaded": demo_loaded}


def in_process_engine(window, loaded: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:  # noqa: ANN001
    """The window's engine as an EngineSession in this process: each command sent goes through JSON to its handler,
    each event it emits back through the client's own dispatch. Returns the commands, as the engine read them."""
    client = window.state.engine
    session = EngineSession(lambda event, **fields: client._dispatch(json.dumps({"event": event, **fields}).encode()))
    session.loaded = loaded
    received: list[dict[str, Any]] = []

    def send(cmd: str, **fields: Any) -> int:
        command = json.loads(json.dumps({"cmd": cmd, "id": len(received) + 1, **fields}))
        received.append(command)
        session.handle(command)
        return command["id"]

    monkeypatch.setattr(client, "send", send)
    return received


def _settle(window, qtbot) -> None:  # noqa: ANN001
    images = window.step_images
    qtbot.waitUntil(lambda: not window.batch.loading and not images.final_loading and window.state.step_data.idle
                    and not images.decode_loading and images.shown.step == window.state.timeline.step,
                    timeout=10_000)
    qtbot.wait(20)


def _open(window, qtbot, run_dir: str) -> None:  # noqa: ANN001
    window.resize(1366, 768)
    window.show()
    window.state.opener.open_run(run_dir)
    qtbot.waitUntil(lambda: window.step_images.shown.run_dir == run_dir, timeout=10_000)
    _settle(window, qtbot)


def _pick(window, qtbot, image: int) -> None:  # noqa: ANN001
    qtbot.mouseClick(window.batch_strip.tiles[image], Qt.MouseButton.LeftButton)
    _settle(window, qtbot)


def _decode(window, qtbot) -> np.ndarray:  # noqa: ANN001
    """Decode the shown step of the selected image as a user does (the timeline bar's button); the pane's image."""
    bar = window.timeline_bar
    assert bar.decode.isEnabled()
    bar.decode.click()
    pane = window.step_images.panes["VAE decode"]
    qtbot.waitUntil(lambda: pane.image is not None, timeout=30_000)
    _settle(window, qtbot)
    return np.array(pane.image)


def _png(run_dir: str, name: str) -> np.ndarray:
    from PIL import Image

    with Image.open(Path(run_dir) / "images" / f"{name}.png") as image:
        return np.asarray(image.convert("RGB"))


def test_the_decode_of_image_k_is_image_ks_own(window, qtbot, runs, monkeypatch) -> None:  # noqa: ANN001
    run_dir = runs["nan"]
    sent = in_process_engine(window, runs["loaded"], monkeypatch)
    _open(window, qtbot, run_dir)
    window.state.timeline.set_step(SHOWN_STEP)
    _settle(window, qtbot)
    first = _decode(window, qtbot)  # image 1 (selected at first)
    pane = window.step_images.panes["VAE decode"]
    assert pane.full_title == f"VAE decode · step {SHOWN_STEP}"
    _pick(window, qtbot, BAD_SAMPLE)
    assert pane.image is None and pane.full_title == "VAE decode (none yet)"  # image 1's is not shown as image 2's
    second = _decode(window, qtbot)
    assert [c.get("sample") for c in sent] == [0, BAD_SAMPLE] and all(c["cmd"] == "decode" for c in sent)
    assert pane.full_title == "decode · image 2 · NaN/Inf"
    assert pane.title.text.startswith("decode · image 2")  # at 1366×768 whose decode it is shows whole
    assert (second == (255, 0, 255)).all()  # image 2's latents are NaN: its decode is drawn non-finite
    assert not (first == (255, 0, 255)).all(axis=-1).any()
    assert first.shape == second.shape and not np.array_equal(first, second)
    _pick(window, qtbot, 2)  # image 3: healthy, another noise; decoded from its own latents, not image 1's
    third = _decode(window, qtbot)
    assert np.array_equal(third, _png(run_dir, f"step_{SHOWN_STEP:04d}_decoded_sample_2"))
    assert np.array_equal(first, _png(run_dir, f"step_{SHOWN_STEP:04d}_decoded"))
    assert np.abs(third.astype(int) - first.astype(int)).mean() > 1.0
    _pick(window, qtbot, 0)  # back to image 1: its decode again, read from the record
    assert np.array_equal(np.array(pane.image), first)


def test_an_old_clients_decode_is_image_1s_and_a_missing_image_is_one_line(runs) -> None:  # noqa: ANN001
    run_dir = runs["nan"]
    events: list[tuple[str, dict[str, Any]]] = []
    session = EngineSession(lambda event, **fields: events.append((event, fields)))
    session.loaded = runs["loaded"]
    session.handle({"cmd": "decode", "id": 1, "run_dir": run_dir, "step": 1})  # no "sample": image 1
    (name, decoded), = events
    assert name == "decoded" and decoded["sample"] == 0 and Path(decoded["path"]).name == "step_0001_decoded.png"
    events.clear()
    session.handle({"cmd": "decode", "id": 2, "run_dir": run_dir, "step": 1, "sample": 7})
    (name, error), = events
    assert name == "error" and "\n" not in error["message"]
    assert "kept no latents of image 8" in error["message"]


def test_feature_and_attention_maps_say_whose_they_are(window, qtbot, runs, gui_env: Path) -> None:  # noqa: ANN001
    run_dir = runs["maps"]
    _open(window, qtbot, run_dir)
    window.state.timeline.set_step(1)
    window.state.blocks.select("unet.mid_block")
    _settle(window, qtbot)
    fm, attention = window.feature_maps, window.attention
    note = "feature maps: image 2's, not image 1's (only image 2's are recorded)"
    assert fm.sample_note.isVisibleTo(window) and fm.sample_note.text() == note
    assert attention.sample_note.text() == "attention maps: image 2's, not image 1's (only image 2's are recorded)"
    recorded = RunRecord(run_dir).step_tensors(1)["fm/unet.mid_block"].astype(np.float32)
    assert recorded.mean() > BUMP / 2  # the recorded map is the last image's: its bump shows
    _pick(window, qtbot, 1)
    assert fm.sample_note.text() == "feature maps of image 2 of 2 (the record keeps image 2's only)"
    assert attention.sample_note.text() == "attention maps of image 2 of 2 (the record keeps image 2's only)"
    window.state.opener.open_run(runs["nan"])  # a batch without maps still says whose maps a capture keeps;
    qtbot.waitUntil(lambda: window.step_images.shown.run_dir == runs["nan"], timeout=10_000)
    _settle(window, qtbot)
    assert "image 3's" in fm.sample_note.text()
    single = str(write_fake_run(gui_env, steps=2, capture=("unet.mid_block",)))  # one image: nothing to say
    window.state.opener.open_run(single)
    qtbot.waitUntil(lambda: window.step_images.shown.run_dir == single, timeout=10_000)
    _settle(window, qtbot)
    assert not fm.sample_note.isVisibleTo(window) and not attention.sample_note.isVisibleTo(window)
