"""A real run written by RunWriter (steps of latents, a PNG, optionally a tensors file of the older layout) and a
real bundle of it: what the hostile-input properties damage, replace or point links at."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ghostviewer.record import RunWriter, StepInfo
from ghostviewer.record.bundle import export_bundle


def made_run(root: Path, steps: int = 2, side: int = 4, old_tensors: bool = True) -> tuple[Path, Path]:
    """(run folder `root/runs/good`, its bundle `root/good.zip`)."""
    with RunWriter.create(root / "runs", {"prompt": "p", "seed": 1, "steps": steps}, {}, run_id="good") as writer:
        for step in range(steps):
            writer.add_step(StepInfo(step, 900.0 - step, None, 0.01, None, None, None, "rss"),
                            {"latents": np.full((1, 4, side, side), step, np.float32)})
        if old_tensors:
            writer.save_tensors("initial_noise", {"x": np.ones(4, np.float32)})  # tensors/initial_noise.safetensors
        writer.save_image("final", np.zeros((8, 8, 3), np.float32))
    bundle = root / "good.zip"
    export_bundle([writer.path], bundle)
    return writer.path, bundle
