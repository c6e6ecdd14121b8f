"""A reference model side by side: where a suspect run leaves the range of the same call made on a known-good model.

Two healthy models of one architecture (a fine-tune and its base) differ everywhere a little, so this is a
differential diagnosis, not bit equality: each output of the suspect (phase, step, module, call) is set against the
reference's same output, and it *departs* when its std or absmax is more than STD_RATIO / ABSMAX_RATIO times the
reference's (either way), when its mean moves by more than MEAN_SHIFT of the reference's std, or — for encode and
decode outputs — one of its per-channel means does (CHANNEL_SHIFT). The first departure in execution order is where
the suspect leaves the reference's range, and names where the difference starts; what follows inherits it.

Calibration (benchmarks/false_alarms_architecture.py): a differently-trained healthy copy of the demo against the
demo, on healthy prompts and seeds — the healthy worst figures are in that file's docstring; the limits sit above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ghostviewer.record import StatRow

STD_RATIO = 2.0
ABSMAX_RATIO = 2.5
MEAN_SHIFT = 1.0  # in units of the reference output's std
CHANNEL_SHIFT = 1.0  # per-channel means of encode/decode outputs, in units of the reference output's std
# The pipeline's own tensors (pipeline.noise_pred: guidance × (cond − uncond) amplifies every small difference of
# two healthy models; the latents) get wider limits than the traced modules' outputs.
PIPELINE_FACTOR = 2.0
REL_FLOOR = 0.01  # the smallest std/absmax compared, as a fraction of the reference's absmax


def _ratio(value: float, reference: float, floor: float) -> float:
    a, b = max(abs(value), floor), max(abs(reference), floor)
    return a / b


def departure_of(row: StatRow, ref: StatRow, channels: Sequence[float] | None = None,
                 ref_channels: Sequence[float] | None = None) -> dict[str, Any] | None:
    """How `row` departs from the reference's `ref` (same output), the worst statistic first; None when inside."""
    if row.nan_count or row.inf_count:
        return None if (ref.nan_count or ref.inf_count) else {"stat": "nan" if row.nan_count else "inf",
                                                              "ratio": math.inf, "value": None, "reference": None}
    floor = REL_FLOOR * max(abs(ref.absmax), 1e-12)
    scale = max(ref.std, floor)
    found: list[tuple[float, dict[str, Any]]] = []
    wide = PIPELINE_FACTOR if row.module.startswith("pipeline.") else 1.0
    for stat, limit in (("std", STD_RATIO ** wide), ("absmax", ABSMAX_RATIO ** wide)):
        value, reference = getattr(row, stat), getattr(ref, stat)
        ratio = _ratio(value, reference, floor)
        worst = max(ratio, 1 / ratio)
        if worst > limit:
            found.append((worst / limit, {"stat": stat, "ratio": round(ratio, 4), "value": value,
                                          "reference": reference, "limit": limit}))
    shift = abs(row.mean - ref.mean) / scale
    if shift > MEAN_SHIFT * wide:
        found.append((shift / (MEAN_SHIFT * wide), {"stat": "mean", "ratio": round(shift, 4), "value": row.mean,
                                                    "reference": ref.mean, "limit": MEAN_SHIFT * wide,
                                                    "unit": "reference std"}))
    if channels is not None and ref_channels is not None and len(channels) == len(ref_channels):
        moved = np.abs(np.asarray(channels, np.float64) - np.asarray(ref_channels, np.float64)) / scale
        c = int(np.argmax(moved)) if moved.size else 0
        if moved.size and moved[c] > CHANNEL_SHIFT:
            found.append((float(moved[c]) / CHANNEL_SHIFT,
                          {"stat": f"channel_mean[{c}]", "ratio": round(float(moved[c]), 4),
                           "value": float(channels[c]), "reference": float(ref_channels[c]),
                           "limit": CHANNEL_SHIFT, "unit": "reference std"}))
    return max(found, key=lambda item: item[0])[1] if found else None


def first_departure(rows: Iterable[StatRow], reference_rows: Iterable[StatRow],
                    channels: Mapping[tuple[str, str], Sequence[float]] | None = None,
                    reference_channels: Mapping[tuple[str, str], Sequence[float]] | None = None
                    ) -> dict[str, Any] | None:
    """{"phase", "step", "module", "stat", "ratio", "value", "reference", "limit"} of the suspect's first output (in
    execution order) outside the reference's range; None when it never leaves it. Outputs the reference has not
    (another shape, a module it does not call) are not compared."""
    ref = {(r.phase, r.step, r.module, r.call): r for r in reference_rows}
    channels, reference_channels = channels or {}, reference_channels or {}
    for row in sorted(rows, key=lambda r: r.seq):
        other = ref.get((row.phase, row.step, row.module, row.call))
        if other is None or other.shape != row.shape:
            continue
        mine = channels.get((row.phase, row.module)) if row.step is None and row.call == 0 else None
        theirs = reference_channels.get((row.phase, row.module)) if mine is not None else None
        found = departure_of(row, other, mine, theirs)
        if found is not None:
            return {"phase": row.phase, "step": row.step, "module": row.module, **found}
    return None


def headroom(rows: Iterable[StatRow], reference_rows: Iterable[StatRow],
             channels: Mapping[tuple[str, str], Sequence[float]] | None = None,
             reference_channels: Mapping[tuple[str, str], Sequence[float]] | None = None) -> dict[str, float]:
    """For calibration: the largest std/absmax ratio (either way), mean shift and channel shift over all outputs
    (the pipeline's own tensors as 'pipeline_std', … apart), each with where it was."""
    ref = {(r.phase, r.step, r.module, r.call): r for r in reference_rows}
    worst: dict[str, Any] = {}

    def note(stat: str, value: float, row: StatRow) -> None:
        name = f"pipeline_{stat}" if row.module.startswith("pipeline.") else stat
        if value > worst.get(name, (0.0, ""))[0]:
            worst[name] = (value, f"{row.module}@{row.step}")

    channels, reference_channels = channels or {}, reference_channels or {}
    for row in rows:
        other = ref.get((row.phase, row.step, row.module, row.call))
        if other is None or other.shape != row.shape or row.nan_count or row.inf_count:
            continue
        floor = REL_FLOOR * max(abs(other.absmax), 1e-12)
        for stat in ("std", "absmax"):
            ratio = _ratio(getattr(row, stat), getattr(other, stat), floor)
            note(stat, max(ratio, 1 / ratio), row)
        scale = max(other.std, floor)
        note("mean", abs(row.mean - other.mean) / scale, row)
        mine = channels.get((row.phase, row.module)) if row.step is None and row.call == 0 else None
        theirs = reference_channels.get((row.phase, row.module))
        if mine is not None and theirs is not None and len(mine) == len(theirs):
            moved = np.abs(np.asarray(mine, np.float64) - np.asarray(theirs, np.float64)) / scale
            note("channel", float(moved.max(initial=0.0)), row)
    return worst
