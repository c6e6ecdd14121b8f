"""The first anomaly of a run: each kind by its rule, the first in execution order, rows and columns alike."""

from __future__ import annotations

from ghostviewer.analysis.anomaly import COLLAPSE_RATIO, EXPLODE_FLOOR, AnomalyDetector
from ghostviewer.record import StatColumns
from ghostviewer.record.types import FP16_MAX
from tests.analysis.records import baseline_for, pipeline_rows, stat


def _kind(*rows) -> str | None:  # type: ignore[no-untyped-def]
    detector = AnomalyDetector()
    kinds = [detector.classify(row) for row in rows]
    return kinds[-1]


def test_each_kind_by_its_rule() -> None:
    assert _kind(stat("denoise", 0, "m", 0, nan=1, inf=3)) == "nan"  # nan before inf
    assert _kind(stat("denoise", 0, "m", 0, inf=1)) == "inf"
    assert _kind(stat("denoise", 0, "m", 0, absmax=FP16_MAX * 1.01)) == "overflow"
    assert _kind(stat("denoise", 0, "m", 0, absmax=FP16_MAX)) is None  # float16's largest value still fits
    assert _kind(stat("denoise", 0, "m", 0, std=0.0)) == "collapse"  # no variation over many elements
    assert _kind(stat("denoise", 0, "m", 0, std=0.0, shape=(1,))) is None  # one element has no spread
    assert _kind(stat("denoise", 0, "m", 0, std=0.0, shape=())) is None
    assert _kind(stat("denoise", 0, "m", 0)) is None


def test_collapse_and_explode_are_judged_against_the_modules_first_reading() -> None:
    first = stat("denoise", 0, "m", 0, std=1.0, absmax=2.0)
    assert _kind(first, stat("denoise", 1, "m", 1, std=COLLAPSE_RATIO * 0.5)) == "collapse"
    assert _kind(first, stat("denoise", 1, "m", 1, std=COLLAPSE_RATIO * 2)) is None
    assert _kind(first, stat("denoise", 1, "m", 1, absmax=EXPLODE_FLOOR * 2.5)) == "explode"  # > 1000 × 2
    assert _kind(first, stat("denoise", 1, "m", 1, absmax=EXPLODE_FLOOR * 1.5)) is None  # not 1000 × its first
    big = stat("denoise", 0, "m", 0, absmax=10.0)
    assert _kind(big, stat("denoise", 1, "m", 1, absmax=5000.0)) is None  # 500 × its first: not yet
    # Another module's reading is not this one's reference.
    assert _kind(first, stat("denoise", 1, "other", 1, absmax=EXPLODE_FLOOR * 2.5)) is None


def test_feed_finds_the_first_in_execution_order_and_keeps_it() -> None:
    rows = pipeline_rows(steps=3, bad={(1, "unet.mid"): {"nan": 2}, (1, "unet.up"): {"inf": 1},
                                       (2, "unet.down"): {"std": 0.0}})
    detector = AnomalyDetector()
    assert detector.feed(rows[:4]) is None  # encode and step 0
    first = detector.feed(rows[4:])
    assert first == {"phase": "denoise", "step": 1, "module": "unet.mid", "kind": "nan"}
    assert detector.feed([stat("encode", None, "x", 99, inf=1)]) is first  # the first one stays
    assert detector.first is first


def test_feed_columns_is_feed() -> None:
    rows = pipeline_rows(steps=3, bad={(2, "unet.up"): {"absmax": 1e6}})
    columns = StatColumns()
    for row in rows:
        for name in ("phase", "step", "module", "call", "seq", "shape", "dtype", "min", "max", "mean", "std",
                     "absmax", "nan_count", "inf_count", "fingerprint"):
            getattr(columns, name).append(getattr(row, name))
    by_columns, by_rows = AnomalyDetector(), AnomalyDetector()
    assert by_columns.feed_columns(columns) == by_rows.feed(rows) == {
        "phase": "denoise", "step": 2, "module": "unet.up", "kind": "overflow"}
    assert by_columns.feed_columns(StatColumns()) is by_columns.first
    assert AnomalyDetector().feed_columns(StatColumns()) is None


def test_drift_against_a_baseline_carries_z_and_stat() -> None:
    baseline = baseline_for(pipeline_rows(), steps=2)  # scale 0.05 round every healthy value
    rows = pipeline_rows(bad={(1, "unet.mid"): {"std": 1.5}, (1, "unet.up"): {"mean": 2.0}})
    assert AnomalyDetector().feed(rows) is None  # without a baseline no drift is looked for
    first = AnomalyDetector(baseline).feed(rows)
    assert first == {"phase": "denoise", "step": 1, "module": "unet.mid", "kind": "drift", "z": 10.0, "stat": "std"}
    assert AnomalyDetector(baseline).feed(pipeline_rows(bad={(1, "unet.mid"): {"std": 1.25}})) is None  # in margin
    # The rules that need no baseline come first: a NaN output is a nan, not a drift.
    nan = pipeline_rows(bad={(1, "unet.mid"): {"std": 1.5, "nan": 1}})
    assert AnomalyDetector(baseline).feed(nan)["kind"] == "nan"  # type: ignore[index]


def test_channel_means_are_checked_for_encode_and_decode_outputs() -> None:
    from ghostviewer.analysis.envelope import Envelope

    zeros = (0.0,) * 4
    channels = {("decode", None, "vae.decoder"): (Envelope(zeros, (0.05,) * 4, zeros, zeros), None)}
    baseline = baseline_for(pipeline_rows(), steps=2, channels=channels)
    means: dict[tuple[str, str], list[float]] = {("decode", "vae.decoder"): [0.0, 0.0, -1.0, 0.0]}
    first = AnomalyDetector(baseline, means).feed(pipeline_rows())
    assert first == {"phase": "decode", "step": None, "module": "vae.decoder", "kind": "drift", "z": -20.0,
                     "stat": "channel_mean[2]"}
    means[("decode", "vae.decoder")] = [0.0, 0.0, 0.1, 0.0]  # within 6 × 0.05 of the healthy range
    assert AnomalyDetector(baseline, means).feed(pipeline_rows()) is None
