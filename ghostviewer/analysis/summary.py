"""One-line summaries of a finished run for the app log: its verdict, and its first anomaly with the anomalous
output's lovely-tensors line (the heat map tooltips' `row_summary`). Reads the record; no Qt."""

from __future__ import annotations

from typing import Any

from ghostviewer.analysis.stat_grid import fmt, row_summary
from ghostviewer.record import RecordError, RunRecord


def verdict_line(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "verdict: none"
    scores = verdict.get("scores") or {}
    numbers = " ".join(f"{k}={fmt(float(v))}" for k, v in scores.items() if isinstance(v, int | float))
    return f"verdict: {verdict.get('label')}" + (f" ({numbers})" if numbers else "")


def anomaly_line(record: RunRecord, anomaly: dict[str, Any] | None) -> str:
    if not anomaly:
        return "first anomaly: none"
    step = anomaly.get("step")
    where = f"{anomaly.get('phase')}" + ("" if step is None else f" step {step}")
    line = f"first anomaly: {anomaly.get('kind')} in {anomaly.get('module')} ({where})"
    try:
        rows = record.stats(str(anomaly.get("module")), phase=anomaly.get("phase"),
                            step=None if step is None else int(step))
    except RecordError:
        rows = []
    return line + (f": {row_summary(rows[0])}" if rows else "")


def run_end_lines(run_dir: str) -> list[str]:
    """The verdict and first-anomaly lines of a run folder ([] when it cannot be read)."""
    try:
        record = RunRecord(run_dir)
        return [verdict_line(record.verdict), anomaly_line(record, record.first_anomaly)]
    except (RecordError, OSError, ValueError, TypeError):
        return []
