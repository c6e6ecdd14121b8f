"""The end of a recorded call in numbers: its verdict (a batch's is the worst of its images'), the batch samples its
first anomaly lies in, the per-sample NaN/Inf table the record keeps, and CONTRACT's `run` dict."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ghostviewer.engine.tracing.tracer import Tracer
from ghostviewer.spec import RunSpec

# Worst first: a batch's verdict is the worst of its images'.
SEVERITY = ("nan", "blank", "noise", "saturated", "color_cast", "off_prompt", "ok")
SAMPLE_NONFINITE = "sample_nonfinite"  # a batch's per-sample NaN/Inf counts (tensors entry; see sample_table)


def worst_verdict(verdicts: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    if not verdicts:
        return None
    rank = {label: i for i, label in enumerate(SEVERITY)}
    return min(verdicts, key=lambda v: rank.get(str(v.get("label")), 0))


def samples_of(first: dict[str, Any], tracer: Tracer, verdicts: list[dict[str, Any]]) -> list[int]:
    """The batch indices the first anomaly lies in: from the per-sample NaN/Inf counts of its output (CPU), else —
    statistics finished on an accelerator — from the images, when one only is NaN. [] when unknown."""
    if first.get("kind") not in ("nan", "inf"):
        return []
    where = (first.get("module"), first.get("phase"), first.get("step"))
    for _seq, module, phase, step, _call, nans, infs in tracer.sample_rows:  # execution order, as the detector's
        if (module, phase, step) == where:
            return [i for i, (a, b) in enumerate(zip(nans, infs, strict=True)) if a or b]
    counts = tracer.first_nonfinite
    if counts is not None and counts[0] == (first["module"], first["step"]):
        return [i for i, n in enumerate(counts[1]) if n]
    nan = [i for i, v in enumerate(verdicts) if v.get("label") == "nan"]
    return nan if len(nan) == 1 and counts is None else []


def sample_table(rows: Sequence[tuple[int, str, str, int | None, int, list[int], list[int]]]) -> dict[str, np.ndarray]:
    """The per-sample NaN/Inf counts as a record's tensors: `seq` (K,) — the statistics row each line belongs to,
    which names its module, phase, step and call —, `nan` and `inf` (K, N), one column per sample."""
    return {"seq": np.asarray([r[0] for r in rows], dtype=np.int64),
            "nan": np.asarray([r[5] for r in rows], dtype=np.int64),
            "inf": np.asarray([r[6] for r in rows], dtype=np.int64)}


def run_summary(
    run_dir: Path | None, settings: RunSpec, verdict: dict | None, anomaly: dict | None, images: list[Path],
    verdicts: list[dict[str, Any]], elapsed: float, warning: dict | None = None,
) -> dict[str, Any]:
    return {
        "run_dir": str(run_dir) if run_dir else None,
        "prompt": settings.prompt,
        "seed": settings.seed,
        "steps": settings.steps,
        "verdict": verdict,
        "first_anomaly": anomaly,
        "first_warning": warning,  # the first benign warning (analysis/anomaly.py), never renamed first_anomaly
        "image": str(images[0]) if images else None,
        "elapsed_s": round(elapsed, 4),
        "images": [str(p) for p in images],
        "verdicts": verdicts,
    }
