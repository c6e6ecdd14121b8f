"""Telling two recorded outputs apart across GhostViewer versions: fingerprints modulo 2**32, exact min/max/counts."""

from __future__ import annotations

from dataclasses import replace

from ghostviewer.analysis.compare import rows_differ
from ghostviewer.record import StatRow

ROW = StatRow("denoise", 3, "unet.mid_block", 0, 41, (2, 8, 4, 4), "float32", -2.5, 3.0, 0.125, 0.75, 3.0, 0, 0,
              fingerprint=-123_456_789)


def test_an_older_64_bit_fingerprint_matches_its_wrapped_form() -> None:
    older = replace(ROW, fingerprint=ROW.fingerprint + 3 * 2**32)  # type: ignore[operator]
    assert rows_differ(ROW, older) is None
    assert rows_differ(ROW, replace(ROW, fingerprint=ROW.fingerprint + 1)) == "fingerprint"  # type: ignore[operator]


def test_with_equal_fingerprints_only_summation_noise_is_forgiven() -> None:
    assert rows_differ(ROW, replace(ROW, mean=0.125000001, std=0.7500001)) is None  # another version's float sums
    assert rows_differ(ROW, replace(ROW, max=3.5, absmax=3.5)) == "max"
    assert rows_differ(ROW, replace(ROW, nan_count=1)) == "nan_count"
    # Without fingerprints (records that predate them) every statistic is compared exactly.
    bare = replace(ROW, fingerprint=None)
    assert rows_differ(bare, replace(bare, mean=0.125000001)) == "mean"
