"""Silent ghosts: faults with no NaN and no inf, flagged only against the baseline or the prompt, and located.

The demo's shipped baseline (resources/baselines/) is found by the runner at the demo's default settings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ghostviewer.engine.faults import FAULTS
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec
from tests.engine.test_runner import assert_no_leftovers

PROMPT = "a yellow circle on a blue background"
LOCATED = ("decoder-color-shift", "scaled-block")  # sitting in a traced module: the first anomaly names it


@pytest.fixture(scope="module")
def made(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict]:  # noqa: ANN001
    """made(fault, seed): the run at the demo's default settings, made once for the module (the tests only read it)."""
    runs_dir, results = tmp_path_factory.mktemp("silent-ghosts"), {}

    def run(fault: str | None, seed: int = 21) -> dict:
        if (fault, seed) not in results:
            faults = (fault,) if fault else ()
            results[fault, seed] = execute_run(demo_loaded, RunSpec(prompt=PROMPT, seed=seed, faults=faults), runs_dir)
        return results[fault, seed]

    return run


def test_the_healthy_run_uses_the_shipped_baseline_and_is_not_flagged(demo_loaded, made: Callable[..., dict]) -> None:
    result = made(None)
    assert result["verdict"]["label"] == "ok" and result["first_anomaly"] is None
    assert result["verdict"]["scores"]["off_prompt"] == 0.0 and result["verdict"]["scores"]["color_z"] == 0.0
    events = {e.kind: e for e in RunRecord(Path(result["run_dir"])).events()}
    assert events["baseline"].message.startswith("using baseline") and "resources" in events["baseline"].message
    assert events["baseline"].data["baseline"]


@pytest.mark.parametrize("fault", LOCATED)
def test_silent_fault_is_flagged_and_located(demo_loaded, made: Callable[..., dict], fault: str) -> None:
    result = made(fault)
    verdict, anomaly = result["verdict"], result["first_anomaly"]
    assert verdict["scores"]["nan_fraction"] == 0.0  # silent: a clean, finite image
    assert verdict["label"] in ("ok", "off_prompt", "color_cast")  # the image alone does not tell it
    assert verdict["label"] != "ok" or anomaly is not None  # ... but the run is flagged
    assert anomaly is not None and anomaly["kind"] == "drift", anomaly
    assert anomaly["module"] == FAULTS[fault].injected_at
    assert abs(anomaly["z"]) > 6 and anomaly["stat"]
    assert_no_leftovers(demo_loaded.pipe)


def test_the_prompt_ignoring_ghost_is_off_prompt(demo_loaded, made: Callable[..., dict]) -> None:
    """It sits at the U-Net's input, which is not a traced module: the prompt check is what tells it."""
    result = made("dead-text-conditioning", seed=3)
    assert result["verdict"]["label"] == "off_prompt" and "the prompt asks for" in result["verdict"]["reason"]
    assert result["verdict"]["scores"]["nan_fraction"] == 0.0
    anomaly = result["first_anomaly"]
    assert anomaly is None or anomaly["module"].startswith(("unet.", "pipeline.", "scheduler.", "vae."))
    assert FAULTS["dead-text-conditioning"].injected_at == "unet"
    assert_no_leftovers(demo_loaded.pipe)


def test_the_decoder_colour_shift_is_named_by_its_channels(demo_loaded, made: Callable[..., dict]) -> None:
    result = made("decoder-color-shift")
    assert result["first_anomaly"]["phase"] == "decode"
    assert result["first_anomaly"]["stat"] in ("channel_residual",) or "channel_mean" in result["first_anomaly"]["stat"]
