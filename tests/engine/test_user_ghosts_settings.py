"""No silent setting: a pipeline object the user hands over runs as it is, and a dtype or device it is not in is
refused in one line — never recorded as if it had run."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.engine.errors import GhostError


def test_a_dtype_the_object_is_not_in_is_refused_not_recorded(demo_loaded, runs_dir: Path) -> None:
    with pytest.raises(GhostError) as caught:
        api.run(demo_loaded.pipe, "a red circle", steps=2, dtype="float16", runs_dir=runs_dir)
    message = str(caught.value)
    assert "\n" not in message and "float16" in message and "unet is float32" in message
    assert not any(runs_dir.iterdir())  # nothing recorded


def test_a_device_the_object_is_not_on_is_refused(demo_loaded, runs_dir: Path) -> None:
    with pytest.raises(GhostError, match="device 'cuda' cannot be applied"):
        api.run(demo_loaded.pipe, "a red circle", steps=2, device="cuda", runs_dir=runs_dir)


def test_the_dtype_the_object_is_in_runs_and_a_scheduler_is_applied(demo_loaded, runs_dir: Path) -> None:
    result = api.run(demo_loaded.pipe, "a red circle", steps=2, dtype="float32", scheduler="euler",
                     runs_dir=runs_dir)
    from ghostviewer.record import RunRecord

    record = RunRecord(result["run_dir"])
    assert record.settings["dtype"] == "float32" and record.settings["scheduler"] == "euler"
    assert type(demo_loaded.pipe.scheduler).__name__ == "DDIMScheduler"  # the run's scheduler did not leak


def test_a_warning_is_never_the_symptom_and_settings_bisection_finds_both_settings(
    demo_loaded, runs_dir: Path
) -> None:
    """A user's hook that NaNs with Euler at 8 steps or more: every Euler run of the demo also shows the benign
    float16-headroom overflow at pipeline.prepare_latents first, which must not count as 'still failing'."""
    from ghostviewer.analysis.symptom import Symptom
    from ghostviewer.engine.tracing.blocks import resolve_module
    from ghostviewer.record import RunRecord

    pipe = demo_loaded.pipe

    def user_hook(_module: object, _args: tuple, output: object) -> object:
        euler = type(pipe.scheduler).__name__ == "EulerDiscreteScheduler"
        return output + float("nan") if euler and len(pipe.scheduler.timesteps) >= 8 else output

    handle = resolve_module(pipe, "unet.mid_block.resnets.0").register_forward_hook(user_hook)
    try:
        healthy = api.run(pipe, "a red circle", steps=4, scheduler="euler", runs_dir=runs_dir)
        assert healthy["verdict"]["label"] == "ok" and healthy["first_anomaly"]["kind"] == "overflow"
        assert Symptom.of_record(RunRecord(healthy["run_dir"])) is None  # a warning alone: nothing to bisect
        good = api.run(pipe, "a red circle", steps=4, runs_dir=runs_dir)
        bad = api.run(pipe, "a red circle", steps=8, scheduler="euler", runs_dir=runs_dir)
        assert bad["first_anomaly"]["kind"] == "nan" and bad["verdict"]["label"] == "nan"  # the failure, named
        assert bad["first_warning"]["module"] == "pipeline.prepare_latents"  # the benign note, apart
        result = api.bisect(bad["run_dir"], settings=good["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert sorted(result["culprit_settings"]) == ["scheduler", "steps"], result["trail"]
    assert result["first_warning"]["module"] == "pipeline.prepare_latents"
    assert "nan at unet.mid_block.resnets.0" in result["symptom"]
