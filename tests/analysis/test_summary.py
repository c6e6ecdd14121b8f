"""The app log's one-line summaries of a finished run, read from a real record."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.analysis.summary import anomaly_line, run_end_lines, verdict_line
from ghostviewer.record import RunRecord
from tests.analysis.records import pipeline_rows, write_run

NAN = {"phase": "denoise", "step": 1, "module": "unet.mid", "kind": "nan"}


def test_verdict_line() -> None:
    assert verdict_line(None) == "verdict: none" and verdict_line({}) == "verdict: none"
    assert verdict_line({"label": "ok"}) == "verdict: ok"
    line = verdict_line({"label": "noise", "scores": {"std": 0.2345678, "noise": 0.75, "note": "text", "n": 3}})
    assert line == "verdict: noise (std=0.235 noise=0.75 n=3)"  # only numbers, three significant digits


def test_anomaly_line_quotes_the_anomalous_output(tmp_path: Path) -> None:
    rows = pipeline_rows(bad={(1, "unet.mid"): {"nan": 4, "absmax": 12.5}})
    record = RunRecord(write_run(tmp_path, rows, verdict={"label": "nan"}, first_anomaly=NAN))
    assert anomaly_line(record, None) == "first anomaly: none"
    assert anomaly_line(record, NAN) == ("first anomaly: nan in unet.mid (denoise step 1): "
                                         "tensor[1,4,8,8] float32 x∈[-12.5, 12.5] μ=0 σ=1 NaN!")
    decode = {"phase": "decode", "step": None, "module": "vae.decoder", "kind": "collapse"}
    assert anomaly_line(record, decode).startswith("first anomaly: collapse in vae.decoder (decode): tensor[")
    missing = {"phase": "denoise", "step": 0, "module": "not.traced", "kind": "drift"}
    assert anomaly_line(record, missing) == "first anomaly: drift in not.traced (denoise step 0)"  # nothing to quote


def test_run_end_lines(tmp_path: Path) -> None:
    run = write_run(tmp_path, pipeline_rows(), verdict={"label": "ok", "scores": {"std": 0.25}})
    assert run_end_lines(str(run)) == ["verdict: ok (std=0.25)", "first anomaly: none"]
    assert run_end_lines(str(tmp_path / "no-such-run")) == []
    (tmp_path / "not-a-run").mkdir()
    assert run_end_lines(str(tmp_path / "not-a-run")) == []
