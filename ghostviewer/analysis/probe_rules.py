"""Rules of the model-agnostic probes (`ghostviewer probe`, engine/loops/probe.py): how far two images are apart,
and where two runs of the same call first part beyond a tolerance, module by module — for runs that are not meant
to be bit-identical (float16 against float32, one attention kernel against another), so compare.py's first
divergence (any bit) would name the very first output.

Tolerances were calibrated on the demo (benchmarks/probe_cost.py prints the healthy demo's figures): the healthy
demo passes every probe with room to spare, and each broken case in tests/engine/test_probes.py fails its probe.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ghostviewer.record import StatRow

# Mean absolute difference of two final images (RGB in [0, 1]) below which a change "has no effect": under one
# grey level in 255 on average (PNG rounding alone moves none). Healthy demo: prompt 0.2, negative and guidance
# ~0.05, seed ~0.1 (see probe_cost.py).
NO_EFFECT = 1.0 / 255
# float16 against float32 (healthy demo: ~0.003) and the SDPA math kernel against the default one (~0).
FP16_AGREEMENT = 0.02
BACKEND_AGREEMENT = 0.01
# Convergence: doubling the steps again must bring the image closer (d(S, 2S) < CONVERGES · d(S/2, S)), or the
# two must already agree within CONVERGED.
CONVERGES = 0.9
CONVERGED = 0.01
# A module's output parts from the other run's when its mean or std moves by more than this many of its stds.
MODULE_DEPARTURE = 0.1


def image_difference(a: np.ndarray | None, b: np.ndarray | None) -> float | None:
    """Mean absolute difference of two images of the same shape (values in [0, 1]); None if either is missing or
    their shapes differ."""
    if a is None or b is None or a.shape != b.shape:
        return None
    return float(np.mean(np.abs(a.astype(np.float32) - b.astype(np.float32))))


def departure(a: StatRow, b: StatRow) -> float:
    """How far one output's statistics moved, in its own stds; inf when NaN or inf counts differ."""
    if a.nan_count != b.nan_count or a.inf_count != b.inf_count:
        return math.inf
    values = (a.mean, a.std, b.mean, b.std)
    if not all(math.isfinite(v) for v in values):
        return 0.0 if (a.mean, a.std) == (b.mean, b.std) else math.inf
    scale = max(a.std, b.std, 1e-6)
    return max(abs(a.mean - b.mean), abs(a.std - b.std)) / scale


def first_departure(
    rows_a: list[StatRow], rows_b: list[StatRow], tolerance: float = MODULE_DEPARTURE
) -> dict[str, Any] | None:
    """The earliest output (in A's execution order) whose statistics part beyond `tolerance`:
    {"phase", "step", "module", "departure", "a": {mean, std, absmax}, "b": {…}}; None when none does."""
    by_key = {(r.phase, r.step, r.module, r.call): r for r in rows_b}
    for row in rows_a:
        other = by_key.get((row.phase, row.step, row.module, row.call))
        if other is None:
            continue
        amount = departure(row, other)
        if amount > tolerance:
            return {"phase": row.phase, "step": row.step, "module": row.module,
                    "departure": None if math.isinf(amount) else round(amount, 6),
                    "a": _stats(row), "b": _stats(other)}
    return None


def largest_departure(rows_a: list[StatRow], rows_b: list[StatRow]) -> float:
    """The largest finite departure over all matched outputs (how close a passing pair came to the tolerance)."""
    by_key = {(r.phase, r.step, r.module, r.call): r for r in rows_b}
    amounts = [departure(r, o) for r in rows_a if (o := by_key.get((r.phase, r.step, r.module, r.call)))]
    finite = [a for a in amounts if math.isfinite(a)]
    return max(finite, default=0.0)


def _stats(row: StatRow) -> dict[str, Any]:
    def clean(v: float) -> float | None:
        return float(v) if math.isfinite(v) else None

    return {"mean": clean(row.mean), "std": clean(row.std), "absmax": clean(row.absmax),
            "nan_count": int(row.nan_count), "inf_count": int(row.inf_count), "dtype": row.dtype}


def converges(d_first: float | None, d_second: float | None) -> bool:
    """d(S/2, S) and d(S, 2S): the image settles as steps grow."""
    if d_first is None or d_second is None:
        return False
    return d_second <= CONVERGED or d_second < CONVERGES * d_first
