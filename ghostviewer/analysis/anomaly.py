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
The ratios were calibrated on healthy demo runs (scripts/calibrate_verdicts.py reports anomalies too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from ghostviewer.analysis.baseline import Baseline
from ghostviewer.record import StatRow
from ghostviewer.record.types import FP16_MAX

COLLAPSE_RATIO = 1e-4
EXPLODE_RATIO = 1e3
EXPLODE_FLOOR = 1e3


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


class AnomalyDetector:
    """`baseline`: check drift too; `channel_means`: (phase, module) -> per-channel means of encode/decode outputs,
    filled as the run goes (engine/channel_means.py), checked against the baseline's channel envelopes."""

    def __init__(self, baseline: Baseline | None = None,
                 channel_means: Mapping[tuple[str, str], Sequence[float]] | None = None) -> None:
        self.first: dict[str, object] | None = None
        self.baseline = baseline
        self.channel_means = channel_means if channel_means is not None else {}
        self._reference: dict[str, tuple[float, float]] = {}
        self._drift: tuple[float, str] | None = None

    def classify(self, row: StatRow) -> str | None:
        if row.nan_count:
            return "nan"
        if row.inf_count:
            return "inf"
        if row.absmax > FP16_MAX:
            return "overflow"
        reference = self._reference.setdefault(row.module, (row.std, row.absmax))
        if _numel(row.shape) > 1 and row.std == 0.0:
            return "collapse"
        ref_std, ref_absmax = reference
        if ref_std > 0 and row.std < COLLAPSE_RATIO * ref_std:
            return "collapse"
        if row.absmax > EXPLODE_FLOOR and row.absmax > EXPLODE_RATIO * max(ref_absmax, 1e-12):
            return "explode"
        if self.baseline is not None:
            channels = self.channel_means.get((row.phase, row.module)) if row.step is None else None
            self._drift = self.baseline.drift(row, channels)
            if self._drift is not None:
                return "drift"
        return None

    def feed(self, rows: Iterable[StatRow]) -> dict[str, object] | None:
        """Check rows (in execution order); remember and return the first anomaly seen so far."""
        for row in rows:  # the tracer hands rows over in execution (seq) order
            kind = self.classify(row)
            if kind and self.first is None:
                self.first = {"phase": row.phase, "step": row.step, "module": row.module, "kind": kind}
                if kind == "drift" and self._drift is not None:
                    self.first.update(z=round(self._drift[0], 2), stat=self._drift[1])
        return self.first
