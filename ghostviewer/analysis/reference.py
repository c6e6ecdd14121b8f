"""A reference model side by side: where a suspect run leaves the range of the same call made on a known-good model.

Two healthy models of one architecture (a fine-tune and its base) differ everywhere a little, so this is a
differential diagnosis, not bit equality: each output of the suspect (phase, step, module, call) is set against the
reference's same output, and it *departs* when its std or absmax is more than a limit times the reference's
(either way), when its mean moves by more than a limit in units of the reference's std, or — for encode and decode
outputs — one of its per-channel means does; the limits widen as denoising goes (LIMITS). The first departure in
execution order is where the suspect leaves the reference's range: where the difference starts, what follows
inherits it. With the suspect's pipeline at hand, engine/run/reference_lockstep.py first compares the two module by
module on the same inputs, which locates weight edits these statistics cannot (a bias, a gain cut, swapped
channels); this side-by-side comparison is what is reported when it cannot run or finds nothing.

Calibration (benchmarks/false_alarms_architecture.py, 2026-12-01): a differently-trained healthy copy of the demo
(400 more training steps, every weight changed, U-Net by 2.8 % in relative L2) against the demo, 50 healthy calls
(seeds 3000-3049). Healthy worst, by group (module outputs; the pipeline's own tensors apart): encode std/absmax
×1.15, mean 0.03; early std ×2.12, absmax ×2.26, mean 1.07 (noise_pred std ×2.98); middle std ×1.94, absmax ×1.73,
mean 1.22; late std ×1.76, absmax ×1.52, mean 1.4; decode std ×1.71, absmax ×1.54, mean 1.74, channel 3.97. The
limits sit about 1.5× above; held-out figures are in that benchmark's docstring.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ghostviewer.record import StatRow

# Limits by where in the call an output lies: two healthy models given the same noise start alike and drift apart as
# denoising goes (they draw a slightly different image), so later outputs get wider limits. Per group: std and absmax
# ratios (either way), mean and per-channel-mean shifts in units of the reference output's std.
LIMITS: dict[str, dict[str, float]] = {  # about 1.5× the healthy worst of 50 calibration runs (module docstring)
    "encode": {"std": 1.5, "absmax": 1.5, "mean": 0.3, "channel": 1.0},
    "early": {"std": 3.0, "absmax": 3.2, "mean": 1.6, "channel": 1.6},
    "middle": {"std": 2.8, "absmax": 2.6, "mean": 1.8, "channel": 1.8},
    "late": {"std": 2.6, "absmax": 2.3, "mean": 2.1, "channel": 2.1},
    "decode": {"std": 2.5, "absmax": 2.3, "mean": 2.6, "channel": 6.0},
}
# The pipeline's own tensors (pipeline.noise_pred: guidance × (cond − uncond) amplifies every small difference of
# two healthy models; the latents): ratio limits squared, shift limits doubled.
PIPELINE_FACTOR = 2.0
REL_FLOOR = 0.01  # the smallest std/absmax compared, as a fraction of the reference's absmax


def group_of(phase: str, step: int | None, steps: int) -> str:
    """'encode', 'early' (the first quarter of denoising), 'middle', 'late' (the last quarter) or 'decode'."""
    if step is None:
        return "decode" if phase == "decode" else "encode"
    t = step / max(steps, 1)
    return "early" if t < 0.25 else "late" if t >= 0.75 else "middle"


def limits_for(row: StatRow, steps: int) -> dict[str, float]:
    base = LIMITS[group_of(row.phase, row.step, steps)]
    if not row.module.startswith("pipeline."):
        return base
    return {"std": base["std"] ** PIPELINE_FACTOR, "absmax": base["absmax"] ** PIPELINE_FACTOR,
            "mean": base["mean"] * PIPELINE_FACTOR, "channel": base["channel"] * PIPELINE_FACTOR}


def _ratio(value: float, reference: float, floor: float) -> float:
    a, b = max(abs(value), floor), max(abs(reference), floor)
    return a / b


def departure_of(row: StatRow, ref: StatRow, channels: Sequence[float] | None = None,
                 ref_channels: Sequence[float] | None = None, steps: int = 1) -> dict[str, Any] | None:
    """How `row` departs from the reference's `ref` (same output), the worst statistic first; None when inside.
    `steps`: the run's denoising steps (which limits apply, limits_for)."""
    limits = limits_for(row, steps)
    if row.nan_count or row.inf_count:
        return None if (ref.nan_count or ref.inf_count) else {"stat": "nan" if row.nan_count else "inf",
                                                              "ratio": math.inf, "value": None, "reference": None}
    floor = REL_FLOOR * max(abs(ref.absmax), 1e-12)
    scale = max(ref.std, floor)
    found: list[tuple[float, dict[str, Any]]] = []
    for stat in ("std", "absmax"):
        limit = limits[stat]
        value, reference = getattr(row, stat), getattr(ref, stat)
        ratio = _ratio(value, reference, floor)
        worst = max(ratio, 1 / ratio)
        if worst > limit:
            found.append((worst / limit, {"stat": stat, "ratio": round(ratio, 4), "value": value,
                                          "reference": reference, "limit": limit}))
    shift = abs(row.mean - ref.mean) / scale
    if shift > limits["mean"]:
        found.append((shift / limits["mean"], {"stat": "mean", "ratio": round(shift, 4), "value": row.mean,
                                               "reference": ref.mean, "limit": limits["mean"],
                                               "unit": "reference std"}))
    if channels is not None and ref_channels is not None and len(channels) == len(ref_channels):
        moved = np.abs(np.asarray(channels, np.float64) - np.asarray(ref_channels, np.float64)) / scale
        c = int(np.argmax(moved)) if moved.size else 0
        if moved.size and moved[c] > limits["channel"]:
            found.append((float(moved[c]) / limits["channel"],
                          {"stat": f"channel_mean[{c}]", "ratio": round(float(moved[c]), 4),
                           "value": float(channels[c]), "reference": float(ref_channels[c]),
                           "limit": limits["channel"], "unit": "reference std"}))
    return max(found, key=lambda item: item[0])[1] if found else None


# A module's median std ratio over the denoising steps (either way). Healthy worst 1.24 (20 calibration calls,
# unet.up_blocks.0.attentions.0); an edit inside a module moves it 1.25-1.4 (a GroupNorm gain ×0.2, zeroed
# cross-attention) to 1.8-2.1 (a resnet conv ×10): only the last clears a limit with headroom.
PERSISTENT_RATIO = 1.5
MIN_PERSISTENT_STEPS = 4


def _log_ratios(rows: Iterable[StatRow], reference_rows: Iterable[StatRow]
                ) -> dict[tuple[str, int], list[tuple[int, int, float]]]:
    """Per traced denoiser module (and call): (seq, step, log std ratio to the reference) at each step."""
    ref = {(r.phase, r.step, r.module, r.call): r for r in reference_rows}
    ratios: dict[tuple[str, int], list[tuple[int, int, float]]] = {}
    for row in rows:
        if row.phase != "denoise" or row.module.startswith("pipeline.") or row.nan_count or row.inf_count:
            continue
        other = ref.get((row.phase, row.step, row.module, row.call))
        if other is None or other.shape != row.shape:
            continue
        floor = REL_FLOOR * max(abs(other.absmax), 1e-12)
        ratios.setdefault((row.module, row.call), []).append(
            (row.seq, int(row.step or 0), math.log(_ratio(row.std, other.std, floor))))
    return {k: v for k, v in ratios.items() if len(v) >= MIN_PERSISTENT_STEPS}


def persistent_ratios(rows: Iterable[StatRow], reference_rows: Iterable[StatRow]) -> dict[str, float]:
    """{module: its median std ratio to the reference over the denoising steps} (calibration and display)."""
    return {module: math.exp(float(np.median([v for _, _, v in values])))
            for (module, _call), values in _log_ratios(rows, reference_rows).items()}


def persistent_departure(rows: Iterable[StatRow], reference_rows: Iterable[StatRow],
                         limit: float = PERSISTENT_RATIO) -> dict[str, Any] | None:
    """The first module (in the execution order of its first step) whose std stays off the reference's the same
    way over the denoising steps: its median ratio beyond `limit` either way. Two healthy models' outputs differ by a
    few per cent one step this way and the next that; a weight edited into a module (a scaled conv, a cut gain,
    zeroed projections) moves that module's output at every step. None when no module does."""
    found: tuple[int, dict[str, Any]] | None = None
    for (module, _call), values in _log_ratios(rows, reference_rows).items():
        median = float(np.median([v for _, _, v in values]))
        if abs(median) <= math.log(limit):
            continue
        seq, step = min((s, k) for s, k, v in values if abs(v) > math.log(limit) and v * median > 0)
        if found is None or seq < found[0]:
            found = (seq, {"phase": "denoise", "step": step, "module": module, "stat": "std (persistent)",
                           "ratio": round(math.exp(median), 4), "limit": limit})
    return None if found is None else found[1]


def earliest(departures: Iterable[dict[str, Any] | None], rows: Iterable[StatRow]) -> dict[str, Any] | None:
    """Of several departures, the one whose output comes first in the run's execution order."""
    order = {(r.phase, r.step, r.module): r.seq for r in rows if r.call == 0}
    found = [d for d in departures if d is not None]
    return min(found, key=lambda d: order.get((d["phase"], d["step"], d["module"]), 1 << 62), default=None)


def first_departure(rows: Iterable[StatRow], reference_rows: Iterable[StatRow],
                    channels: Mapping[tuple[str, str], Sequence[float]] | None = None,
                    reference_channels: Mapping[tuple[str, str], Sequence[float]] | None = None
                    ) -> dict[str, Any] | None:
    """{"phase", "step", "module", "stat", "ratio", "value", "reference", "limit"} of the suspect's first output (in
    execution order) outside the reference's range; None when it never leaves it. Outputs the reference has not
    (another shape, a module it does not call) are not compared."""
    ref = {(r.phase, r.step, r.module, r.call): r for r in reference_rows}
    channels, reference_channels = channels or {}, reference_channels or {}
    rows = sorted(rows, key=lambda r: r.seq)
    steps = 1 + max((r.step for r in rows if r.step is not None), default=0)
    for row in rows:
        other = ref.get((row.phase, row.step, row.module, row.call))
        if other is None or other.shape != row.shape:
            continue
        mine = channels.get((row.phase, row.module)) if row.step is None and row.call == 0 else None
        theirs = reference_channels.get((row.phase, row.module)) if mine is not None else None
        found = departure_of(row, other, mine, theirs, steps)
        if found is not None:
            return {"phase": row.phase, "step": row.step, "module": row.module, **found}
    return None


def headroom(rows: Iterable[StatRow], reference_rows: Iterable[StatRow],
             channels: Mapping[tuple[str, str], Sequence[float]] | None = None,
             reference_channels: Mapping[tuple[str, str], Sequence[float]] | None = None) -> dict[str, float]:
    """For calibration: per group ('early/std', 'late/pipeline_mean', …) the largest std/absmax ratio (either way),
    mean shift and channel shift over all outputs, each with where it was."""
    ref = {(r.phase, r.step, r.module, r.call): r for r in reference_rows}
    worst: dict[str, Any] = {}
    rows = list(rows)
    steps = 1 + max((r.step for r in rows if r.step is not None), default=0)

    def note(stat: str, value: float, row: StatRow) -> None:
        group = group_of(row.phase, row.step, steps)
        name = f"{group}/{'pipeline_' if row.module.startswith('pipeline.') else ''}{stat}"
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
