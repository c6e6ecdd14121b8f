"""Batch variance for every kind GhostViewer makes, on the demo pipeline: an img2img, inpaint, ControlNet img2img or
ControlNet inpaint batch matches each image made alone from the batch's own draws (the initial noise, the noise
added to the init image, the VAE's sample, an ancestral scheduler's step noise) within float noise; a hook that
mixes the samples is named image by image; and a batch's img2img call gives diffusers one init image per image made
(no FutureWarning), bit for bit the image of the old call that handed it one."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from ghostviewer import api
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.run.call_inputs import pipeline_for, read_inputs
from ghostviewer.engine.run.runner import build_call, prepare_settings
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec
from tests.engine.tiny_controlnet import call_input_files

PROMPT = "a red circle on a blue background"
STEPS = 3


@pytest.fixture(scope="module")
def files(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: ANN001
    return call_input_files(demo_loaded.pipe, tmp_path_factory.mktemp("batch-variance-kinds"))


def _inputs(files: dict[str, Path], kind: str) -> dict[str, Any]:
    given: dict[str, Any] = {"init_image": files["init"], "strength": 0.7}
    if "inpaint" in kind:
        given["mask"] = files["mask"]
    if kind.startswith("controlnet"):
        given.update(control_image=files["control"], controlnet=files["controlnet"])
    return given


def _future_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


class _SampleMixer:
    """A user's hook that mixes the samples of a batch: each sample gets twice the batch's mean added."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.handle = module.register_forward_hook(lambda _m, _a, out: out + 2.0 * out.mean(dim=0, keepdim=True))

    def remove(self) -> None:
        self.handle.remove()


@pytest.mark.parametrize("kind", ["img2img", "inpaint", "controlnet img2img", "controlnet inpaint"])
def test_a_healthy_batch_of_every_kind_matches_each_image_made_alone(
        demo_loaded, runs_dir: Path, files: dict[str, Path], kind: str) -> None:  # noqa: ANN001
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, seed=3, batch=2, runs_dir=runs_dir,
                         check_batch_variance=True, **_inputs(files, kind))
    assert not _future_warnings(caught)  # diffusers got an init image per image made
    report = result["batch_variance"]
    assert report["differ"] == [] and report["batch"] == 2, report
    assert max(report["max_abs_diff"]) <= 1e-4  # measured: at most 1e-5 (float noise; the tolerance is 1e-3)
    # the VAE's sample of the init image and the batch's noise (inpaint: the masked image's sample too), all replayed
    assert report["draws"] >= 2 and report["unmatched_draws"] == 0
    (checked,) = RunRecord(result["run_dir"]).events(kind="batch_variance_checked")
    assert "each of the 2 images matches" in checked.message


def test_an_ancestral_schedulers_step_noise_is_handed_on_too(demo_loaded, runs_dir: Path,
                                                             files: dict[str, Path]) -> None:  # noqa: ANN001
    # Euler ancestral draws noise at every step from the call's generator: the batch's slice k is the image's own
    result = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, seed=3, batch=2, runs_dir=runs_dir, scheduler="euler_a",
                     check_batch_variance=True, **_inputs(files, "img2img"))
    report = result["batch_variance"]
    assert report["differ"] == [] and report["draws"] == 2 + int(STEPS * 0.7) and report["unmatched_draws"] == 0


def test_an_img2img_batch_that_mixes_its_samples_is_named_image_by_image(
        demo_loaded, runs_dir: Path, files: dict[str, Path]) -> None:  # noqa: ANN001
    mixer = _SampleMixer(demo_loaded.pipe.unet.mid_block)
    try:
        result = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, seed=3, batch=3, runs_dir=runs_dir,
                         check_batch_variance=True, **_inputs(files, "img2img"))
    finally:
        mixer.remove()
    report = result["batch_variance"]
    assert report["differ"] == [0, 1, 2] and min(report["max_abs_diff"]) > report["tolerance"]
    (finding,) = RunRecord(result["run_dir"]).events(kind="batch_variance")
    assert "3 of 3 images differ" in finding.message
    assert all(f"image {k} (" in finding.message for k in (1, 2, 3))


@pytest.mark.parametrize("kind", ["img2img", "controlnet img2img"])
def test_a_batch_img2img_call_gives_an_init_image_per_image_bit_for_bit(
        demo_loaded, files: dict[str, Path], kind: str) -> None:  # noqa: ANN001
    original = demo_loaded.pipe.scheduler
    try:
        settings, _ = prepare_settings(demo_loaded, RunSpec(prompt=PROMPT, steps=STEPS, seed=5, batch=2,
                                                            **{k: v if k == "strength" else str(v)
                                                               for k, v in _inputs(files, kind).items()}))
        made = pipeline_for(demo_loaded, settings)
        pipe, family = made.pipe, adapter_for(made.pipe)
        inputs = read_inputs(settings)
        assert inputs is not None
        with torch.inference_mode(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # the call as GhostViewer made it before: one init image for the batch, diffusers duplicating it
            old = pipe(prompt=settings.prompt, negative_prompt=family.negative_prompt(settings.negative_prompt),
                       num_inference_steps=settings.steps, guidance_scale=settings.guidance,
                       generator=torch.Generator().manual_seed(settings.seed), num_images_per_prompt=2,
                       output_type="np", **inputs.call_kwargs(settings), **family.call_kwargs).images
            warned = _future_warnings(caught)
            caught.clear()
            call = build_call(made, settings)
            new = np.stack(call.images(call.invoke({})))
            assert not _future_warnings(caught)
        assert any("You have passed 2 text prompts" in text for text in warned)  # the old call did warn
        assert old.shape == new.shape == (2, 64, 64, 3) and np.array_equal(old, new)
    finally:
        demo_loaded.pipe.scheduler = original


def test_a_traced_ancestral_run_draws_its_step_noise_from_the_seed(demo_loaded, runs_dir: Path) -> None:  # noqa: ANN001
    # the probed scheduler.step keeps its signature, so diffusers hands it the generator (it used to draw unseeded)
    images = []
    for _ in range(2):
        # 4 steps: at 3 the demo's image hides the unseeded draws
        result = api.run(demo_loaded.pipe, PROMPT, steps=4, seed=9, runs_dir=runs_dir, scheduler="euler_a")
        with Image.open(result["image"]) as image:
            images.append(np.asarray(image))
    assert np.array_equal(images[0], images[1])
