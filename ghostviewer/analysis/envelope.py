"""The healthy spread of statistics: per-statistic envelopes, and the subspace healthy channel means lie near.

`Envelope`: per statistic the median, a robust scale (1.4826 × MAD, floored) and the healthy extremes lo/hi;
a value drifts when it leaves [lo − margin × scale, hi + margin × scale], and how far is given in robust
z-units, (value − median) / scale.

`Subspace`: the per-channel means of a module's output over healthy runs do not fill their C-dimensional
space: they vary with a few things (in the demo's decoder, the image's colours), so they lie near a subspace
of a few principal directions. A fault that moves channels in a way no healthy image does (a stray bias on
alternate channels) leaves it, even when every channel on its own stays within its healthy range. The
residual — the distance from the subspace — has its own one-statistic envelope, taken from healthy vectors the
subspace was *not* fitted on (each half of the healthy runs against the other half), so that it is honest
about runs that were not in the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAD_TO_SIGMA = 1.4826
SUBSPACE_VARIANCE = 0.99  # the principal directions kept explain this much of the healthy variance
MAX_DIRECTIONS = 16
MIN_SUBSPACE_RUNS = 16


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message is one line for the user."""


def finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _short(value: float) -> float:
    return float(f"{value:.6g}")


def _numbers(data: Mapping[str, Any], name: str, k: int, where: str) -> tuple[float, ...]:
    row = data.get(name)
    if not isinstance(row, list) or not row or len(row) != k or not all(finite_number(v) for v in row):
        raise BaselineError(f"baseline entry {where}: {name} must be {k} finite numbers")
    return tuple(float(v) for v in row)


@dataclass(frozen=True)
class Envelope:
    """The healthy spread of k statistics: per statistic median, robust scale, healthy min (lo) and max (hi)."""

    median: tuple[float, ...]
    scale: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]

    @classmethod
    def of(cls, samples: np.ndarray, floor: float) -> Envelope:
        """From an (n, k) array of healthy values; `floor` is the smallest scale allowed."""
        median = np.median(samples, axis=0)
        mad = np.median(np.abs(samples - median), axis=0)
        scale = np.maximum(MAD_TO_SIGMA * mad, floor)
        rows = (median, scale, samples.min(axis=0), samples.max(axis=0))
        return cls(*(tuple(_short(float(v)) for v in row) for row in rows))

    def limits(self, margin: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        lower = tuple(lo - margin * s for lo, s in zip(self.lo, self.scale))
        upper = tuple(hi + margin * s for hi, s in zip(self.hi, self.scale))
        return lower, upper

    def z(self, values: Sequence[float]) -> list[float]:
        return [(v - m) / s for v, m, s in zip(values, self.median, self.scale)]

    def excess(self, values: Sequence[float]) -> list[float]:
        """How far each value lies outside [lo, hi], in scale units (0 inside)."""
        return [max(lo - v, v - hi, 0.0) / s for v, lo, hi, s in zip(values, self.lo, self.hi, self.scale)]

    def to_json(self) -> dict[str, list[float]]:
        return {"median": list(self.median), "scale": list(self.scale), "lo": list(self.lo), "hi": list(self.hi)}

    @classmethod
    def from_json(cls, data: Any, k: int | None, where: str) -> Envelope:
        """Validated: k finite numbers per row (k None: any count, the same in every row), scale > 0, lo ≤ hi."""
        if not isinstance(data, Mapping):
            raise BaselineError(f"baseline entry {where} is not an object")
        k = len(data.get("median") or []) if k is None else k
        median, scale, lo, hi = (_numbers(data, name, k, where) for name in ("median", "scale", "lo", "hi"))
        if any(s <= 0 for s in scale) or any(a > b for a, b in zip(lo, hi)):
            raise BaselineError(f"baseline entry {where}: scales must be positive and lo ≤ hi")
        return cls(median, scale, lo, hi)


@dataclass(frozen=True)
class Subspace:
    """Where healthy per-channel mean vectors lie: center (C,), orthonormal basis (C, k), residual envelope."""

    center: np.ndarray
    basis: np.ndarray
    residual: Envelope

    def residual_of(self, vector: Sequence[float]) -> float:
        x = np.asarray(vector, dtype=np.float64) - self.center
        return float(np.linalg.norm(x - self.basis @ (self.basis.T @ x)))

    @staticmethod
    def _fit(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        center = vectors.mean(axis=0)
        _, singular, vt = np.linalg.svd(vectors - center, full_matrices=False)
        energy = singular**2
        total = float(energy.sum())
        k = int(np.searchsorted(np.cumsum(energy) / total, SUBSPACE_VARIANCE) + 1) if total > 0 else 1
        k = max(1, min(k, MAX_DIRECTIONS, vectors.shape[1] - 1, vectors.shape[0] // 4))
        return center, vt[:k].T

    @classmethod
    def fit(cls, vectors: np.ndarray, floor: float) -> Subspace | None:
        """From (n, C) healthy vectors; None when there are too few runs or channels to tell a subspace."""
        n, channels = vectors.shape
        if n < MIN_SUBSPACE_RUNS or channels < 3:
            return None
        half = n // 2
        held_out = []
        for fit_on, judge in ((vectors[:half], vectors[half:]), (vectors[half:], vectors[:half])):
            center, basis = cls._fit(fit_on)
            x = judge - center
            held_out.append(np.linalg.norm(x - (x @ basis) @ basis.T, axis=1))
        center, basis = cls._fit(vectors)
        residual = Envelope.of(np.concatenate(held_out)[:, None], floor)
        return cls(center, basis, residual)

    def to_json(self) -> dict[str, Any]:
        return {"center": [_short(float(v)) for v in self.center],
                "basis": [[_short(float(v)) for v in row] for row in self.basis], **self.residual.to_json()}

    @classmethod
    def from_json(cls, data: Any, channels: int, where: str) -> Subspace:
        if not isinstance(data, Mapping):
            raise BaselineError(f"baseline entry {where}: its subspace is not an object")
        center = np.asarray(_numbers(data, "center", channels, where))
        rows = data.get("basis")
        if not isinstance(rows, list) or len(rows) != channels or not rows or not isinstance(rows[0], list):
            raise BaselineError(f"baseline entry {where}: the subspace basis must have {channels} rows")
        k = len(rows[0])
        basis = np.asarray([_numbers({"row": row}, "row", k, where) for row in rows])
        return cls(center, basis, Envelope.from_json(data, 1, where))
