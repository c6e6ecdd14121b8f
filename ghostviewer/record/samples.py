"""A batch's per-sample NaN/Inf table as the record keeps it, read without torch (the GUI, a bundle): "image 3 of 4
went NaN at step 7 in up_blocks.1".

The tensors entry `sample_nonfinite` (engine/run/recorder.py writes it) holds `seq` (K,), the statistics row each
line belongs to, and `nan`, `inf` (K, N), one column per sample; only outputs with a NaN or an Inf in them have a
line. A run recorded before it, a batch of one and a healthy batch have none: [].
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .errors import RecordError
from .reader import RunRecord

SAMPLE_NONFINITE = "sample_nonfinite"  # the tensors entry's name (engine/run/recorder.py SAMPLE_NONFINITE)


def sample_nonfinite(record: RunRecord) -> list[dict[str, Any]]:
    """One dict per sample and output with NaN/Inf in it, in execution order: {"sample", "module", "phase", "step",
    "call", "nan", "inf"}. Reads only the statistics rows the table names."""
    try:
        table = record.tensors(SAMPLE_NONFINITE)
        seqs, nans, infs = (np.asarray(table[k], np.int64) for k in ("seq", "nan", "inf"))
    except (RecordError, KeyError, FileNotFoundError):
        return []
    if seqs.ndim != 1 or nans.ndim != 2 or nans.shape != infs.shape or len(seqs) != len(nans):
        return []  # not a table this reader knows: nothing said rather than something wrong
    rows = {int(seq): row for seq, *row in record._query(  # noqa: SLF001 - the record package's own reader
        "SELECT seq, module, phase, step, call FROM stats WHERE seq IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted({int(s) for s in seqs})),))}
    found: list[dict[str, Any]] = []
    for line in np.argsort(seqs, kind="stable"):
        row = rows.get(int(seqs[line]))
        if row is None:
            continue
        module, phase, step, call = row
        for sample in np.flatnonzero(nans[line] + infs[line]):
            found.append({"sample": int(sample), "module": module, "phase": phase, "step": step, "call": call,
                          "nan": int(nans[line, sample]), "inf": int(infs[line, sample])})
    return found


def first_nonfinite(record: RunRecord, samples: int) -> list[dict[str, Any] | None]:
    """Where each of `samples` samples first showed NaN/Inf by the table — {"phase", "step", "module", "kind",
    "outputs", "steps": [first, last]} — None where it never did; [] when the record has no table."""
    lines = sample_nonfinite(record)
    if not lines:
        return []
    firsts: list[dict[str, Any] | None] = [None] * samples
    for line in lines:
        index = line["sample"]
        if index >= samples:
            continue
        first = firsts[index]
        if first is None:
            first = firsts[index] = {"phase": line["phase"], "step": line["step"], "module": line["module"],
                                     "kind": "nan" if line["nan"] else "inf", "outputs": 0, "steps": []}
        first["outputs"] += 1
        if line["step"] is not None:
            step = int(line["step"])
            first["steps"] = [min(first["steps"][0], step), max(first["steps"][1], step)] if first["steps"] \
                else [step, step]
    return firsts
