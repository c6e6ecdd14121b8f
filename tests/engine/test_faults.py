"""The ghost lab: each fault is flagged by the verdict and located where it was injected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer.engine.faults import FAULTS, list_faults
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec
from tests.engine.test_runner import assert_no_leftovers

SMALL = {"width": 32, "height": 32}


def _run(loaded, runs_dir: Path, prompt: str, fault: str, seed: int = 0, **kwargs) -> dict:
    return execute_run(loaded, RunSpec(prompt=prompt, seed=seed, faults=(fault,), **kwargs), runs_dir)


def test_every_fault_is_listed_with_where_it_lives() -> None:
    names = {f["name"] for f in list_faults()}
    assert names == {"short-prompt-attention", "nan-latents", "fp16-vae-overflow", "inf-trigger-word", "unseeded-noise",
                     "decoder-color-shift", "dead-text-conditioning", "scaled-block",  # these three: silent
                     "oom-at-step"}  # a device error, not a ghost (tests/engine/test_oom.py)
    assert all(f["description"] and f["module"] for f in list_faults())


def test_short_prompt_attention_blanks_short_prompts_only(demo_loaded, runs_dir: Path) -> None:
    short = _run(demo_loaded, runs_dir, "red circle", "short-prompt-attention", steps=2)
    assert short["verdict"]["label"] in ("nan", "blank")
    anomaly = short["first_anomaly"]
    assert anomaly["module"].startswith(FAULTS["short-prompt-attention"].injected_at)
    assert anomaly["kind"] == "nan" and anomaly["phase"] == "denoise" and anomaly["step"] == 0
    assert np.asarray(Image.open(short["image"])).max() == 0  # written, and black
    long = _run(demo_loaded, runs_dir, "a red circle on a blue background", "short-prompt-attention", steps=2)
    assert long["verdict"]["label"] == "ok" and long["first_anomaly"] is None
    assert_no_leftovers(demo_loaded.pipe)


def test_nan_latents_hit_about_one_seed_in_ten(demo_loaded, runs_dir: Path) -> None:
    bad = _run(demo_loaded, runs_dir, "a green square on a white background", "nan-latents", seed=17, steps=2)
    assert bad["verdict"]["label"] == "nan"
    assert bad["first_anomaly"] == {"phase": "denoise", "step": 0, "module": "pipeline.prepare_latents", "kind": "nan"}
    good = _run(demo_loaded, runs_dir, "a green square on a white background", "nan-latents", seed=18, steps=2)
    assert good["first_anomaly"] is None


@pytest.mark.slow
def test_fp16_vae_overflow_is_black_in_float16_and_flagged_in_float32(demo_loaded, runs_dir: Path) -> None:
    prompt = "a yellow star on a black background"
    fp32 = _run(demo_loaded, runs_dir, prompt, "fp16-vae-overflow", steps=2)
    injected = FAULTS["fp16-vae-overflow"].injected_at
    assert fp32["verdict"]["label"] == "ok"  # the image survives in float32 ...
    assert fp32["first_anomaly"]["module"] == injected and fp32["first_anomaly"]["kind"] == "overflow"  # ... barely
    half = load_pipeline("demo", device="cpu", dtype="float32,vae=float16")
    # float16 decodes at 32 px: a float16 convolution on a CPU costs ~1 s a decode at 64 px; the ×16384 overflow
    # does not depend on the size
    fp16 = _run(half, runs_dir, prompt, "fp16-vae-overflow", steps=2, dtype="float32,vae=float16", **SMALL)
    assert fp16["verdict"]["label"] in ("nan", "blank")
    assert fp16["first_anomaly"]["module"] == injected and fp16["first_anomaly"]["kind"] == "inf"
    assert fp16["first_anomaly"]["phase"] == "decode"
    healthy = _run(half, runs_dir, prompt, "unseeded-noise", steps=2, dtype="float32,vae=float16", **SMALL)
    assert healthy["first_anomaly"] is None


def test_inf_trigger_word_only_hits_prompts_with_the_word(demo_loaded, runs_dir: Path) -> None:
    hit = _run(demo_loaded, runs_dir, "a purple cross on a yellow background", "inf-trigger-word", steps=2)
    assert hit["verdict"]["label"] == "nan"
    assert hit["first_anomaly"] == {"phase": "encode", "step": None, "module": "text_encoder.embeddings", "kind": "inf"}
    miss = _run(demo_loaded, runs_dir, "a red cross on a yellow background", "inf-trigger-word", steps=2)
    assert miss["first_anomaly"] is None and miss["verdict"]["label"] == "ok"
    assert np.isfinite(demo_loaded.pipe.text_encoder.get_input_embeddings().weight.detach().numpy()).all()  # restored


def test_unseeded_noise_makes_the_same_seed_differ(demo_loaded, runs_dir: Path) -> None:
    prompt = "a blue triangle on an orange background"
    a = _run(demo_loaded, runs_dir, prompt, "unseeded-noise", seed=9, steps=2)
    b = _run(demo_loaded, runs_dir, prompt, "unseeded-noise", seed=9, steps=2)
    assert a["verdict"]["label"] == "ok" and b["verdict"]["label"] == "ok"
    ra, rb = RunRecord(Path(a["run_dir"])), RunRecord(Path(b["run_dir"]))
    assert np.array_equal(ra.tensors("initial_noise")["latents"], rb.tensors("initial_noise")["latents"])
    assert not np.array_equal(ra.step_tensors(0)["latents"], rb.step_tensors(0)["latents"])
    # The first statistic to differ between the two runs is the faulty block's output.
    first = next(
        x.module
        for x, y in zip(ra.stats(phase="denoise"), rb.stats(phase="denoise"), strict=True)
        if (x.mean, x.std) != (y.mean, y.std)
    )
    assert first == FAULTS["unseeded-noise"].injected_at


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_faults_leave_nothing_behind(demo_loaded, runs_dir: Path, name: str) -> None:
    # one step: every fault is installed when the run starts and acts at any step count (oom-at-step, which fires
    # at step 2, fired neither at one step nor at two)
    _run(demo_loaded, runs_dir, "a red circle", name, seed=7, steps=1)
    assert_no_leftovers(demo_loaded.pipe)
