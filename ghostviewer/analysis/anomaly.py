"""The first anomaly of a run: the first traced output, in execution order, whose statistics turn abnormal.

Forward hooks fire innermost first, so among nested modules the deepest one to show a problem comes first in
`seq` order — which is what CONTRACT promises. Kinds:
  nan / inf   any non-finite element;
  overflow    finite values beyond float16's range (absmax > 65504): a float16 run would turn them into inf;
  collapse    an output with no variation at all (std == 0 over more than one element, e.g. all zeros), or a std
              fallen below COLLAPSE_RATIO of the same module's first reading in the run;
  explode     absmax grown beyond EXPLODE_RATIO of the same module's first reading, and beyond EXPLODE_FLOOR;
  drift       (only with a baseline, analysis/baseline.py) mean, std or absmax — or, in the encode and decode
              phases, one channel's mean — outside the pipeline's healthy envelope by the baseline's margin. The
              anomaly then also holds `z` (robust z-units from the healthy median) and `stat` (which statistic).
Warnings and failures. An `overflow` of the latents themselves (HEADROOM_MODULES: the initial latents and each
scheduler step's, large by design where a sigma-scaled scheduler such as Euler multiplies the noise by its sigma_max
— the demo's Euler latents are ~2·10⁴ at `pipeline.prepare_latents`, in every family that has such a scheduler) is a
benign *warning* while it stays within HEADROOM_SIGMAS of the scheduler's own init_noise_sigma (the run records it:
environment `latents.init_noise_sigma`): the run is fine, and it says nothing of a failure. A latents overflow under
DDIM or PNDM (sigma 1), or one far past the sigma, is a failure. Every other anomaly is a *failure*, an overflow
inside a model included (a float16 run would turn it into inf). `first` is the run's first failure, or its first
warning while nothing has failed (the record's and the run JSON's first_anomaly); `first_warning` its first warning
(first_warning in both). `first_failure` finds the first failure in a run's rows again, past any earlier warning:
what a bisection looks for (analysis.symptom).
The ratios were calibrated on healthy demo runs (scripts/calibrate_verdicts.py reports anomalies too).
A Heun run of the demo (cosine schedule, sigma_max ~2·10⁴, trailing spacing) fails for real, at any step count:
its second-order correction over the first step, sigma_max → sigma_1, scales the difference of the two denoised
predictions by sigma_max / sigma_1, the latents reach ~10⁵ where they should be ~sigma_1 (the U-Net's input, scaled
by scale_model_input, ~6.7·10⁴ at unet.conv_in) and the picture decodes wrong — no rule of sigmas should call that
benign (tests/engine/test_schedulers_healthy.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from ghostviewer.analysis.baseline import Baseline
from ghostviewer.record import StatColumns, StatRow
from ghostviewer.record.types import CALLBACK_LATENTS, FP16_MAX

COLLAPSE_RATIO = 1e-4
EXPLODE_RATIO = 1e3
EXPLODE_FLOOR = 1e3


WARNING_KINDS = frozenset({"overflow"})
HEADROOM_MODULES = frozenset({"pipeline.prepare_latents", "scheduler.step", CALLBACK_LATENTS})  # the latents
# Latents large by design stay within this many of the scheduler's initial sigma: Gaussian noise of a few million
# elements stays within ~5.5 of its sigma, and the denoised latents shrink from there.
HEADROOM_SIGMAS = 10.0


def is_warning(kind: object, module: object, absmax: float | None = None,
               latent_sigma: float | None = None) -> bool:
    """A benign note (float16 headroom on latents large by design), never a failure or a bisection symptom.

    Large by design is the scheduler's own say: its initial noise sigma (`latent_sigma`, init_noise_sigma as the
    run recorded it: Euler, Heun, LMS scale the noise by their largest sigma; DDIM and PNDM by 1) times
    HEADROOM_SIGMAS bounds latents that are only large. Without it (a record made before it was recorded) the
    latents' modules alone decide, as they used to."""
    if kind not in WARNING_KINDS or module not in HEADROOM_MODULES:
        return False
    if latent_sigma is None:
        return True
    return absmax is not None and latent_sigma > 1.0 and absmax <= HEADROOM_SIGMAS * latent_sigma


def warning_of(anomaly: Mapping[str, object] | None) -> bool:
    return anomaly is not None and is_warning(anomaly.get("kind"), anomaly.get("module"))


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


class AnomalyDetector:
    """`baseline`: check drift too; `channel_means`: (phase, module) -> per-channel means of encode/decode outputs,
    filled as the run goes (engine/tracing/channel_means.py), checked against the baseline's channel envelopes."""

    def __init__(self, baseline: Baseline | None = None,
                 channel_means: Mapping[tuple[str, str], Sequence[float]] | None = None,
                 prompt_ids: Sequence[int] | None = None) -> None:
        self.first: dict[str, object] | None = None
        self.first_warning: dict[str, object] | None = None
        self.failed = False  # `first` is a failure: nothing more to look for
        self.latent_sigma: float | None = None  # the run's scheduler's init_noise_sigma (is_warning)
        self.baseline = baseline
        self.channel_means = channel_means if channel_means is not None else {}
        # the encode phase's channel subspace judges only prompts made of the baseline's own prompts' tokens
        self._encode_subspace = baseline is None or baseline.covers_prompt(prompt_ids)
        self._reference: dict[str, tuple[float, float]] = {}
        self._drift: tuple[float, str] | None = None

    def classify(self, row: StatRow) -> str | None:
        return self._kind(row.phase, row.step, row.module, row.call, row.shape, row.nan_count, row.inf_count,
                          row.mean, row.std, row.absmax)

    def _kind(self, phase: str, step: int | None, module: str, call: int, shape: tuple[int, ...], nans: int,
              infs: int, mean: float, std: float, absmax: float) -> str | None:
        """The anomaly kind of one output, field by field (the module's first healthy reading is remembered)."""
        if nans:
            return "nan"
        if infs:
            return "inf"
        if absmax > FP16_MAX:
            return "overflow"
        ref_std, ref_absmax = self._reference.setdefault(module, (std, absmax))
        if (std == 0.0 and _numel(shape) > 1) or (ref_std > 0 and std < COLLAPSE_RATIO * ref_std):
            return "collapse"
        if absmax > EXPLODE_FLOOR and absmax > EXPLODE_RATIO * max(ref_absmax, 1e-12):
            return "explode"
        if self.baseline is not None:
            channels = self.channel_means.get((phase, module)) if step is None else None
            self._drift = self.baseline.drift_of(phase, step, module, call, shape, (mean, std, absmax), channels,
                                                 phase != "encode" or self._encode_subspace)
            if self._drift is not None:
                return "drift"
        return None

    def feed(self, rows: Iterable[StatRow]) -> dict[str, object] | None:
        """Check rows (in execution order); remember and return the first anomaly seen so far (module docstring)."""
        if self.failed:
            return self.first
        for row in rows:  # the tracer hands rows over in execution (seq) order
            kind = self.classify(row)
            if kind:
                self._found(row.phase, row.step, row.module, kind, row.absmax)
                if self.failed:
                    break
        return self.first

    def feed_columns(self, c: StatColumns) -> dict[str, object] | None:
        """feed() for a step's columns (execution order): the same checks and result without an object per
        output — this runs for every output of every traced run."""
        if self.failed:
            return self.first
        kind_of = self._kind
        for i, fields in enumerate(zip(c.phase, c.step, c.module, c.call, c.shape, c.nan_count, c.inf_count, c.mean,
                                       c.std, c.absmax, strict=True)):
            kind = kind_of(*fields)
            if kind:
                self._found(c.phase[i], c.step[i], c.module[i], kind, c.absmax[i])
                if self.failed:
                    break
        return self.first

    def _found(self, phase: str, step: int | None, module: str, kind: str,
               absmax: float | None = None) -> dict[str, object]:
        found: dict[str, object] = {"phase": phase, "step": step, "module": module, "kind": kind}
        if kind == "drift" and self._drift is not None:
            found.update(z=round(self._drift[0], 2), stat=self._drift[1])
        if is_warning(kind, module, absmax, self.latent_sigma):
            self.first_warning = self.first_warning or found
            self.first = self.first or found
        else:
            self.first, self.failed = found, True
        return found


def first_failure(rows: Iterable[StatRow], baseline: Baseline | None = None,
                  channel_means: Mapping[tuple[str, str], Sequence[float]] | None = None,
                  latent_sigma: float | None = None) -> dict[str, object] | None:
    """The first anomaly that is a failure (not a benign warning, is_warning), rows in execution order."""
    detector = AnomalyDetector(baseline, channel_means)
    detector.latent_sigma = latent_sigma
    for row in rows:
        kind = detector.classify(row)
        if kind and not is_warning(kind, row.module, row.absmax, latent_sigma):
            return detector._found(row.phase, row.step, row.module, kind, row.absmax)
    return None


def recorded_latent_sigma(environment: Mapping[str, object] | None) -> float | None:
    """The run's scheduler's init_noise_sigma as its record holds it (None: recorded before it was)."""
    latents = (environment or {}).get("latents")
    value = latents.get("init_noise_sigma") if isinstance(latents, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
