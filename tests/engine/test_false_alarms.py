"""Healthy demo runs are never flagged (a subset of benchmarks/false_alarms.py's 100 runs), drift and off_prompt
included: the runs use the demo's shipped baseline, which none of them helped build."""

from __future__ import annotations

from pathlib import Path

from benchmarks.false_alarms import count_false_alarms, healthy_prompts
from ghostviewer.analysis.baseline import CHANNEL_MARGIN, COLOUR_MARGIN, DRIFT_MARGIN
from ghostviewer.analysis.baseline_store import SHIPPED_BASELINES


def test_no_false_alarms_on_healthy_runs(demo_loaded, runs_dir: Path) -> None:
    report = count_false_alarms(healthy_prompts(6, seed=23), [1000, 1001], runs_dir, demo_loaded)
    assert report["runs"] == 12
    assert report["false_alarms"] == []
    shipped = {path.stem for path in SHIPPED_BASELINES.glob("*.json")}
    assert report["baselines"] and set(report["baselines"]) <= shipped  # every run was checked against it
    assert report["worst_scores"]["off_prompt"] == 0.0
    margins = {"module": DRIFT_MARGIN, "channel": CHANNEL_MARGIN, "subspace": CHANNEL_MARGIN, "colour": COLOUR_MARGIN}
    for check, (excess, where) in report["headroom"].items():
        assert excess < margins[check] / 2, (check, excess, where)  # healthy runs stay far inside
