"""Compare says why: two runs that differ only in the scheduler's config (set by the user on the pipeline) or
in its class name the config keys that differ in settings_diff."""

from __future__ import annotations

from pathlib import Path

from diffusers import DDIMScheduler

from ghostviewer import api


def test_compare_names_the_scheduler_config_key_and_class_that_differ(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    original = pipe.scheduler
    a = api.run(pipe, "a red circle", steps=3, runs_dir=runs_dir)
    try:
        pipe.scheduler = DDIMScheduler.from_config(original.config, timestep_spacing="leading")
        b = api.run(pipe, "a red circle", steps=3, runs_dir=runs_dir)
    finally:
        pipe.scheduler = original
    c = api.run(pipe, "a red circle", steps=3, scheduler="euler", runs_dir=runs_dir)
    same_name = api.compare(a["run_dir"], b["run_dir"])
    assert same_name["same"] is False
    assert same_name["settings_diff"] == {"scheduler.timestep_spacing": ["trailing", "leading"]}
    other = api.compare(a["run_dir"], c["run_dir"])["settings_diff"]
    assert other["scheduler.class"] == ["DDIMScheduler", "EulerDiscreteScheduler"] and "scheduler" in other
