"""Bisection on faults users make themselves (their own forward hooks), never the ghost lab: a fault that
depends on the trajectory (a threshold on the latents), and the same fault on two layers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.analysis.bisect_plan import after_in_step
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.record import RunRecord
from tests.engine.test_runner import assert_no_leftovers

STAR = "a yellow star on a black background"
STEPS = 10
THRESHOLD = 4.12  # the demo's latents for STAR, seed 0, 10 steps: absmax 4.10 at step 0, first above at step 5


@pytest.fixture
def threshold_hook(demo_loaded) -> Iterator[object]:
    """A user's hook: mid_block.resnets.0 turns its output to inf once the latents grow past a threshold."""
    pipe = demo_loaded.pipe
    seen = {"absmax": 0.0}

    def watch(_unet: object, args: tuple, kwargs: dict) -> None:
        sample = args[0] if args else kwargs["sample"]
        seen["absmax"] = float(sample.abs().max())

    def blow_up(_module: object, _args: tuple, output: object) -> object:
        return output * float("inf") if seen["absmax"] > THRESHOLD else output

    handles = [pipe.unet.register_forward_pre_hook(watch, with_kwargs=True),
               resolve_module(pipe, "unet.mid_block.resnets.0").register_forward_hook(blow_up)]
    yield pipe
    for handle in handles:
        handle.remove()
    assert_no_leftovers(pipe)  # nothing of the bisection's own left on the user's pipeline


def test_a_trajectory_fault_is_bisected_from_its_step_and_never_blamed_downstream(
    threshold_hook, runs_dir: Path
) -> None:
    pipe = threshold_hook
    bad = api.run(pipe, STAR, steps=STEPS, runs_dir=runs_dir)
    anomaly = bad["first_anomaly"]
    assert (anomaly["module"], anomaly["step"], anomaly["kind"]) == ("unet.mid_block.resnets.0", 5, "inf")
    later = after_in_step(RunRecord(bad["run_dir"]).stats(), anomaly)
    assert "unet.up_blocks.0.resnets.0" in later and "unet.mid_block.resnets.0" not in later
    result = api.bisect(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    assert result["culprit"] == "unet.mid_block.resnets.0", result["trail"]
    assert result["from_step"] == 5
    assert all(e.get("from_step") == 5 for e in result["trail"]), result["trail"]
    assert result["reruns"] <= result["budget"]
    # confirmed by patching from the bad run's own healthy step 4, no reference run needed
    patching = result["patching"]
    assert patching["symptom"] is False and patching["healthy"] is True and patching["calls_patched"] > 0
    assert "step 4" in patching["reference"] and patching["reference_run_dir"] is None


def test_the_same_fault_on_two_layers_is_more_than_one_block(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    blocks = ["unet.mid_block.resnets.0", "unet.mid_block.resnets.1"]
    handles = [resolve_module(pipe, name).register_forward_hook(lambda _m, _a, out: out + float("nan"))
               for name in blocks]
    try:
        bad = api.run(pipe, STAR, steps=2, runs_dir=runs_dir)
        result = api.bisect(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        for handle in handles:
            handle.remove()
    assert result["culprit"] is None and result["culprits"] == blocks, result["trail"]
    assert result["reason"].startswith("more than one block") and all(b in result["reason"] for b in blocks)
    assert "down_blocks" not in result["reason"]  # no innocent upstream block blamed
    assert_no_leftovers(pipe)
