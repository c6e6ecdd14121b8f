"""A pipeline handed over as an object: it takes the weight hashes of the folder it was loaded from while its weights
are still exactly that folder's, so its baseline applies and silent faults in user hooks are found; weights changed
in place, or a pipeline built in memory, have none, and the run's log says why."""

from __future__ import annotations

from pathlib import Path

import torch

from ghostviewer import api
from ghostviewer.engine.loops.recorded import wrap_pipeline
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.record import RunRecord
from tests.engine.tiny_pipelines import build_tiny_sd

PROMPT = "a red circle on a blue background"


def _baseline_note(run_dir: str) -> str:
    return next(e.message for e in RunRecord(run_dir).events() if e.kind == "baseline")


def test_the_demo_as_an_object_has_its_folders_hashes_and_its_baseline_finds_a_hooked_drift(demo_loaded,
                                                                                            runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    wrapped = wrap_pipeline(pipe)
    assert wrapped.weight_hashes == demo_loaded.weight_hashes and wrapped.weight_hashes
    handle = resolve_module(pipe, "unet.down_blocks.1.resnets.0").register_forward_hook(lambda _m, _a, out: out * 1.5)
    try:
        result = api.run(pipe, PROMPT, seed=3, steps=20, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert result["first_anomaly"]["kind"] == "drift"
    assert result["first_anomaly"]["module"] == "unet.down_blocks.1.resnets.0"
    assert _baseline_note(result["run_dir"]).startswith("using baseline")


def test_weights_changed_in_place_lose_the_hashes_until_they_are_put_back(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    weight = pipe.unet.conv_in.weight
    original = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.add_(1e-3)  # what a fused LoRA does
        changed = wrap_pipeline(pipe)
        assert changed.weight_hashes == {}
        assert "unet differs from" in changed.identity_note and "conv_in.weight" in changed.identity_note
        result = api.run(pipe, PROMPT, seed=0, steps=2, runs_dir=runs_dir)
        assert "unet differs from" in _baseline_note(result["run_dir"])
    finally:
        with torch.no_grad():
            weight.copy_(original)
    assert wrap_pipeline(pipe).weight_hashes == demo_loaded.weight_hashes  # the cache follows the change back
    try:
        weight.data += 0.05  # through .data, as a LoRA merge may: no version counter moves
        assert wrap_pipeline(pipe).weight_hashes == {}
    finally:
        with torch.no_grad():
            weight.copy_(original)
    assert wrap_pipeline(pipe).weight_hashes == demo_loaded.weight_hashes


def test_a_pipeline_built_in_memory_has_no_hashes_and_says_why() -> None:
    wrapped = wrap_pipeline(build_tiny_sd())
    assert wrapped.weight_hashes == {} and "not loaded from a diffusers folder" in wrapped.identity_note


def test_variant_files_inference_tensors_and_offloaded_weights(tmp_path: Path) -> None:
    """A folder shipping an fp16 variant still matches (its plain files are what a plain load reads); weights loaded
    under inference_mode are re-compared after an in-place edit (no version counter to trust); weights on the meta
    device are not compared, and the note says so — never an exception out of wrap_pipeline."""
    from diffusers import StableDiffusionPipeline

    from ghostviewer.engine.loading.pipelines import load_pipeline
    from tests.engine.tiny_pipelines import save_tiny_sd

    folder = save_tiny_sd(tmp_path / "sd")
    StableDiffusionPipeline.from_pretrained(str(folder)).to(torch.float16).save_pretrained(str(folder), variant="fp16")
    expected = load_pipeline(str(folder), device="cpu").weight_hashes
    assert wrap_pipeline(StableDiffusionPipeline.from_pretrained(str(folder))).weight_hashes == expected
    with torch.inference_mode():
        pipe = StableDiffusionPipeline.from_pretrained(str(folder))
    assert wrap_pipeline(pipe).weight_hashes == expected
    with torch.inference_mode():
        pipe.unet.conv_in.weight.add_(1.0)
    assert wrap_pipeline(pipe).weight_hashes == {}
    offloaded = StableDiffusionPipeline.from_pretrained(str(folder))
    offloaded.unet.conv_in.to("meta")
    wrapped = wrap_pipeline(offloaded)
    assert wrapped.weight_hashes == {} and "offloaded" in wrapped.identity_note


def test_a_loaded_pipeline_stands_in_for_a_run_only_in_the_dtypes_it_recorded(demo_loaded, runs_dir: Path) -> None:
    """Isolating or exporting a bfloat16 run with the float32 pipeline the engine holds captured float32 inputs."""
    from ghostviewer.engine.loops.recorded import fits_run, open_recorded

    run = api.run("demo", PROMPT, seed=0, steps=2, dtype="bfloat16", device="cpu", runs_dir=runs_dir)
    record, settings = open_recorded(run["run_dir"])
    assert not fits_run(demo_loaded, record, settings)
    same = api.run("demo", PROMPT, seed=0, steps=2, device="cpu", runs_dir=runs_dir)
    assert fits_run(demo_loaded, *open_recorded(same["run_dir"]))
