"""Did a replay reproduce its original? Compared from the two records alone: latents step by step, then the
final image, bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ghostviewer.record import RunRecord


def same_bits(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _pixels(record: RunRecord) -> np.ndarray | None:
    path = record.image_path("final")
    if path is None:
        return None
    with Image.open(path) as image:
        return np.asarray(image.convert("RGBA"))


def compare_runs(original: str | Path, replay: str | Path) -> dict[str, Any]:
    """{"reproduced", "seed", "steps", "first_divergence": None | {"phase", "step", "what"}, ...}."""
    a, b = RunRecord(original), RunRecord(replay)
    result: dict[str, Any] = {"original": str(a.path), "replay": str(b.path), "seed": a.settings.get("seed"),
                              "reproduced": False, "first_divergence": None}
    steps_a, steps_b = [s.index for s in a.steps()], [s.index for s in b.steps()]
    result["steps"] = len(steps_a)
    for position, step in enumerate(steps_a):
        if position >= len(steps_b) or steps_b[position] != step:
            result["first_divergence"] = {"phase": "denoise", "step": step, "what": "step missing in the replay"}
            return result
        ta, tb = a.step_tensors(step), b.step_tensors(step)
        for name in ("latents", "x0"):
            if not same_bits(ta.get(name), tb.get(name)):
                result["first_divergence"] = {"phase": "denoise", "step": step, "what": name}
                return result
    if len(steps_b) != len(steps_a):
        result["first_divergence"] = {"phase": "denoise", "step": len(steps_a), "what": "extra steps in the replay"}
        return result
    if not same_bits(_pixels(a), _pixels(b)):
        result["first_divergence"] = {"phase": "decode", "step": None, "what": "final image"}
        return result
    result["reproduced"] = True
    return result


def describe_divergence(divergence: dict[str, Any]) -> str:
    if divergence.get("step") is None:
        return f"{divergence.get('what')} ({divergence.get('phase')})"
    return f"{divergence.get('what')} at step {divergence.get('step')}"
