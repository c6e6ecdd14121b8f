"""The probe battery on the real demo pipeline: the healthy demo passes every probe, and each broken copy (weights
edited or the pipeline patched, in memory) fails the probe that stands for its bug class — and says where."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers.models.attention_processor import AttnProcessor2_0

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.engine.judge_model.probes import PROBE_NAMES
from ghostviewer.record import StudyRecord

# The broken copies are probed at 2 steps: each finding here is structural (an image that does not change, or changes
# far past the tolerance: at 2 steps a dead prompt differs by 0.0, another seed by 0.31 against 1/255), so it holds
# from the first step; the healthy battery and the convergence probe keep the default 10.
STEPS = 2


@pytest.fixture
def demo(demo_loaded: Any):  # noqa: ANN201 - a fresh DiffusionPipeline each test: they patch it
    return copy.deepcopy(demo_loaded.pipe)


def verdicts(report: dict) -> dict[str, bool]:
    for finding in report["findings"]:  # every run made its image: a verdict is about the pipeline, not a crash
        assert "failed" not in finding["evidence"].get("verdicts", []), finding
    return {f["probe"]: f["ok"] for f in report["findings"]}


def test_the_healthy_demo_passes_every_probe_as_one_study(tmp_path: Path) -> None:
    report = api.probe("demo", runs_dir=tmp_path, device="cpu")
    assert verdicts(report) == dict.fromkeys(PROBE_NAMES, True), json.dumps(report["findings"], indent=1)
    assert report["ok"] and report["failed"] == []
    study = StudyRecord(report["study_dir"])
    assert study.kind == "probe" and study.status == "done"
    assert len(study.runs()) == report["runs"] == 13
    for finding in report["findings"]:
        assert finding["finding"] is None and finding["bug_class"]
        assert all(Path(run).is_dir() for run in finding["evidence"]["runs"])
    assert [p.name for p in tmp_path.iterdir()] == [Path(report["study_dir"]).name]  # one row in the history


def test_a_dead_text_encoder_output_means_prompt_negative_and_guidance_have_no_effect(demo, tmp_path: Path) -> None:
    with torch.no_grad():
        demo.text_encoder.final_layer_norm.weight.zero_()
        demo.text_encoder.final_layer_norm.bias.zero_()
    report = api.probe(demo, runs_dir=tmp_path, probes=["prompt_effect", "negative_effect", "guidance_effect",
                                                         "seed_effect"], steps=STEPS)
    assert verdicts(report) == {"prompt_effect": False, "negative_effect": False, "guidance_effect": False,
                                "seed_effect": True}
    prompt = report["findings"][0]
    assert prompt["finding"] == "prompt has no effect" and prompt["evidence"]["mean_abs_diff"] < 1 / 255
    assert "text conditioning" in prompt["bug_class"]


def test_guidance_handled_away_is_found(demo, tmp_path: Path) -> None:
    class FixedGuidance(type(demo)):  # the scale the caller passes is never used
        @property
        def guidance_scale(self) -> float:
            return 7.5

    demo.__class__ = FixedGuidance
    report = api.probe(demo, runs_dir=tmp_path, probes=["guidance_effect", "prompt_effect"], steps=STEPS)
    assert verdicts(report) == {"guidance_effect": False, "prompt_effect": True}


def test_initial_noise_that_ignores_the_generator_means_the_seed_has_no_effect(demo, tmp_path: Path) -> None:
    prepare = demo.prepare_latents

    def fixed_noise(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        fixed = torch.Generator().manual_seed(1234)
        if len(args) > 6:  # StableDiffusionPipeline passes (batch, channels, h, w, dtype, device, generator, …)
            args = (*args[:6], fixed, *args[7:])
        else:
            kwargs["generator"] = fixed
        return prepare(*args, **kwargs)

    demo.prepare_latents = fixed_noise
    report = api.probe(demo, runs_dir=tmp_path, probes=["seed_effect", "determinism"], steps=STEPS)
    assert verdicts(report) == {"seed_effect": False, "determinism": True}


def test_unseeded_noise_is_not_deterministic_and_named_where_it_enters(demo, tmp_path: Path) -> None:
    def unseeded(_module, _inputs, output):  # noqa: ANN001, ANN202
        return output + 0.05 * torch.randn_like(output)  # the global RNG: another draw every call

    handle = demo.unet.mid_block.register_forward_hook(unseeded)
    try:
        report = api.probe(demo, runs_dir=tmp_path, probes=["determinism"], steps=STEPS)
    finally:
        handle.remove()
    verdicts(report)
    (finding,) = report["findings"]
    assert not finding["ok"] and finding["finding"] == "not deterministic"
    assert finding["evidence"]["first_divergence"]["module"] == "unet.mid_block"
    assert finding["evidence"]["first_divergence"]["step"] == 0


def test_a_weight_scaled_past_float16_makes_float16_disagree_and_says_where(demo, tmp_path: Path) -> None:
    # conv1's output is normalised by norm2 right after: float32 barely notices, float16 overflows there.
    resnet = demo.unet.mid_block.resnets[0]
    with torch.no_grad():
        resnet.conv1.weight.mul_(1e4)
        resnet.conv1.bias.mul_(1e4)
    report = api.probe(demo, runs_dir=tmp_path, probes=["fp16_agreement"], steps=STEPS)
    verdicts(report)
    (finding,) = report["findings"]
    assert not finding["ok"] and finding["finding"] == "float16 disagrees with float32"
    assert finding["evidence"]["first_departure"]["module"].startswith("unet.mid_block")
    audit = api.audit(demo)
    assert ("unet", "mid_block.resnets.0.conv1.weight", "fp16_range") in {
        (f["component"], f["tensor"], f["kind"]) for f in audit["findings"]}


def test_an_attention_kernel_that_disagrees_with_math_is_found(demo, tmp_path: Path) -> None:
    class FusedKernelBug(AttnProcessor2_0):  # wrong only when SDPA may take a fused kernel, as a kernel bug is
        def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
            out = super().__call__(*args, **kwargs)
            return out * 1.5 if torch.backends.cuda.flash_sdp_enabled() else out

    demo.unet.set_attn_processor(FusedKernelBug())
    report = api.probe(demo, runs_dir=tmp_path, probes=["attention_backend"], steps=STEPS)
    verdicts(report)
    (finding,) = report["findings"]
    assert not finding["ok"] and finding["finding"] == "attention backends disagree"
    assert "FusedKernelBug" in finding["evidence"]["processors"]
    assert finding["evidence"]["first_departure"]["module"].startswith("unet.")


def test_a_result_that_depends_on_the_batch_is_batch_variance(demo, tmp_path: Path) -> None:
    # A user's hook that makes each sample lean on the batch's mean: a batch of two is not its images made alone.
    demo.unet.mid_block.register_forward_hook(lambda _m, _a, out: out + 2.0 * out.mean(dim=0, keepdim=True))
    report = api.probe(demo, runs_dir=tmp_path, probes=["batch_variance", "seed_effect"], steps=2)
    assert verdicts(report) == {"batch_variance": False, "seed_effect": True}
    found = report["findings"][0]
    assert found["finding"] == "batch variance" and found["evidence"]["differ"] == [0, 1]
    assert min(found["evidence"]["max_abs_diff"]) > found["evidence"]["tolerance"]
    assert "depends on the batch" in found["bug_class"]


def test_noise_injected_at_every_step_does_not_converge(demo, tmp_path: Path) -> None:
    step = demo.scheduler.step

    def noisy(model_output, timestep, sample, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = step(model_output, timestep, sample, *args, **kwargs)
        noise = torch.randn(sample.shape, generator=torch.Generator().manual_seed(int(timestep)))
        (out[0] if isinstance(out, tuple) else out.prev_sample).add_(0.6 * noise)
        return out

    demo.scheduler.step = noisy
    # the default 10 steps: at 4, the runs of 2, 4 and 8 steps pass the convergence rule despite the noise
    report = api.probe(demo, runs_dir=tmp_path, probes=["convergence"])
    verdicts(report)
    (finding,) = report["findings"]
    assert not finding["ok"] and finding["finding"] == "does not converge with more steps", finding["evidence"]


def test_cli_probe_prints_one_json_document_and_exits_1_on_a_failure(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["probe", "--pipeline", "demo", "--device", "cpu", "--probe", "seed_effect", "--steps", str(STEPS),
                 "--runs-dir", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["probe"] for f in report["findings"]] == ["seed_effect"] and report["ok"]
    assert main(["probe", "--pipeline", "demo", "--probe", "nonsense"]) == 2
