"""A batch's per-sample NaN/Inf counts as the record keeps them (recorder.SAMPLE_NONFINITE), read back by module and
step: "image 3 of 4 is NaN at step 7 in up_blocks.1". The one reader is the record's (record/samples.py: numpy only,
so the GUI and a bundle read it too); it is named here for the engine's callers."""

from __future__ import annotations

from ghostviewer.record.samples import sample_nonfinite

__all__ = ["sample_nonfinite"]
