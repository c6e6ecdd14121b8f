"""Baselines: the envelope of a pipeline's healthy behaviour, and drift out of it. Numpy only.

A baseline holds, per (phase, step bucket, module) of a module's first call in a phase/step, the healthy spread
of the recorded statistics (mean, std, absmax); for the encode and decode phases also of the per-channel means
of each output (each channel's range, and the subspace the healthy vectors lie near); and the healthy range of
the final image's colour statistics (analysis/image_stats.py). Spreads are `Envelope`s and `Subspace`s
(analysis/envelope.py): a value *drifts* when it leaves its healthy extremes by more than a margin, in units of
its robust scale (1.4826 × MAD, floored at REL_FLOOR × the module's median absmax so that a module every
healthy run computes bit-identically, such as the time embedding, still has one); how far is reported in robust
z-units, (value − median) / scale. Healthy outputs of one pipeline are multimodal (a white background and a
black one decode to very different activations): a plain |z| cut would have to sit far out to spare the
healthy extremes, while the envelope plus a margin keeps every healthy mode inside.

Calibration (scripts/build_demo_baseline.py, benchmarks/false_alarms.py, 2026-12-01), the embedded demo
pipeline at its defaults (20 DDIM steps, 64×64, float32, guidance 7.5), built from 225 healthy runs of 240
(ghostviewer.demo.baseline_prompts, seeds 0-239), judged on 100 other healthy runs (other captions, seeds
1000-1003): worst excess beyond the healthy extremes, in scale units — module stats 0.82, channel means 0.58,
channel-subspace residual 0.08, colour statistics 0.06; 0 false alarms. The margins sit far beyond
(DRIFT_MARGIN, CHANNEL_MARGIN: 6; COLOUR_MARGIN: 3) and well inside the silent ghosts' figures: a ×1.5 U-Net
resnet leaves its std range by ≥ 8 from step 0, a stray decoder bias leaves the channel subspace by ≥ 23.
A baseline is keyed by the pipeline's identity (weight hashes) and the settings that change the activations
(SETTINGS_KEYS, and for calls of another kind, a strength, a ControlNet scale, a batch or LoRAs: CALL_KEYS); it
is stored as JSON (analysis/baseline_file.py), never pickle, validated when loaded, and found and read once per
file version by analysis/baseline_store.py. It also records the architecture it was built on (not part of the
key), so that a run of other weights or settings of that architecture is judged by it through a view
(analysis/baseline_match.py: run_steps for normalised time, per_pixel, the phases judged, wider margins).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ghostviewer.analysis.envelope import BaselineError, Envelope, Subspace, finite_number
from ghostviewer.analysis.image_stats import colour_stats
from ghostviewer.record import StatRow
from ghostviewer.spec.errors import SpecError
from ghostviewer.spec.loras import DEFAULT_LORA_SCALE, parse_lora

__all__ = ["Baseline", "BaselineError", "Envelope", "Subspace", "baseline_key", "deviation_grid", "drift_by_module",
           "finite_number"]

FORMAT = "ghostviewer-baseline"
VERSION = 1
STATS: tuple[str, ...] = ("mean", "std", "absmax")
SETTINGS_KEYS: tuple[str, ...] = ("scheduler", "steps", "width", "height", "dtype", "guidance")
# The call's settings that change activations, and their values for a text-to-image call of one image without
# LoRAs: a baseline's settings (and so its key) hold one only where it differs, so the keys of text-to-image
# baselines (the shipped demo's) are what they always were. The weights a call adds — its ControlNet's, each LoRA's
# sha256 — are in the identity (weight hashes); a LoRA's scale is here (`lora_scales`, in the order of the run's
# `adapters`), and whether they were fused. The call's kind is also in the identity's pipeline class (diffusers'
# class for the kind), but is written here so that a baseline says it in words.
CALL_KEYS: dict[str, Any] = {"kind": "text2img", "strength": None, "controlnet_scale": None, "batch": 1,
                             "lora_scales": [], "fuse_lora": False}
REL_FLOOR = 0.01  # the smallest scale of a module's stats, as a fraction of its median absmax
COLOUR_FLOOR = 2.0 / 255.0  # the smallest scale of an image statistic (values in [0, 1])
MAX_BUCKETS = 20  # denoising steps are grouped into at most this many buckets
DRIFT_MARGIN = 6.0  # module stats: healthy held-out worst 0.82 (see the module docstring)
CHANNEL_MARGIN = 6.0  # per-channel means and their subspace residual: healthy held-out worst 0.58 / 0.08
COLOUR_MARGIN = 3.0  # image colour statistics: healthy held-out worst 0.06
PROMPT_TOKENS = "prompt_tokens"  # meta: the token ids of the prompts a baseline was built from (covers_prompt)
_Key = tuple[str, int | None, str]


def same_but_size(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Two output shapes alike but for the image size: (B, C, H, W) with the same B and C, or (B, N, D) — tokens
    of an image — with the same B and D."""
    if len(a) != len(b) or len(a) not in (3, 4):
        return False
    return a[0] == b[0] and (a[1] == b[1] if len(a) == 4 else a[2] == b[2])


def step_bucket(step: int | None, steps: int, buckets: int) -> int | None:
    if step is None:
        return None
    return min(buckets - 1, step * buckets // max(steps, 1))


def key_text(phase: str, bucket: int | None, module: str) -> str:
    return f"{phase}|{'-' if bucket is None else bucket}|{module}"


def parse_key_text(text: str) -> _Key:
    phase, bucket, module = text.split("|", 2)
    return phase, None if bucket == "-" else int(bucket), module


def _lora_scales(adapters: Any) -> list[float]:
    """The scales of a run's `adapters` entries ("FILE:SCALE"), in order; an entry that does not read counts 1.0."""
    scales = []
    for entry in adapters or ():
        try:
            scales.append(float(parse_lora(entry).scale))
        except SpecError:
            scales.append(DEFAULT_LORA_SCALE)
    return scales


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def call_of(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Every CALL_KEYS value of a run's settings (its `adapters` read as `lora_scales`) or of a baseline's."""
    scales = settings["lora_scales"] if "lora_scales" in settings else _lora_scales(settings.get("adapters"))
    return {"kind": settings.get("kind") or "text2img", "strength": _number(settings.get("strength")),
            "controlnet_scale": _number(settings.get("controlnet_scale")), "batch": int(settings.get("batch") or 1),
            "lora_scales": [float(s) for s in scales], "fuse_lora": bool(settings.get("fuse_lora")) and bool(scales)}


def settings_of(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that matter for a baseline, from a run's settings (extra keys are ignored): SETTINGS_KEYS, and
    the call's (CALL_KEYS) where they differ from a text-to-image call of one image."""
    out = {k: settings.get(k) for k in SETTINGS_KEYS}
    out.update({k: v for k, v in call_of(settings).items() if v != CALL_KEYS[k]})
    return out


def baseline_key(identity: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """16 hex characters naming a (pipeline identity, settings) pair: the baseline's file name."""
    text = json.dumps({"identity": dict(identity), "settings": settings_of(settings)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _worst(values: Sequence[float], lower: Sequence[float], upper: Sequence[float], env: Envelope,
           names: Sequence[str] | None) -> tuple[float, str] | None:
    """(z, name) of the value furthest (in |z|) among those outside [lower, upper]; None when all are inside."""
    worst: tuple[float, str] | None = None
    for i, value in enumerate(values):
        if (value < lower[i] or value > upper[i]) and math.isfinite(value):
            z = (value - env.median[i]) / env.scale[i]
            if worst is None or abs(z) > abs(worst[0]):
                worst = (z, names[i] if names is not None else f"channel_mean[{i}]")
    return worst


@dataclass
class Baseline:
    """A pipeline's healthy envelope at one set of settings (see the module docstring)."""

    identity: dict[str, Any]
    settings: dict[str, Any]
    buckets: int
    modules: dict[_Key, tuple[tuple[int, ...], Envelope]]
    image: tuple[tuple[str, ...], Envelope] | None
    channels: dict[_Key, tuple[Envelope, Subspace | None]] = field(default_factory=dict)  # encode/decode only
    margin: float = DRIFT_MARGIN
    channel_margin: float = CHANNEL_MARGIN
    colour_margin: float = COLOUR_MARGIN
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    architecture: dict[str, Any] = field(default_factory=dict)  # what it was built on (not part of the key)
    # How a run that differs from the baseline is judged (analysis/baseline_match.py; never saved with it):
    run_steps: int | None = None  # the run's step count: its steps are bucketed on normalised denoising time
    phases: frozenset[str] | None = None  # the phases judged ("image": the colour statistics); None: all
    per_pixel: bool = False  # another image size: mean, std and channel means of outputs alike but for H, W

    def __post_init__(self) -> None:
        self.key = baseline_key(self.identity, self.settings)
        self._known_tokens: frozenset[int] | None = None
        self._steps = int(self.run_steps or self.settings.get("steps") or 1)
        self._limits = {k: (shape, *env.limits(self.margin), env) for k, (shape, env) in self.modules.items()}
        if self.run_steps is not None and self.run_steps != self.settings.get("steps"):
            self._limits = self._normalised_time_limits()
        self._channel_limits = {k: (*env.limits(self.channel_margin), env) for k, (env, _) in self.channels.items()}
        if self.per_pixel:  # the largest value grows with the number of pixels: absmax is not judged
            inf = math.inf
            self._limits = {k: (shape, (lo[0], lo[1], -inf), (hi[0], hi[1], inf), env)
                            for k, (shape, lo, hi, env) in self._limits.items()}

    def _normalised_time_limits(self) -> dict[_Key, tuple[Any, ...]]:
        """For a run of another step count: a step's limits span its bucket's neighbours too (its timestep lies
        between theirs), and a module every healthy run computes alike at a given timestep (no spread at all: the
        time embedding) is not judged — at another timestep its healthy value is another."""
        limits: dict[_Key, tuple[Any, ...]] = {}
        for (phase, bucket, module), (shape, lower, upper, env) in self._limits.items():
            if bucket is None:
                limits[(phase, bucket, module)] = (shape, lower, upper, env)
                continue
            if all(h - lo <= 1e-6 * max(abs(h), 1e-12) for lo, h in zip(env.lo, env.hi)):
                continue
            near = [self._limits.get((phase, b, module)) for b in (bucket - 1, bucket + 1)]
            lows, highs = [lower], [upper]
            for other in near:
                if other is not None and other[0] == shape:
                    lows.append(other[1])
                    highs.append(other[2])
            limits[(phase, bucket, module)] = (shape, tuple(map(min, zip(*lows))), tuple(map(max, zip(*highs))), env)
        return limits

    def bucket(self, step: int | None) -> int | None:
        return step_bucket(step, self._steps, self.buckets)

    def judges(self, phase: str) -> bool:
        return self.phases is None or phase in self.phases

    def covers_prompt(self, ids: Iterable[int] | None) -> bool:
        """Whether every token of a prompt (its ids) was among the baseline's own prompts' (meta PROMPT_TOKENS). The
        encode phase's channel subspace is fitted to those prompts' encodings: a prompt with a word they never had
        leaves it by design, so the subspace does not judge it (the channel envelopes and statistics still do).
        A baseline saved without the list covers every prompt, as before."""
        known = self.meta.get(PROMPT_TOKENS)
        if ids is None or not isinstance(known, list):
            return True
        if self._known_tokens is None:
            self._known_tokens = frozenset(i for i in known if isinstance(i, int))
        return self._known_tokens.issuperset(ids)

    def _entry(self, row: StatRow) -> tuple[Any, ...] | None:
        return self._entry_of(row.phase, row.step, row.module, row.call, row.shape)

    def _entry_of(self, phase: str, step: int | None, module: str, call: int,
                  shape: tuple[int, ...]) -> tuple[Any, ...] | None:
        if call != 0 or not self.judges(phase):
            return None
        entry = self._limits.get((phase, self.bucket(step), module))
        if entry is None or (entry[0] != shape and not (self.per_pixel and same_but_size(entry[0], shape))):
            return None
        return entry

    def drift(self, row: StatRow, channel_means: Sequence[float] | None = None) -> tuple[float, str] | None:
        """(z, statistic) when the row's stats — or, given for an encode/decode row, its per-channel means
        ('channel_mean[c]', or 'channel_residual' off their healthy subspace) — leave the envelope by more than
        the margin; else None."""
        return self.drift_of(row.phase, row.step, row.module, row.call, row.shape, (row.mean, row.std, row.absmax),
                             channel_means)

    def drift_of(self, phase: str, step: int | None, module: str, call: int, shape: tuple[int, ...],
                 values: tuple[float, float, float], channel_means: Sequence[float] | None = None,
                 subspace: bool = True) -> tuple[float, str] | None:
        """drift() for one output given field by field (values: mean, std, absmax): no row object needed.
        `subspace`: judge the channel means' subspace residual too (covers_prompt)."""
        if call != 0:  # _entry_of, inlined: this runs for every output of every run that has a baseline
            return None
        entry = self._limits.get((phase, step_bucket(step, self._steps, self.buckets), module))
        if entry is None or entry[0] != shape:
            if entry is None or not self.per_pixel or not same_but_size(entry[0], shape):
                return None
        if self.phases is not None and phase not in self.phases:
            return None
        _, lower, upper, env = entry
        mean, std, top = values
        inside = lower[0] <= mean <= upper[0] and lower[1] <= std <= upper[1] and lower[2] <= top <= upper[2]
        worst = None if inside else _worst(values, lower, upper, env, STATS)
        if worst is None and channel_means is not None:
            worst = self.channel_drift(phase, module, channel_means, subspace)
        return worst

    def channel_drift(self, phase: str, module: str, channel_means: Sequence[float], subspace: bool = True
                      ) -> tuple[float, str] | None:
        if not self.judges(phase):
            return None
        key = (phase, None, module)
        limits = self._channel_limits.get(key)
        if limits is None or len(limits[2].median) != len(channel_means):
            return None
        worst = _worst(channel_means, *limits, None)
        fitted = self.channels[key][1] if subspace else None
        if worst is None and fitted is not None:
            residual, env = fitted.residual_of(channel_means), fitted.residual
            if residual > env.hi[0] + self.channel_margin * env.scale[0]:
                worst = ((residual - env.median[0]) / env.scale[0], "channel_residual")
        return worst

    def deviation(self, row: StatRow) -> float | None:
        """The largest |z| of the row's stats, None when the baseline has no envelope for it."""
        entry = self._entry(row)
        if entry is None:
            return None
        values = [v for v in entry[3].z((row.mean, row.std, row.absmax)) if math.isfinite(v)]
        return max((abs(v) for v in values), default=None)

    def image_drift(self, image: np.ndarray, extra: Mapping[str, float] | None = None) -> tuple[float, str] | None:
        """(z, statistic) when the image's colour statistics leave the healthy range by the colour margin."""
        if self.image is None or not self.judges("image"):
            return None
        names, env = self.image
        stats = {**colour_stats(image), **(extra or {})}
        values = [stats.get(name, math.nan) for name in names]  # a statistic not measured is never out of range
        return _worst(values, *env.limits(self.colour_margin), env, names)


def deviation_grid(rows: Iterable[StatRow], baseline: Baseline) -> dict[tuple[str, int | None], float]:
    """{(module, step): largest |z| of its stats} for every row the baseline covers (call 0), for a heat map.

    Values above the baseline's margin are far from the healthy median; whether a value *drifts* also depends on
    the healthy extremes (`Baseline.drift`).
    """
    grid: dict[tuple[str, int | None], float] = {}
    for row in rows:
        value = baseline.deviation(row)
        if value is not None:
            grid[(row.module, row.step)] = value
    return grid


@dataclass(frozen=True)
class Drift:
    """Where a module's output first left its envelope: robust z, which statistic, phase and step."""

    z: float
    stat: str
    phase: str
    step: int | None

    def describe(self) -> str:
        """'drift: std z=9.6 at step 0' ('… in decode' for a phase without steps)."""
        where = f"in {self.phase}" if self.step is None else f"at step {self.step}"
        return f"drift: {self.stat} z={self.z:.1f} {where}"


def drift_by_module(rows: Iterable[StatRow], baseline: Baseline,
                    channel_means: Mapping[tuple[str, str], Sequence[float]] | None = None) -> dict[str, Drift]:
    """{module: its first drift} for the modules whose rows (in execution order) leave the envelope, by the rule
    the anomaly detector uses (`Baseline.drift`; `channel_means[(phase, module)]` for encode/decode rows)."""
    found: dict[str, Drift] = {}
    for row in rows:
        if row.module in found:
            continue
        channels = (channel_means or {}).get((row.phase, row.module)) if row.step is None else None
        drift = baseline.drift(row, channels)
        if drift is not None:
            found[row.module] = Drift(float(drift[0]), drift[1], row.phase, row.step)
    return found
