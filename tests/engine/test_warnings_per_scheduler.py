"""The float16-headroom note on latents is benign only where the scheduler makes them large: the rule is the
scheduler's own init_noise_sigma (recorded with the run), never a list of names. Euler and Euler ancestral scale
the demo's initial noise by ~2·10⁴ (a warning, the run healthy); DDIM keeps unit latents, so latents past float16's
range there — a user's wrapper of scheduler.step — are a failure, as are Euler latents far past their sigma."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from diffusers import EulerDiscreteScheduler

from ghostviewer import api
from ghostviewer.analysis.anomaly import HEADROOM_SIGMAS, is_warning
from ghostviewer.analysis.symptom import Symptom
from ghostviewer.record import RunRecord


def test_the_rule_is_the_schedulers_sigma() -> None:
    assert is_warning("overflow", "pipeline.prepare_latents", 8e4, 2e4)
    assert not is_warning("overflow", "pipeline.prepare_latents", 8e4, 1.0)  # DDIM, PNDM: unit latents
    assert not is_warning("overflow", "scheduler.step", HEADROOM_SIGMAS * 2e4 * 1.5, 2e4)  # far past the sigma
    assert not is_warning("overflow", "unet.conv_in", 8e4, 2e4)  # a model's output is never the latents
    assert is_warning("overflow", "scheduler.step", 8e4, None)  # a record from before the sigma was recorded


@pytest.mark.parametrize("scheduler", ["euler", "euler_a"])
def test_sigma_scaled_latents_are_a_warning_never_a_symptom(demo_loaded, runs_dir: Path, scheduler: str) -> None:
    run = api.run(demo_loaded.pipe, "a red circle", steps=2, scheduler=scheduler, runs_dir=runs_dir)
    record = RunRecord(run["run_dir"])
    assert record.environment["latents"]["init_noise_sigma"] > 1e4  # the scheduler's init_noise_sigma, as it ran
    assert run["verdict"]["label"] == "ok"
    assert run["first_warning"]["module"] == "pipeline.prepare_latents"
    assert run["first_warning"]["kind"] == "overflow"
    assert Symptom.of_record(record) is None  # nothing to bisect


@pytest.fixture
def loud_steps(demo_loaded) -> Iterator[dict[str, Any]]:
    """A user's wrapper of their scheduler's step that scales the latents it returns (`factor`, from step 1)."""
    pipe = demo_loaded.pipe
    original_scheduler = pipe.scheduler
    state: dict[str, Any] = {"factor": 1.0, "calls": 0}

    def wrap(scheduler: Any) -> None:
        step = scheduler.step

        def loud(*args: Any, **kwargs: Any) -> Any:
            out = step(*args, **kwargs)
            state["calls"] += 1
            factor = state["factor"] if state["calls"] > 1 else 1.0
            return (out[0] * factor, *out[1:]) if isinstance(out, tuple) else out

        scheduler.step = loud

    state["wrap"] = wrap
    yield state
    pipe.scheduler = original_scheduler
    vars(original_scheduler).pop("step", None)


def test_ddim_latents_past_float16_are_a_failure(demo_loaded, loud_steps: dict[str, Any], runs_dir: Path) -> None:
    loud_steps["wrap"](demo_loaded.pipe.scheduler)
    loud_steps["factor"] = 1e5  # the demo's DDIM latents are ~12: 1.2·10⁶
    run = api.run(demo_loaded.pipe, "a red circle", steps=3, runs_dir=runs_dir)
    record = RunRecord(run["run_dir"])
    assert record.environment["latents"]["init_noise_sigma"] == 1.0
    assert run["first_anomaly"] == {"phase": "denoise", "step": 1, "module": "scheduler.step", "kind": "overflow"}
    assert run["first_warning"] is None
    symptom = Symptom.of_record(record)
    assert symptom is not None and symptom.anomaly["module"] == "scheduler.step"


def test_euler_latents_far_past_their_sigma_are_a_failure(demo_loaded, loud_steps: dict[str, Any],
                                                         runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
    loud_steps["wrap"](pipe.scheduler)
    loud_steps["factor"] = 1e5  # Euler's latents after step 0 are ~8: 8·10⁵, past 10 × its sigma of 2·10⁴
    run = api.run(pipe, "a red circle", steps=3, runs_dir=runs_dir)
    assert run["first_warning"]["module"] == "pipeline.prepare_latents"  # large by design: the note
    assert run["first_anomaly"]["module"] == "scheduler.step" and run["first_anomaly"]["kind"] == "overflow"
    symptom = Symptom.of_record(RunRecord(run["run_dir"]))
    assert symptom is not None and symptom.anomaly["module"] == "scheduler.step"
