"""A user's own ControlNet call, watched: a StableDiffusionControlNetPipeline made from the demo's components and a
tiny ControlNet (ControlNetModel.from_unet on the demo's U-Net), recorded as kind controlnet with its control image,
the ControlNet's blocks traced in each denoising step like the U-Net's, a scale bug in a ControlNet block named as
the first anomaly, a call whose control did nothing named so, and the call re-issued bit for bit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import ghostviewer
from ghostviewer import api
from ghostviewer.record import RunRecord
from tests.engine.tiny_controlnet import build_controlnet, control_image, controlnet_pipeline

PROMPT = "a red circle on a blue background"
STEPS = 4


@pytest.fixture(scope="module")
def pipe(demo_loaded) -> Any:
    return controlnet_pipeline(demo_loaded.pipe, build_controlnet(demo_loaded.pipe))


def _call(pipe: Any, **kwargs: Any) -> Any:
    return pipe(PROMPT, image=control_image(), num_inference_steps=STEPS, output_type="np",
                generator=torch.Generator().manual_seed(3), **kwargs)


def _watched(pipe: Any, runs_dir: Path, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        output = _call(pipe, **kwargs)
    (run,) = watcher.runs
    return output, run


@pytest.fixture(scope="module")
def watched(pipe: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any], Path]:
    """One healthy watched call (shared by the tests that only read it) and its runs folder."""
    runs_dir = tmp_path_factory.mktemp("controlnet-watch")
    output, run = _watched(pipe, runs_dir)
    return output, run, runs_dir


def test_the_call_is_recorded_as_controlnet_with_its_control_image(pipe: Any, watched) -> None:
    output, run, _ = watched
    assert np.array_equal(output.images, _call(pipe).images)  # the caller's own output, bit for bit
    record = RunRecord(run["run_dir"])
    assert record.settings["kind"] == "controlnet" and record.call["kind"] == "controlnet"
    assert record.call["pipeline_class"].endswith("StableDiffusionControlNetPipeline")
    image = record.call["kwargs"]["image"]
    recorded = record.image_path(Path(image["$image"]).stem)
    assert recorded is not None
    with Image.open(recorded) as png:
        assert np.array_equal(np.asarray(png.convert("RGB")), np.asarray(control_image()))
    assert run["verdict"]["label"] == "ok" and run["first_anomaly"] is None
    assert not record.events(kind="control")  # a ControlNet that does something: no finding


def test_the_controlnets_blocks_are_traced_in_every_step_before_the_unets(watched) -> None:
    _, run, _ = watched
    record = RunRecord(run["run_dir"])
    residuals = ["controlnet.controlnet_down_blocks.0", "controlnet.controlnet_mid_block"]
    blocks = ["controlnet.down_blocks.1.attentions.0", "controlnet.mid_block", *residuals]
    for module in blocks:
        rows = record.stats(module)
        assert rows and {r.phase for r in rows} == {"denoise"}, module
        assert sorted({r.step for r in rows}) == list(range(STEPS)), module
    for step in range(STEPS):  # each step the ControlNet runs first: its residuals feed the U-Net
        rows = record.stats(phase="denoise", step=step)
        order = [r.module for r in rows]
        assert order.index("controlnet.controlnet_mid_block") < order.index("unet.down_blocks.0")
    mid = record.stats("controlnet.controlnet_mid_block")
    assert all(0 < r.absmax < 100 for r in mid)  # a trained-like ControlNet: small, non-zero residuals


@pytest.fixture
def scale_bug(pipe: Any) -> Iterator[None]:
    """The user's own bug: from the third step on, the ControlNet's mid residual comes out 2000 times too large
    (finite: no NaN to see)."""
    calls = iter(range(10**6))

    def scaled(_module: Any, _args: Any, output: torch.Tensor) -> torch.Tensor | None:
        return output * 2000 if next(calls) >= 2 else None

    handle = pipe.controlnet.controlnet_mid_block.register_forward_hook(scaled)
    try:
        yield
    finally:
        handle.remove()


def test_a_scale_bug_in_a_controlnet_block_is_the_first_anomaly(pipe: Any, runs_dir: Path, scale_bug) -> None:
    _, run = _watched(pipe, runs_dir)
    first = run["first_anomaly"]
    assert first is not None
    assert (first["module"], first["phase"], first["step"], first["kind"]) == (
        "controlnet.controlnet_mid_block", "denoise", 2, "explode")


def test_the_watched_call_replays_bit_for_bit(pipe: Any, watched) -> None:
    _, run, runs_dir = watched
    report = api.replay(run["run_dir"], times=1, pipeline=pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True and report["first_divergence"] is None


def test_a_zero_scale_is_named_the_control_had_no_effect(pipe: Any, runs_dir: Path) -> None:
    output, run = _watched(pipe, runs_dir, controlnet_conditioning_scale=0.0)
    (finding,) = RunRecord(run["run_dir"]).events(kind="control")
    assert finding.level == "warning" and "the control image had no effect" in finding.message
    assert "scale (controlnet_conditioning_scale) was 0 at every step" in finding.message
    assert finding.data["calls"] == STEPS and finding.data["scales"] == [0.0]
    assert run["verdict"]["label"] == "ok"  # the image itself looks fine: only the finding says why it ignores


def test_an_untrained_controlnet_is_named_the_control_had_no_effect(demo_loaded, runs_dir: Path) -> None:
    untrained = controlnet_pipeline(demo_loaded.pipe, build_controlnet(demo_loaded.pipe, effect=0.0))
    output, run = _watched(untrained, runs_dir)
    (finding,) = RunRecord(run["run_dir"]).events(kind="control")
    assert "outputs were all 0 at scale 1" in finding.message and "zero convolutions" in finding.message
    plain = demo_loaded.pipe(PROMPT, num_inference_steps=STEPS, output_type="np",
                             generator=torch.Generator().manual_seed(3))
    assert np.array_equal(output.images, plain.images)  # the evidence: exactly the text-to-image call's image
