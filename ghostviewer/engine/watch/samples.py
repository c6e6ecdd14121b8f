"""A batch's per-sample NaN/Inf counts as the record keeps them (recorder.SAMPLE_NONFINITE), read back by module and
step: "image 3 of 4 is NaN at step 7 in up_blocks.1".

The record's tensors entry holds `seq` (K,), the statistics row each line belongs to, and `nan`, `inf` (K, N), one
column per sample; only outputs with a NaN or an Inf in them have a line. A run recorded before it (or a batch of
one, or a healthy batch) has none: [].
"""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.run.recorder import SAMPLE_NONFINITE
from ghostviewer.record import RecordError, RunRecord


def sample_nonfinite(record: RunRecord) -> list[dict[str, Any]]:
    """One dict per sample and output with NaN/Inf in it, in execution order: {"sample", "module", "phase", "step",
    "call", "nan", "inf"}."""
    try:
        table = record.tensors(SAMPLE_NONFINITE)
    except (RecordError, KeyError, FileNotFoundError):
        return []
    rows = {row.seq: row for row in record.stats()}
    found: list[dict[str, Any]] = []
    for seq, nans, infs in zip(table["seq"].tolist(), table["nan"].tolist(), table["inf"].tolist(), strict=True):
        row = rows.get(int(seq))
        if row is None:
            continue
        for sample, (nan, inf) in enumerate(zip(nans, infs, strict=True)):
            if nan or inf:
                found.append({"sample": sample, "module": row.module, "phase": row.phase, "step": row.step,
                              "call": row.call, "nan": int(nan), "inf": int(inf)})
    return found
