"""Everything downstream on a watched run, on the real demo pipeline: replay re-issues the recorded call (img2img,
a batch, from the folder it was loaded from), bisection and isolation re-issue it where they re-run, and a watch
study's summary rows (healthy calls not kept) are read, compared, inspected and exported without a traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import StableDiffusionImg2ImgPipeline
from PIL import Image

import ghostviewer
from ghostviewer import api
from ghostviewer.engine.errors import GhostError
from ghostviewer.record import RunRecord
from tests.engine.test_runner import assert_no_leftovers

PROMPT = "a red circle on a blue background, top left"
INIT = Image.fromarray(np.full((64, 64, 3), (200, 40, 40), np.uint8))


def _watched(pipe, runs_dir: Path, **kwargs) -> dict:
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        pipe(PROMPT, generator=torch.Generator().manual_seed(3), output_type="np", **kwargs)
    (run,) = watcher.runs
    return run


def test_a_watched_img2img_call_replays_bit_identical_on_the_callers_pipeline(demo_loaded, runs_dir: Path) -> None:
    pipe = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
    run = _watched(pipe, runs_dir, image=INIT, strength=0.5, num_inference_steps=4)
    report = api.replay(run["run_dir"], times=2, pipeline=pipe)
    assert report["reproduced"] and report["reproduced_runs"] == 2 and report["first_divergence"] is None
    assert report["reissued"] and report["left_out"] == []
    again = RunRecord(report["runs"][0]["run_dir"])
    assert again.call["kwargs"]["strength"] == 0.5 and again.settings["kind"] == "img2img"
    assert [s.index for s in again.steps()] == [0, 1]  # strength 0.5 of 4 steps
    assert np.array_equal(np.asarray(Image.open(report["runs"][0]["run_dir"] + "/images/final.png")),
                          np.asarray(Image.open(run["run_dir"] + "/images/final.png")))
    assert_no_leftovers(pipe)


def test_a_watched_batch_of_two_replays_from_the_folder_it_was_loaded_from(demo_loaded, runs_dir: Path) -> None:
    run = _watched(demo_loaded.pipe, runs_dir, num_images_per_prompt=2, num_inference_steps=3)
    assert RunRecord(run["run_dir"]).settings["source"].endswith("demo-pipeline")  # a folder: no pipeline= needed
    report = api.replay(run["run_dir"], times=1)
    assert report["reproduced"], report["first_divergence"]
    assert len(RunRecord(report["runs"][0]["run_dir"]).verdicts) == 2


def test_a_left_out_callback_is_said_and_an_in_memory_run_needs_its_pipeline(demo_loaded, runs_dir: Path) -> None:
    pipe = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
    pipe.register_to_config(_name_or_path="")  # as if built in memory: the record names no folder
    run = _watched(pipe, runs_dir, image=INIT, strength=0.5, num_inference_steps=4,
                   callback_on_step_end=lambda _p, _i, _t, tensors: tensors)
    with pytest.raises(GhostError, match="pass the same object as pipeline="):
        api.replay(run["run_dir"])
    report = api.replay(run["run_dir"], pipeline=pipe)
    assert report["left_out"] == ["callback_on_step_end"] and "not recorded" in report["summary"]
    assert report["reproduced"]  # the callback returned the tensors unchanged


def test_a_watched_call_without_a_generator_is_refused_in_one_line(demo_loaded, runs_dir: Path) -> None:
    with ghostviewer.watch(demo_loaded.pipe, runs_dir=runs_dir) as watcher:
        demo_loaded.pipe(PROMPT, num_inference_steps=2, output_type="np")
    with pytest.raises(GhostError, match="no generator and no latents") as refused:
        api.replay(watcher.runs[0]["run_dir"], pipeline=demo_loaded.pipe)
    assert "\n" not in str(refused.value)


def test_bisect_of_a_watched_call_names_the_block_the_users_hook_makes_nan(demo_loaded, runs_dir: Path) -> None:
    from ghostviewer.engine.tracing.blocks import resolve_module

    pipe = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
    hooked = "unet.mid_block.resnets.1.conv2"
    handle = resolve_module(pipe, hooked).register_forward_hook(lambda _m, _a, out: out + float("nan"))
    try:
        run = _watched(pipe, runs_dir, image=INIT, strength=0.5, num_inference_steps=4)
        assert run["first_anomaly"]["module"].startswith("unet.mid_block")
        result = api.bisect(run["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert result["culprit"] == "unet.mid_block.resnets.1", result["trail"]
    trial = RunRecord(result["trail"][0]["run_dir"])
    assert trial.call["kind"] == "img2img" and trial.settings["bypass"]  # the call re-issued, with a bypass
    assert [s.index for s in trial.steps()] == [0, 1]  # strength 0.5 of 4 steps, as the call made
    assert_no_leftovers(pipe)


def test_isolate_captures_the_blocks_real_inputs_from_the_reissued_call(demo_loaded, runs_dir: Path,
                                                                       tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    pipe = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
    run = _watched(pipe, runs_dir, image=INIT, strength=0.5, num_inference_steps=4)
    result = api.isolate(run["run_dir"], module="unet.mid_block", step=1, out=tmp_path / "iso", pipeline=pipe)
    assert result["rebuildable"] and result["step"] == 1
    inputs = load_file(str(tmp_path / "iso" / "inputs.safetensors"))
    assert next(v for v in inputs.values() if v.ndim == 4).shape[0] == 2  # the call's guided batch
    # the block's output in the capture is the watched call's own at that step (the img2img call, re-issued)
    (row,) = RunRecord(run["run_dir"]).stats("unet.mid_block", phase="denoise", step=1)
    assert result["output"]["mean"] == pytest.approx(row.mean, rel=1e-5, abs=1e-6)
    assert result["output"]["std"] == pytest.approx(row.std, rel=1e-4)
    assert_no_leftovers(pipe)


def test_a_watch_studys_summary_rows_are_read_compared_inspected_and_exported(demo_loaded, runs_dir: Path,
                                                                             tmp_path: Path) -> None:
    from ghostviewer.cli import main
    from ghostviewer.record import StudyRecord, list_entries

    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=runs_dir, keep="anomalies") as watcher:
        pipe(PROMPT, num_inference_steps=20, generator=torch.Generator().manual_seed(3), output_type="np")
        pipe(PROMPT, num_inference_steps=2, output_type="np", latents=torch.full((1, 4, 16, 16), float("nan")))
    study = StudyRecord(watcher.summary()["study_dir"])
    summary_row, member = study.runs()
    assert summary_row.role == "summary" and not summary_row.kept and member.kept
    assert [r.run_dir for r in study.kept_runs()] == [member.run_dir]
    assert [r["kept"] for r in study.summary()["runs"]] == [False, True]
    assert [e.path for e in list_entries(runs_dir)] == [study.path]
    for call in (lambda: api.compare(summary_row.run_dir, member.run_dir),
                 lambda: api.export([summary_row.run_dir], tmp_path / "a.zip"),
                 lambda: api.inspect(summary_row.run_dir)):
        with pytest.raises(Exception, match="summary only: not kept") as refused:
            call()
        assert "call 0 of watch study" in str(refused.value) and "\n" not in str(refused.value)
    bundle = api.export(study.path, tmp_path / "study.zip")  # the study's full records: the summary row skipped
    assert [r["run_dir"] for r in bundle["runs"]] == [str(member.run_dir)]
    assert api.inspect(bundle["bundle"])["runs"]
    assert main(["compare", str(summary_row.run_dir), str(member.run_dir)]) == 2  # a usage error, no traceback
