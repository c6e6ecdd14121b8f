"""The symptom of a failing run, and whether another run shows it: the oracle of every bisection.

A bisection re-runs a bad run with something changed (blocks bypassed, settings swapped for a good run's) and
must decide, for each re-run, "is the failure still there?". "Is the re-run healthy?" is the wrong question:
bypassing half of a U-Net nearly always spoils the image, so a healthy-only oracle would clear the half that
holds the culprit. The question is whether *the bad run's own symptom* is still there.

The symptom of a bad run is
  - its verdict label L, when L is not "ok" (nan, blank, noise, saturated, ...), and
  - the kind K of its first anomaly (nan, inf, overflow, collapse, explode, drift) and the phase P it appeared in.

A re-run SHOWS THE SYMPTOM ("symptom present") when either
  (a) the bad run has a first anomaly, and some output the re-run recorded in phase P or later is of kind K by
      the same rules that found the bad run's first anomaly (analysis.anomaly) — anywhere from P on, not only
      as the re-run's *first* anomaly: a bypass that adds an earlier, different anomaly (a collapse, say) must
      not hide the NaN still there downstream. Interventions only touch phase P, upstream of the first anomaly,
      and everything before the first changed block computes what the bad run computed (which was clean), so
      "from phase P on" is "at or after the changed point". Kinds the rows cannot show (drift, judged against
      a baseline) count when they are the re-run's first anomaly; or
  (b) the bad run's label L is not "ok", the re-run's label is L, and either L is "nan" or the bad run has no
      first anomaly of a kind its rows show (nan, inf, overflow, collapse, explode). With such an anomaly, it is
      the symptom and a label other than nan does not count: blank, noise or saturated are coarse marks a spoiled
      re-run shares by chance (bypassing half a U-Net leaves a noisy image whether or not the culprit is among
      the half; tiny pipelines label every run noise). A NaN image is never the work of a bypass.
Otherwise the symptom is ABSENT. Absent is not healthy: a re-run that loses the NaN but comes out noisy or
off-prompt shows a *different* failure. It tells the search that the culprit was among the changes, and it is
reported as `healthy: false` beside `symptom: false`, never as a healthy run. A re-run that crashed or was
cancelled shows nothing either way (`None`).

Silent ghosts (a first anomaly of kind drift, judged against the bad run's baseline, given as `baseline`). A
bypass moves every statistic downstream of the bypassed block, and the bypassed block's own output is its input
— both leave a healthy envelope for reasons of their own. So drift there is never the symptom; the drift is
looked for only where the bypass cannot be the cause of it:
  - the first-anomaly module M, when M is not inside a bypassed block: its output at the anomaly's phase and
    step still drifts. This is sound when M's input is the bad run's or a healthy one (activation patching
    upstream of M, or nothing changed upstream); a bypass upstream changes M's input, which can hide a drift,
    so bisection does not rely on it (analysis.bisect_plan);
  - when M is bypassed: any output of the anomaly's phase recorded before the first bypassed block's output
    (upstream of and at the bypassed point, the part of the re-run the bypass leaves as the bad run had it).
    The bad run drifted nowhere there (M was its first drift), so bypassing M removes its drift by this
    definition: that re-run confirms that nothing before M drifts, no more.
The contextual labels (off_prompt, color_cast) do not count under (b) when the drift can be judged: bypassing
half a U-Net easily leaves an image that misses its prompt, fault or no fault. Without a drift anomaly (an
off_prompt verdict alone, e.g. a prompt the pipeline ignores upstream of every block) the label decides, as (b).
Without a baseline a drift counts when it is the re-run's first anomaly, as in (a).

Warnings are never the symptom. A first anomaly that is only a warning (analysis.anomaly: a float16-headroom
`overflow` on latents large by design, shown by every healthy Euler run of the demo) is replaced by the run's
first failure, found again in its rows (kept as `warning`); a run with an ok verdict and only warnings is healthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ghostviewer.analysis.anomaly import AnomalyDetector, first_failure, is_warning, recorded_latent_sigma, warning_of
from ghostviewer.analysis.baseline import Baseline
from ghostviewer.analysis.baseline_store import recorded_baseline_key, run_baseline
from ghostviewer.analysis.bisect_plan import inside
from ghostviewer.record import StatRow
from ghostviewer.record.types import PHASE_ORDER

_ROW_KINDS = frozenset({"nan", "inf", "overflow", "collapse", "explode"})
CONTEXT_LABELS = frozenset({"off_prompt", "color_cast"})  # labels judged against the prompt or a baseline
ChannelMeans = Mapping[tuple[str, str], Sequence[float]]


def verdict_label(verdict: Any) -> str | None:
    """The label of a verdict dict (or a bare label)."""
    if isinstance(verdict, Mapping):
        label = verdict.get("label")
        return None if label is None else str(label)
    return None if verdict is None else str(verdict)


def is_healthy(verdict: Any, first_anomaly: Mapping[str, Any] | None) -> bool:
    """Verdict ok and no anomaly at all: the only thing that counts as healthy."""
    return verdict_label(verdict) == "ok" and first_anomaly is None


def describe_anomaly(anomaly: Mapping[str, Any]) -> str:
    """'nan at unet.down_blocks.1.attentions.0 (denoise step 0)'."""
    step = anomaly.get("step")
    where = anomaly.get("phase") if step is None else f"{anomaly.get('phase')} step {step}"
    return f"{anomaly.get('kind')} at {anomaly.get('module')} ({where})"


@dataclass(frozen=True)
class Symptom:
    label: str | None  # the bad verdict label, None when it was ok (or there was none)
    anomaly: dict[str, Any] | None  # the bad run's first anomaly
    baseline: Baseline | None = field(default=None, compare=False, repr=False)  # what its drift was judged by
    warning: dict[str, Any] | None = field(default=None, compare=False)  # an earlier warning, not the symptom

    @classmethod
    def of(cls, verdict: Any, first_anomaly: Mapping[str, Any] | None,
           baseline: Baseline | None = None) -> Symptom | None:
        """The symptom of a run, or None when the run is healthy (nothing to look for)."""
        label = verdict_label(verdict)
        label = None if label == "ok" else label
        if label is None and first_anomaly is None:
            return None
        return cls(label, None if first_anomaly is None else dict(first_anomaly), baseline)

    @classmethod
    def of_record(cls, record: Any) -> Symptom | None:
        """The symptom of a recorded run (a RunRecord), with the baseline its drift was judged by when it had a
        drift first anomaly and that baseline can still be read (recorded_baseline_key, run_baseline)."""
        anomaly = record.first_anomaly
        baseline = None
        if anomaly is not None and anomaly.get("kind") == "drift":
            baseline = run_baseline(record.path, recorded_baseline_key(record.events(kind="baseline")))
        warning, recorded = None, getattr(record, "first_warning", None)
        sigma = recorded_latent_sigma(getattr(record, "environment", None))
        # the run decided what was a warning (by its scheduler's sigma); a record from before it said so: the rule
        if anomaly is not None and (anomaly == recorded or recorded is None and sigma is None and warning_of(anomaly)):
            warning, anomaly = dict(anomaly), first_failure(record.stats(), latent_sigma=sigma)
        elif anomaly is not None and recorded is not None:
            warning = dict(recorded)
        found = cls.of(record.verdict, anomaly, baseline)
        return None if found is None else replace(found, warning=warning)

    @property
    def judges_drift(self) -> bool:
        """A drift first anomaly and the baseline it was found by: drift is judged where no bypass causes it."""
        return self.kind == "drift" and self.baseline is not None

    @property
    def kind(self) -> str | None:
        return None if self.anomaly is None else str(self.anomaly.get("kind"))

    @property
    def phase(self) -> str | None:
        return None if self.anomaly is None else str(self.anomaly.get("phase"))

    def describe(self) -> str:
        parts = [f"verdict {self.label}"] if self.label else []
        if self.anomaly is not None:
            parts.append(f"first anomaly {describe_anomaly(self.anomaly)}")
        return ", ".join(parts)

    def kind_shown(self, rows: Iterable[StatRow], first_anomaly: Mapping[str, Any] | None,
                   latent_sigma: float | None = None) -> bool:
        """(a): an output of the symptom's kind from its phase on (rows in execution order), never a benign
        warning (the re-run's own scheduler's `latent_sigma` decides, analysis.anomaly.is_warning)."""
        if self.anomaly is None:
            return False
        if self.kind not in _ROW_KINDS:
            return first_anomaly is not None and first_anomaly.get("kind") == self.kind
        start = PHASE_ORDER.get(str(self.phase), 0)
        detector = AnomalyDetector()  # fed every row: its per-module references are the run's first readings
        for row in rows:
            kind = detector.classify(row)
            if kind == self.kind and PHASE_ORDER.get(row.phase, 3) >= start and not is_warning(
                    kind, row.module, row.absmax, latent_sigma):
                return True
        return False

    def hidden_by(self, block: str) -> bool:
        """Bypassing `block` leaves nothing to judge the symptom by (it is, or encloses, the first-drift module):
        such a re-run answers "gone" whatever the culprit, so the search pins it (analysis.bisect_plan)."""
        return self.judges_drift and inside(str((self.anomaly or {}).get("module")), block)

    def drift_shown(self, rows: Iterable[StatRow], bypassed: Sequence[str] = (),
                    channel_means: ChannelMeans | None = None) -> bool:
        """The drift, where the bypassed blocks cannot have caused it (module docstring); rows in execution order."""
        if self.anomaly is None or self.baseline is None:
            return False
        phase, step, module = self.phase, self.anomaly.get("step"), str(self.anomaly.get("module"))
        rows = [row for row in rows if row.phase == phase]
        if any(inside(module, block) for block in bypassed):
            marks = [row.seq for row in rows if any(inside(row.module, block) for block in bypassed)]
            judged = [row for row in rows if not marks or row.seq < min(marks)]
        else:
            judged = [row for row in rows if row.module == module and row.step == step]
        means = channel_means or {}
        return any(
            self.baseline.drift(row, means.get((row.phase, row.module)) if row.step is None else None) is not None
            for row in judged
        )

    def shown_by(
        self, verdict: Any, first_anomaly: Mapping[str, Any] | None, rows: Iterable[StatRow], status: str = "done",
        *, bypassed: Sequence[str] = (), channel_means: ChannelMeans | None = None,
        latent_sigma: float | None = None,
    ) -> bool | None:
        """Whether a re-run shows this symptom (module docstring); None when it crashed or was cancelled.

        `bypassed`: the blocks the re-run bypassed; `channel_means`: its per-channel means of encode/decode
        outputs ((phase, module) -> means), for a drift judged by the channels; `latent_sigma`: its scheduler's
        init_noise_sigma, as recorded (what is a benign warning)."""
        if status != "done":
            return None
        label = verdict_label(verdict)
        label_counts = (label == "nan" or self.kind not in _ROW_KINDS) and not (
            self.judges_drift and label in CONTEXT_LABELS)
        if self.label is not None and label == self.label and label_counts:
            return True
        if self.judges_drift:
            return self.drift_shown(rows, bypassed, channel_means)
        return self.kind_shown(rows, first_anomaly, latent_sigma)
