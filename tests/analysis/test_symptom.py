"""The oracle of every bisection: a bad run's symptom, and whether a re-run still shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.analysis.baseline_file import save_baseline
from ghostviewer.analysis.envelope import Envelope
from ghostviewer.analysis.symptom import Symptom, describe_anomaly, is_healthy, verdict_label
from ghostviewer.record import RunRecord
from tests.analysis.records import baseline_for, pipeline_rows, write_run

NAN_AT_MID = {"phase": "denoise", "step": 1, "module": "unet.mid", "kind": "nan"}
DRIFT_AT_MID = {"phase": "denoise", "step": 1, "module": "unet.mid", "kind": "drift", "z": 20.0, "stat": "std"}


def test_labels_and_health() -> None:
    assert verdict_label({"label": "nan", "scores": {}}) == "nan" and verdict_label("blank") == "blank"
    assert verdict_label(None) is None and verdict_label({"scores": {}}) is None
    assert is_healthy({"label": "ok"}, None) and is_healthy("ok", None)
    assert not is_healthy("ok", NAN_AT_MID) and not is_healthy("noise", None) and not is_healthy(None, None)
    assert describe_anomaly(NAN_AT_MID) == "nan at unet.mid (denoise step 1)"
    assert describe_anomaly({"phase": "decode", "step": None, "module": "vae", "kind": "inf"}) == "inf at vae (decode)"


def test_the_symptom_of_a_run() -> None:
    assert Symptom.of({"label": "ok"}, None) is None  # healthy: nothing to look for
    symptom = Symptom.of({"label": "nan"}, NAN_AT_MID)
    assert symptom is not None and (symptom.label, symptom.kind, symptom.phase) == ("nan", "nan", "denoise")
    assert symptom.describe() == "verdict nan, first anomaly nan at unet.mid (denoise step 1)"
    only_anomaly = Symptom.of("ok", NAN_AT_MID)
    assert only_anomaly is not None and only_anomaly.label is None
    assert only_anomaly.describe() == "first anomaly nan at unet.mid (denoise step 1)"
    only_label = Symptom.of("noise", None)
    assert only_label is not None and only_label.kind is None and only_label.describe() == "verdict noise"
    assert not only_label.judges_drift


def test_a_crashed_or_cancelled_rerun_tells_nothing() -> None:
    symptom = Symptom.of("nan", NAN_AT_MID)
    assert symptom is not None
    rows = pipeline_rows(bad={(1, "unet.mid"): {"nan": 2}})
    assert symptom.shown_by("nan", NAN_AT_MID, rows, "failed") is None
    assert symptom.shown_by("nan", NAN_AT_MID, rows, "cancelled") is None


def test_the_anomaly_kind_anywhere_from_its_phase_on_is_the_symptom() -> None:
    symptom = Symptom.of("noise", NAN_AT_MID)
    assert symptom is not None
    later = pipeline_rows(bad={(0, "unet.down"): {"std": 0.0}, (1, "unet.up"): {"nan": 1}})
    # A bypass that adds an earlier, different anomaly (a collapse) must not hide the NaN still there downstream.
    collapse = {"phase": "denoise", "step": 0, "module": "unet.down", "kind": "collapse"}
    assert symptom.shown_by("noise", collapse, later) is True
    in_decode = pipeline_rows(bad={(None, "vae.decoder"): {"nan": 5}})
    assert symptom.shown_by("noise", None, in_decode) is True
    in_encode = pipeline_rows(bad={(None, "text_encoder"): {"nan": 5}})  # before the symptom's phase
    assert symptom.shown_by("noise", None, in_encode) is False
    assert symptom.shown_by("ok", None, pipeline_rows()) is False


def test_the_kinds_are_found_by_the_anomaly_rules() -> None:
    overflow = Symptom.of("ok", {**NAN_AT_MID, "kind": "overflow"})
    assert overflow is not None
    assert overflow.shown_by("ok", None, pipeline_rows(bad={(1, "unet.up"): {"absmax": 70000.0}})) is True
    assert overflow.shown_by("ok", None, pipeline_rows(bad={(1, "unet.up"): {"nan": 1}})) is False  # another kind
    # Collapse is judged against the module's first reading in the re-run, as in the bad run.
    collapse = Symptom.of("blank", {**NAN_AT_MID, "kind": "collapse"})
    assert collapse is not None
    assert collapse.shown_by("noise", None, pipeline_rows(bad={(1, "unet.mid"): {"std": 1e-6}})) is True
    assert collapse.shown_by("noise", None, pipeline_rows(bad={(1, "unet.mid"): {"std": 0.5}})) is False


def test_a_nan_image_always_counts_but_coarse_labels_do_not_beside_an_anomaly() -> None:
    nan = Symptom.of("nan", NAN_AT_MID)
    assert nan is not None and nan.shown_by({"label": "nan"}, None, pipeline_rows()) is True
    noisy = Symptom.of("noise", NAN_AT_MID)  # a noisy re-run is what bypassing half a U-Net gives anyway
    assert noisy is not None and noisy.shown_by("noise", None, pipeline_rows()) is False


def test_a_label_alone_decides_when_the_bad_run_had_no_anomaly_its_rows_show() -> None:
    symptom = Symptom.of("saturated", None)
    assert symptom is not None
    assert symptom.shown_by("saturated", None, pipeline_rows()) is True
    assert symptom.shown_by("blank", None, pipeline_rows()) is False  # a different failure: absent, not healthy
    assert symptom.shown_by("ok", None, pipeline_rows()) is False


def test_a_drift_without_a_baseline_counts_as_the_reruns_first_anomaly() -> None:
    symptom = Symptom.of("ok", DRIFT_AT_MID)
    assert symptom is not None and not symptom.judges_drift
    assert symptom.shown_by("ok", {**DRIFT_AT_MID, "module": "unet.up"}, pipeline_rows()) is True
    assert symptom.shown_by("ok", NAN_AT_MID, pipeline_rows()) is False
    assert symptom.shown_by("ok", None, pipeline_rows()) is False
    off_prompt = Symptom.of("off_prompt", DRIFT_AT_MID)
    assert off_prompt is not None and off_prompt.shown_by("off_prompt", None, pipeline_rows()) is True


@pytest.fixture()
def drifted() -> Symptom:
    baseline = baseline_for(pipeline_rows(), steps=2)
    symptom = Symptom.of("off_prompt", DRIFT_AT_MID, baseline)
    assert symptom is not None and symptom.judges_drift
    return symptom


def test_the_first_drift_module_still_drifting_is_the_symptom(drifted: Symptom) -> None:
    assert drifted.shown_by("ok", None, pipeline_rows(bad={(1, "unet.mid"): {"std": 2.0}})) is True
    assert drifted.shown_by("ok", None, pipeline_rows(bad={(1, "unet.mid"): {"std": 1.2}})) is False  # in margin
    # Drift elsewhere (downstream of a patched or bypassed block) is not judged: only M at its step.
    assert drifted.shown_by("ok", None, pipeline_rows(bad={(1, "unet.up"): {"std": 2.0}})) is False
    assert drifted.shown_by("ok", None, pipeline_rows(bad={(0, "unet.mid"): {"std": 2.0}})) is False


def test_with_the_drift_module_bypassed_only_what_ran_before_the_bypass_is_judged(drifted: Symptom) -> None:
    assert drifted.hidden_by("unet.mid") and drifted.hidden_by("unet") and not drifted.hidden_by("unet.up")
    upstream = pipeline_rows(bad={(0, "unet.down"): {"std": 2.0}})  # before the first bypassed output (step 0)
    assert drifted.shown_by("ok", None, upstream, bypassed=["unet.mid"]) is True
    downstream = pipeline_rows(bad={(0, "unet.up"): {"std": 2.0}, (1, "unet.mid"): {"std": 2.0}})
    assert drifted.shown_by("ok", None, downstream, bypassed=["unet.mid"]) is False


def test_context_labels_do_not_count_when_the_drift_can_be_judged(drifted: Symptom) -> None:
    assert drifted.shown_by("off_prompt", None, pipeline_rows()) is False
    assert drifted.shown_by("color_cast", None, pipeline_rows()) is False


def test_a_channel_drift_of_a_decode_output_is_judged_by_its_channel_means() -> None:
    rows = pipeline_rows()
    zeros = (0.0, 0.0, 0.0)
    baseline = baseline_for(rows, steps=2, channels={("decode", None, "vae.decoder"): (
        Envelope(zeros, (0.05,) * 3, zeros, zeros), None)})
    anomaly = {"phase": "decode", "step": None, "module": "vae.decoder", "kind": "drift"}
    symptom = Symptom.of("ok", anomaly, baseline)
    assert symptom is not None
    means = {("decode", "vae.decoder"): [0.0, 1.0, 0.0]}
    assert symptom.shown_by("ok", None, rows, channel_means=means) is True
    assert symptom.shown_by("ok", None, rows, channel_means={("decode", "vae.decoder"): [0.0, 0.1, 0.0]}) is False
    assert symptom.shown_by("ok", None, rows) is False  # no channel means: only the row's own stats


def test_of_record_reads_the_baseline_a_drift_was_judged_by(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    baseline = baseline_for(pipeline_rows(), steps=2)
    save_baseline(baseline, runs / "baselines" / f"{baseline.key}.json")
    note = ("baseline", "checked against a baseline", {"baseline": baseline.key})
    bad = RunRecord(write_run(runs, pipeline_rows(bad={(1, "unet.mid"): {"std": 2.0}}), steps=2,
                              first_anomaly=DRIFT_AT_MID, events=[note]))
    symptom = Symptom.of_record(bad)
    assert symptom is not None and symptom.judges_drift and symptom.baseline is not None
    assert symptom.baseline.key == baseline.key
    unknown = ("baseline", "checked", {"baseline": "f" * 16})  # no such file: judged as without a baseline
    other = Symptom.of_record(RunRecord(write_run(runs, pipeline_rows(), first_anomaly=DRIFT_AT_MID, events=[unknown])))
    assert other is not None and other.baseline is None
    nan_run = write_run(runs, pipeline_rows(), verdict={"label": "nan"}, first_anomaly=NAN_AT_MID, events=[note])
    nan = Symptom.of_record(RunRecord(nan_run))
    assert nan is not None and nan.baseline is None and nan.label == "nan"  # a baseline is read for a drift only
    assert Symptom.of_record(RunRecord(write_run(runs, pipeline_rows()))) is None
