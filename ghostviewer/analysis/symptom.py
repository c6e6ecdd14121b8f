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
  (b) the bad run's label L is not "ok" and the re-run's label is L.
Otherwise the symptom is ABSENT. Absent is not healthy: a re-run that loses the NaN but comes out noisy or
off-prompt shows a *different* failure. It tells the search that the culprit was among the changes, and it is
reported as `healthy: false` beside `symptom: false`, never as a healthy run. A re-run that crashed or was
cancelled shows nothing either way (`None`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.record import StatRow

PHASE_ORDER = {"encode": 0, "denoise": 1, "decode": 2}
_ROW_KINDS = frozenset({"nan", "inf", "overflow", "collapse", "explode"})


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

    @classmethod
    def of(cls, verdict: Any, first_anomaly: Mapping[str, Any] | None) -> Symptom | None:
        """The symptom of a run, or None when the run is healthy (nothing to look for)."""
        label = verdict_label(verdict)
        label = None if label == "ok" else label
        if label is None and first_anomaly is None:
            return None
        return cls(label, None if first_anomaly is None else dict(first_anomaly))

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

    def kind_shown(self, rows: Iterable[StatRow], first_anomaly: Mapping[str, Any] | None) -> bool:
        """(a): an output of the symptom's kind from its phase on (rows in execution order)."""
        if self.anomaly is None:
            return False
        if self.kind not in _ROW_KINDS:
            return first_anomaly is not None and first_anomaly.get("kind") == self.kind
        start = PHASE_ORDER.get(str(self.phase), 0)
        detector = AnomalyDetector()  # fed every row: its per-module references are the run's first readings
        for row in rows:
            kind = detector.classify(row)
            if kind == self.kind and PHASE_ORDER.get(row.phase, 3) >= start:
                return True
        return False

    def shown_by(
        self, verdict: Any, first_anomaly: Mapping[str, Any] | None, rows: Iterable[StatRow], status: str = "done"
    ) -> bool | None:
        """Whether a re-run shows this symptom (module docstring); None when it crashed or was cancelled."""
        if status != "done":
            return None
        if self.label is not None and verdict_label(verdict) == self.label:
            return True
        return self.kind_shown(rows, first_anomaly)
