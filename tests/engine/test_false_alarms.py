"""Healthy demo runs are never flagged (a subset of benchmarks/false_alarms.py's 100 runs)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.false_alarms import count_false_alarms, healthy_prompts


def test_no_false_alarms_on_healthy_runs(demo_loaded, runs_dir: Path) -> None:
    report = count_false_alarms(healthy_prompts(6, seed=23), [0, 1], runs_dir, demo_loaded)
    assert report["runs"] == 12
    assert report["false_alarms"] == []
