"""Settings bisection flips what a user changes besides the run settings, with faults users make themselves (their
own forward hooks, never the ghost lab): a key of the scheduler's config set on their pipeline, named
"scheduler.timestep_spacing"; the call's strength and batch size (img2img); a ControlNet's conditioning scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diffusers import DDIMScheduler
from PIL import Image

from ghostviewer import api
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.bisect_units import Side, compose, differences
from ghostviewer.spec import RunSpec
from tests.engine.test_runner import assert_no_leftovers
from tests.engine.tiny_controlnet import build_controlnet, control_image, controlnet_pipeline

PROMPT = "a red circle"
MID = "unet.mid_block.resnets.0"


def _nan_when(pipe: Any, condition: Any) -> list[Any]:
    """A user's pair of hooks: the U-Net call's sample and timestep noted, mid_block.resnets.0 NaN when
    `condition(sample, timestep)`."""
    seen: dict[str, Any] = {}

    def note(_unet: object, args: tuple, kwargs: dict) -> None:
        seen["sample"] = args[0] if args else kwargs["sample"]
        seen["t"] = float(args[1] if len(args) > 1 else kwargs["timestep"])

    def maybe_nan(_module: object, _args: tuple, output: Any) -> Any:
        return output + float("nan") if condition(seen["sample"], seen["t"]) else output

    return [pipe.unet.register_forward_pre_hook(note, with_kwargs=True),
            pipe.unet.mid_block.resnets[0].register_forward_hook(maybe_nan)]


def test_a_scheduler_config_key_is_a_candidate_and_named(demo_loaded, runs_dir: Path) -> None:
    """A user's code that breaks at timestep 0 (it divides by it, say): only 'leading' spacing reaches it."""
    pipe = demo_loaded.pipe
    original = pipe.scheduler
    handles = _nan_when(pipe, lambda _sample, t: t < 100)
    try:
        good = api.run(pipe, PROMPT, steps=4, runs_dir=runs_dir)
        pipe.scheduler = DDIMScheduler.from_config(original.config, timestep_spacing="leading")
        bad = api.run(pipe, PROMPT, steps=4, guidance=5.0, runs_dir=runs_dir)
        pipe.scheduler = original  # the bisection re-creates each trial's scheduler from the records
        assert bad["verdict"]["label"] == "nan" and good["verdict"]["label"] != "nan"
        result = api.bisect(bad["run_dir"], settings=good["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        for handle in handles:
            handle.remove()
        pipe.scheduler = original
    assert result["differences"] == ["guidance", "scheduler.timestep_spacing"]
    assert result["culprit_settings"] == {"scheduler.timestep_spacing": ["trailing", "leading"]}, result["trail"]
    assert pipe.scheduler is original and pipe.scheduler.config.timestep_spacing == "trailing"
    assert_no_leftovers(pipe)


@pytest.fixture
def init_image(tmp_path: Path) -> Path:
    pixels = np.zeros((64, 64, 3), np.uint8)
    pixels[:] = (230, 220, 40)
    pixels[12:36, 12:36] = (20, 160, 40)
    path = tmp_path / "init.png"
    Image.fromarray(pixels).save(path)
    return path


def test_strength_and_batch_are_candidates(demo_loaded, runs_dir: Path, init_image: Path) -> None:
    """A user's hook that breaks on a batch of two images (four U-Net samples with guidance) at a timestep only a
    high strength reaches; the seed differs too, and is not to blame."""
    pipe = demo_loaded.pipe
    handles = _nan_when(pipe, lambda sample, t: sample.shape[0] >= 4 and t > 600)
    try:
        good = api.run(pipe, PROMPT, steps=4, init_image=init_image, strength=0.5, runs_dir=runs_dir)
        bad = api.run(pipe, PROMPT, steps=4, init_image=init_image, strength=1.0, batch=2, seed=3,
                      runs_dir=runs_dir)
        assert bad["first_anomaly"]["module"] == MID and bad["first_anomaly"]["kind"] == "nan"
        result = api.bisect(bad["run_dir"], settings=good["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        for handle in handles:
            handle.remove()
    assert sorted(result["differences"]) == ["batch", "seed", "strength"]
    assert result["culprit_settings"] == {"batch": [1, 2], "strength": [0.5, 1.0]}, result["trail"]


def test_a_controlnet_scale_is_a_candidate(demo_loaded, runs_dir: Path, tmp_path: Path) -> None:
    """A user's hook on their ControlNet that breaks once its conditioning scale passes 0.5."""
    pipe = controlnet_pipeline(demo_loaded.pipe, build_controlnet(demo_loaded.pipe))
    control = tmp_path / "control.png"
    control_image().save(control)

    def maybe_nan(_module: object, _args: tuple, kwargs: dict, output: Any) -> Any:
        if float(kwargs.get("conditioning_scale", 1.0)) <= 0.5:
            return output
        down, mid = output[0], output[1]
        return ([d + float("nan") for d in down], mid + float("nan"), *output[2:])

    handle = pipe.controlnet.register_forward_hook(maybe_nan, with_kwargs=True)
    try:
        kwargs = {"steps": 3, "control_image": control, "runs_dir": runs_dir}
        good = api.run(pipe, PROMPT, controlnet_scale=0.5, **kwargs)
        bad = api.run(pipe, PROMPT, controlnet_scale=1.0, guidance=4.0, **kwargs)
        assert bad["verdict"]["label"] == "nan" and good["verdict"]["label"] != "nan"
        result = api.bisect(bad["run_dir"], settings=good["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert sorted(result["differences"]) == ["controlnet_scale", "guidance"]
    assert result["culprit_settings"] == {"controlnet_scale": [0.5, 1.0]}, result["trail"]


def test_a_loras_scale_is_a_candidate_and_named_by_its_file(demo_loaded, runs_dir: Path, tmp_path: Path) -> None:
    """A user's hook that breaks once a LoRA on their attention is weighted past 2 (an over-weighted LoRA)."""
    import copy

    import torch
    from diffusers import StableDiffusionPipeline
    from peft import LoraConfig, get_peft_model_state_dict

    pipe = demo_loaded.pipe
    unet = copy.deepcopy(pipe.unet)
    torch.manual_seed(0)
    unet.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    state = {k: torch.full_like(v, 0.01) if "lora_B" in k else v for k, v in get_peft_model_state_dict(unet).items()}
    StableDiffusionPipeline.save_lora_weights(tmp_path, unet_lora_layers=state, weight_name="lora.safetensors",
                                              safe_serialization=True)
    lora = tmp_path / "lora.safetensors"
    attn = pipe.unet.mid_block.attentions[0].transformer_blocks[0].attn1

    def maybe_nan(module: Any, _args: tuple, output: Any) -> Any:
        scaling = getattr(module.to_q, "scaling", None) or {}
        return output + float("nan") if max(scaling.values(), default=0.0) > 2.0 else output

    handle = attn.register_forward_hook(maybe_nan)
    try:
        good = api.run(pipe, PROMPT, steps=2, lora=f"{lora}:0.5", runs_dir=runs_dir)
        bad = api.run(pipe, PROMPT, steps=3, lora=f"{lora}:3.0", runs_dir=runs_dir)
        assert bad["verdict"]["label"] == "nan" and good["verdict"]["label"] != "nan"
        result = api.bisect(bad["run_dir"], settings=good["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    unit = f"adapters:{lora.resolve()}"
    assert result["differences"] == ["steps", unit]
    assert result["culprit_settings"] == {unit: [0.5, 3.0]}, result["trail"]


def test_a_cuda_generator_difference_is_refused_without_cuda(demo_loaded, runs_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the difference can be bisected")
    good = RunSpec(prompt=PROMPT)
    bad = RunSpec(prompt=PROMPT, generator_device="cuda", batch=2)
    units, _ignored = differences(Side(bad), Side(good), ["unet"])
    assert units == ["batch", "generator_device"]
    trial, scheduler = compose(Side(bad), Side(good), ["batch"], units, ["unet"])
    assert (trial.batch, trial.generator_device, scheduler) == (2, "cpu", None)
    from ghostviewer.engine.loops.bisect_settings import _refuse_unrunnable

    with pytest.raises(GhostError, match="generator_device .*no CUDA device"):
        _refuse_unrunnable(units, bad, good, None)


def test_a_loras_scale_is_its_own_candidate() -> None:
    good = RunSpec(prompt=PROMPT, adapters=("a.safetensors:1.0", "b.safetensors:0.5"))
    bad = RunSpec(prompt=PROMPT, adapters=("a.safetensors:1.0", "b.safetensors:1.5"), steps=8)
    units, _ignored = differences(Side(bad), Side(good), ["unet"])
    assert units == ["steps", "adapters:b.safetensors"]
    trial, _scheduler = compose(Side(bad), Side(good), ["steps"], units, ["unet"])
    assert trial.adapters == ("a.safetensors:1.0", "b.safetensors:0.5") and trial.steps == 8
