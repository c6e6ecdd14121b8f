"""The first failure is named apart from earlier benign warnings, in the run JSON, the record and bundles: a
user's hook that NaNs mid-block in an Euler run (whose latents overflow float16 by design at
pipeline.prepare_latents) has first_anomaly the NaN and first_warning the headroom note; an overflow inside a model
(a user's hook scaling a block's output) is a failure, never a benign warning."""

from __future__ import annotations

from pathlib import Path

from ghostviewer import api
from ghostviewer.analysis.symptom import Symptom
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.record import RunRecord

BLOCK = "unet.mid_block.resnets.0"


def test_the_first_failure_and_the_first_warning_are_named_apart(demo_loaded, runs_dir: Path,
                                                                 tmp_path: Path) -> None:
    pipe = demo_loaded.pipe

    def user_hook(_module: object, _args: tuple, output: object) -> object:
        return output + float("nan")

    handle = resolve_module(pipe, BLOCK).register_forward_hook(user_hook)
    try:
        bad = api.run(pipe, "a red circle", steps=2, scheduler="euler", runs_dir=runs_dir)
    finally:
        handle.remove()
    assert bad["first_anomaly"] == {"phase": "denoise", "step": 0, "module": BLOCK, "kind": "nan"}
    assert bad["first_warning"]["module"] == "pipeline.prepare_latents" and bad["first_warning"]["kind"] == "overflow"
    record = RunRecord(bad["run_dir"])
    assert record.first_anomaly == bad["first_anomaly"] and record.first_warning == bad["first_warning"]
    assert record.summary()["first_warning"] == bad["first_warning"]
    symptom = Symptom.of_record(record)
    assert symptom is not None and symptom.anomaly["module"] == BLOCK and symptom.warning == bad["first_warning"]
    api.export([bad["run_dir"]], tmp_path / "bad.zip")
    [entry] = api.inspect(tmp_path / "bad.zip")["runs"]
    assert entry["first_anomaly"] == bad["first_anomaly"] and entry["first_warning"] == bad["first_warning"]


def test_a_models_own_overflow_is_a_failure_not_a_benign_warning(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe

    def user_hook(_module: object, _args: tuple, output: object) -> object:
        return output * 1e6  # finite in float32, past float16's range: a float16 run would be inf here

    handle = resolve_module(pipe, BLOCK).register_forward_hook(user_hook)
    try:
        run = api.run(pipe, "a red circle", steps=2, runs_dir=runs_dir)  # DDIM: no headroom note on the latents
    finally:
        handle.remove()
    assert run["first_anomaly"]["module"] == BLOCK and run["first_anomaly"]["kind"] == "overflow"
    assert run["first_warning"] is None
    symptom = Symptom.of_record(RunRecord(run["run_dir"]))
    assert symptom is not None and symptom.anomaly["module"] == BLOCK  # something to bisect, not a note
