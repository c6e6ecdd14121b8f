"""The verdict in context: the image judged against what this pipeline normally draws and what the prompt asked.

`image_verdict` (analysis/verdicts.py) judges the image alone and stays pure. `verdict_in_context` takes its
result and, only when it says 'ok', adds two checks that need more than the image:

- ``color_cast`` when the image's colour statistics leave the baseline's healthy range (Baseline.image_drift);
  score ``color_z``: the robust z of the statistic furthest out (0.0 inside the range);
- ``off_prompt`` when the prompt names a colour the image does not show (analysis/prompt_check.py, pipelines
  that speak the demo's vocabulary; ``prompt_check``: {"judged", "reason"?} says when a caption falls outside
  what it can judge), or, for other pipelines, when a CLIP image–text score computed by the engine falls below the
  baseline's healthy range; score ``off_prompt``: the fraction of named colours missing.

Labels by priority: the image verdict's own labels > color_cast > off_prompt > ok. Scores are added only for
the checks that ran; ``reason`` (one line) says why a contextual label was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ghostviewer.analysis.baseline import Baseline
from ghostviewer.analysis.prompt_check import outside_judgement, prompt_check


def verdict_in_context(
    verdict: Mapping[str, Any],
    image: np.ndarray,
    prompt: str,
    baseline: Baseline | None = None,
    demo: bool = False,
    extra_image_stats: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """A new verdict dict: `verdict` with the contextual scores added and, when it was 'ok', maybe relabelled."""
    scores = dict(verdict.get("scores") or {})
    result: dict[str, Any] = {**verdict, "scores": scores}
    reasons: list[tuple[str, str]] = []
    if baseline is not None and baseline.image is not None:
        drift = baseline.image_drift(image, extra_image_stats)
        scores["color_z"] = 0.0 if drift is None else round(float(drift[0]), 3)
        if drift is not None:
            z, stat = drift
            if stat == "clip_score":
                reasons.append(("off_prompt", f"CLIP image–text score {z:+.1f} robust z-units off its healthy range"))
            else:
                reasons.append(("color_cast", f"{stat} {z:+.1f} robust z-units off this pipeline's healthy range"))
    if demo:
        check = prompt_check(image, prompt)
        outside = outside_judgement(prompt)
        result["prompt_check"] = {"judged": check is not None, **({"reason": outside} if outside else {})}
        if check is not None:
            scores["off_prompt"] = float(check["score"])  # type: ignore[arg-type]
            if not check["ok"]:
                reasons.append(("off_prompt", str(check["reason"])))
            if check.get("colour_shift") is not None:
                scores["colour_shift"] = float(check["colour_shift"])  # type: ignore[arg-type]
            if check.get("cast"):
                reasons.append(("color_cast", str(check["cast"])))
    if verdict.get("label") == "ok" and reasons:
        label = "color_cast" if any(kind == "color_cast" for kind, _ in reasons) else "off_prompt"
        result["label"] = label
        result["reason"] = "; ".join(text for kind, text in reasons if kind == label)
    return result
