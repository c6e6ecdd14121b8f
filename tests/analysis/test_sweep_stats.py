"""Sweep statistics: the one failure rule, and failure rates per prompt and seed, from rows or a real study."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.analysis.sweep_stats import SweepStats, is_failure, verdict_of
from ghostviewer.record import StudyWriter
from tests.analysis.records import pipeline_rows, write_run

NAN = {"phase": "denoise", "step": 1, "module": "pipeline.prepare_latents", "kind": "nan"}


def test_the_failure_rule() -> None:
    assert is_failure("ok", None) is False and is_failure(None, None) is False
    assert is_failure("nan", None) and is_failure("off_prompt", None)
    assert is_failure("ok", NAN)  # an anomaly fails the run even when the image looks fine (the CLI exits 1)
    assert is_failure("ok", None, "failed") and is_failure(None, None, "failed")  # the pipeline itself raised
    assert is_failure("ok", {}) is False


def test_verdict_of_a_run_dict() -> None:
    assert verdict_of({"verdict": {"label": "blank", "scores": {}}}) == "blank"
    assert verdict_of({"verdict": "noise"}) == "noise"
    assert verdict_of({"verdict": None}) is None and verdict_of({}) is None and verdict_of({"verdict": {}}) is None


def test_rates_per_prompt_and_per_seed() -> None:
    stats = SweepStats()
    for seed in range(4):
        assert stats.add("a red circle", seed, "nan" if seed == 2 else "ok", None) is (seed == 2)
        stats.add("a blue star", seed, "ok", NAN if seed >= 2 else None)
    assert stats.add("a blue star", 9, None, None, "cancelled") is False  # not counted: a resume makes it again
    assert (stats.failed, stats.total, stats.rate) == (3, 8, 3 / 8)
    assert stats.failure_rate() == {"a red circle": 0.25, "a blue star": 0.5}  # in the order first seen
    assert stats.failure_rate_by_seed() == {"0": 0.0, "1": 0.0, "2": 1.0, "3": 0.5}
    assert stats.table("prompt") == [("a red circle", 1, 4, 0.25), ("a blue star", 2, 4, 0.5)]
    assert stats.table("seed")[2] == (2, 2, 2, 1.0)
    assert stats.summary() == "failure rate 38 % (3/8)"
    data = stats.to_json()
    assert data["verdicts"] == {"ok": 7, "nan": 1} and data["first_anomaly_modules"] == {NAN["module"]: 2}
    assert (data["failed"], data["total"], data["summary"]) == (3, 8, "failure rate 38 % (3/8)")


def test_an_empty_sweep_rates_zero() -> None:
    stats = SweepStats()
    assert stats.rate == 0.0 and stats.summary() == "failure rate 0 % (0/0)" and stats.failure_rate() == {}


def test_seeds_sort_as_numbers_and_rates_are_rounded() -> None:
    stats = SweepStats.from_rows([({"prompt": "p", "seed": s}, "ok" if s != 10 else "blank", None, "done")
                                  for s in (10, 9, 100, 2)])
    assert list(stats.failure_rate_by_seed()) == ["2", "9", "10", "100"]
    for prompt_seed in range(3):
        stats.add("third", prompt_seed, "nan" if prompt_seed == 0 else "ok", None)
    assert stats.failure_rate()["third"] == 0.333333


def test_run_dicts_and_failed_runs_without_a_verdict() -> None:
    stats = SweepStats()
    stats.add_run({"prompt": "p", "seed": 3, "verdict": {"label": "ok"}, "first_anomaly": None, "status": "done"})
    stats.add_run({"prompt": "p", "seed": None, "status": "failed"})  # a seed of None counts as 0
    assert (stats.failed, stats.total) == (1, 2) and stats.verdicts == {"ok": 1, "failed": 1}
    assert stats.failure_rate_by_seed() == {"0": 1.0, "3": 0.0}


def test_from_a_real_study_counts_its_members_only(tmp_path: Path) -> None:
    study = StudyWriter.create(tmp_path, "sweep", {"prompts": ["a", "b"], "seeds": [0, 1]}, total=4)
    for prompt in ("a", "b"):
        for seed in (0, 1):
            bad = prompt == "b" and seed == 1
            verdict = {"label": "noise" if bad else "ok"}
            run = write_run(study.runs_dir, pipeline_rows(), settings={"prompt": prompt, "seed": seed},
                            verdict=verdict)
            summary = {"verdict": verdict, "first_anomaly": None, "status": "done"}
            study.add_run(run, {"prompt": prompt, "seed": seed}, summary=summary)
    study.add_run(study.runs_dir / "reference", {"reference": 0}, role="reference", summary={"verdict": "nan"})
    study.finish("done")
    stats = SweepStats.from_study(study.path)
    assert (stats.failed, stats.total) == (1, 4)
    assert stats.failure_rate() == {"a": 0.0, "b": 0.5} and stats.failure_rate_by_seed() == {"0": 0.0, "1": 0.5}
    assert SweepStats.from_study(str(study.path)).to_json() == stats.to_json()
