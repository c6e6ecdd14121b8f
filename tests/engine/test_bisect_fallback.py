"""Bisection that reaches back a step: a user's fault at step k caused by a block's output at step k − 1.

The user's code (two forward hooks of their own, never the ghost lab): their last up-block resnet turns ×10 loud
from the middle of the schedule on (silent in the image: the output head's GroupNorm takes the scale away), and
their input hook on `unet.conv_in` — a cache-like check of the features the previous step left before the output
head — blows up once those were past a threshold. So the first anomaly is conv_in at step 4, no bypassable block
runs before it in that step, bypassing from step 4 cannot help, and bypassing the resnet from step 3 does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.cli.bisect import _trial_line
from ghostviewer.engine.tracing.blocks import resolve_module
from tests.engine.test_runner import assert_no_leftovers

STAR = "a yellow star on a black background"
STEPS = 6  # DDIM trailing: timesteps 999 832 666 499 332 166
LOUD = "unet.up_blocks.2.resnets.1"
THRESHOLD = 40.0  # the head's input: at most 24.3 in a healthy run (step 0), 79 once the resnet is loud


@pytest.fixture
def previous_step_fault(demo_loaded) -> Iterator[object]:
    pipe = demo_loaded.pipe
    seen = {"t": 999.0, "head": 0.0}

    def timestep(_unet: object, args: tuple, kwargs: dict) -> None:
        seen["t"] = float(args[1] if len(args) > 1 else kwargs["timestep"])

    def loud(_module: object, _args: tuple, output: object) -> object:
        return output * 10.0 if seen["t"] < 550 else output  # steps 3 … 5

    def head(_module: object, args: tuple) -> None:
        seen["head"] = float(args[0].abs().max())  # what the previous block handed on, bypassed or not

    def stale(_module: object, _args: tuple, output: object) -> object:
        return output * float("inf") if seen["head"] > THRESHOLD else output

    handles = [pipe.unet.register_forward_pre_hook(timestep, with_kwargs=True),
               resolve_module(pipe, LOUD).register_forward_hook(loud),
               pipe.unet.conv_norm_out.register_forward_pre_hook(head),
               pipe.unet.conv_in.register_forward_hook(stale)]
    yield pipe
    for handle in handles:
        handle.remove()
    assert_no_leftovers(pipe)


def test_a_fault_fed_by_the_previous_step_is_found_by_bypassing_from_that_step(
    previous_step_fault, runs_dir: Path
) -> None:
    pipe = previous_step_fault
    bad = api.run(pipe, STAR, steps=STEPS, runs_dir=runs_dir)
    anomaly = bad["first_anomaly"]
    assert (anomaly["module"], anomaly["step"], anomaly["kind"]) == ("unet.conv_in", 4, "inf")
    result = api.bisect(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    assert result["culprit"] == LOUD, result.get("reason")
    assert result["from_step"] == 3 and result["searched_from"] == [4, 3, 2, None]
    bypasses = [e for e in result["trail"] if e["bypassed"]]  # and one unchanged re-run: does it come back?
    assert bypasses and all(e.get("from_step") == 3 for e in bypasses), result["trail"]  # never a whole run
    assert "from step 3 ->" in _trial_line(bypasses[0])  # as `ghostviewer bisect` prints it
    # it runs after the anomaly in step 4: named only because patching from step 2 into 3 on confirms it
    patching = result["patching"]
    assert patching["symptom"] is False and patching["calls_patched"] > 0 and "step 2" in patching["reference"]
