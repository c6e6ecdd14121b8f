"""The caller's own step callback (callback_on_step_end) is code of theirs between two steps: latents it spoils are
named there — `pipeline.callback_on_step_end` at that step — not at the next step's first module; a callback that
hands the latents back unchanged leaves the verdict and the call's output as they are, its rows no difference to a
replay made without it; a bug report's isolation says the bad tensor is the callback's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import ghostviewer
from ghostviewer import api
from ghostviewer.record import RunRecord

PROMPT = "a red circle on a blue background, top left"
CALLBACK = "pipeline.callback_on_step_end"


def _call(pipe, callback, seed: int = 3):  # noqa: ANN001
    return pipe(PROMPT, num_inference_steps=4, generator=torch.Generator().manual_seed(seed), output_type="np",
                callback_on_step_end=callback)


def _nan_at(step: int):  # noqa: ANN202
    def callback(_pipe, index, _timestep, tensors):  # noqa: ANN001, ANN202
        return {"latents": tensors["latents"] * float("nan")} if index == step else tensors
    return callback


def test_latents_the_callback_spoils_are_named_at_the_callback(demo_loaded, runs_dir: Path) -> None:  # noqa: ANN001
    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        _call(pipe, _nan_at(2))
    (run,) = watcher.runs
    assert run["first_anomaly"] == {"phase": "denoise", "step": 2, "module": CALLBACK, "kind": "nan"}
    record = RunRecord(run["run_dir"])
    rows = [r for r in record.stats() if r.module == CALLBACK]
    assert [r.step for r in rows] == [0, 1, 2, 3] and rows[1].nan_count == 0 and rows[2].nan_count > 0
    bundle = api.export(run["run_dir"], runs_dir / "bug.zip", with_inputs=True, pipeline=pipe)
    assert "made by your own step callback (callback_on_step_end), not by a module" in str(bundle["runs"])


def test_a_callback_that_changes_nothing_changes_nothing(demo_loaded, runs_dir: Path) -> None:  # noqa: ANN001
    pipe = demo_loaded.pipe
    plain = _call(pipe, lambda _p, _i, _t, tensors: tensors).images
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        watched = _call(pipe, lambda _p, _i, _t, tensors: tensors).images
    (run,) = watcher.runs
    assert np.array_equal(plain, watched) and run["verdict"]["label"] == "ok" and run["first_anomaly"] is None
    report = api.replay(run["run_dir"], pipeline=pipe, runs_dir=runs_dir)  # re-issued without the callback
    assert report["left_out"] == ["callback_on_step_end"] and report["reproduced"]
