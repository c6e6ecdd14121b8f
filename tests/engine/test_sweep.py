"""Sweeps: prompts × seeds on the demo pipeline, recorded as a study; failure rates, resume, CLI, engine, Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ghostviewer.analysis.sweep_stats import SweepStats
from ghostviewer.cli import main as cli_main
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.sweep import run_sweep
from ghostviewer.engine.run.runner import CancelToken, execute_run
from ghostviewer.record import RunRecord, StudyRecord
from ghostviewer.spec import RunSpec

PROMPTS = ["a red circle on a blue background", "a green square on a white background",
           "a yellow star on a black background"]


def _key(run: dict) -> tuple:
    return (run["prompt"], run["seed"], (run["verdict"] or {}).get("label"), json.dumps(run["first_anomaly"]))


@pytest.mark.slow
def test_nan_latents_sweep_finds_exactly_the_poisoned_seeds(demo_loaded, runs_dir: Path) -> None:
    events: list[dict] = []
    result = run_sweep(PROMPTS, "0-9", pipeline=demo_loaded, steps=2, faults=["nan-latents"], runs_dir=runs_dir,
                       on_progress=events.append)
    assert result["total"] == 30 and len(result["runs"]) == 30 and result["status"] == "done"
    failing = sorted((r["prompt"], r["seed"]) for r in result["runs"] if r["first_anomaly"] or
                     (r["verdict"] or {}).get("label") != "ok")
    assert failing == sorted((p, 7) for p in PROMPTS)
    assert result["failed"] == 3
    assert result["failure_rate"] == dict.fromkeys(PROMPTS, 0.1)
    assert result["failure_rate_by_seed"]["7"] == 1.0
    assert sum(result["failure_rate_by_seed"].values()) == 1.0
    assert result["first_anomaly_modules"] == {"pipeline.prepare_latents": 3}
    progress = [e for e in events if e["event"] == "sweep_progress"]
    assert [e["done"] for e in progress] == list(range(1, 31)) and all(e["total"] == 30 for e in progress)
    assert all(e["rate"] > 0 and e["eta"] >= 0 for e in progress) and progress[-1]["eta"] == 0
    study = StudyRecord(result["study_dir"])  # the record alone gives the same statistics
    assert study.kind == "sweep" and study.status == "done" and len(study.runs()) == 30
    assert SweepStats.from_study(study).failure_rate() == result["failure_rate"]
    assert all(Path(r["run_dir"]).parent == study.runs_dir for r in result["runs"])


def test_a_cancelled_sweep_resumes_and_skips_what_is_done(demo_loaded, runs_dir: Path) -> None:
    token = CancelToken()

    def stop_after_two(event: dict) -> None:
        if event["event"] == "sweep_progress" and event["done"] == 2:
            token.cancel()

    first = run_sweep(PROMPTS[:2], "3-5", pipeline=demo_loaded, steps=2, runs_dir=runs_dir, cancel=token,
                      on_progress=stop_after_two)
    assert first["status"] == "cancelled" and len(first["runs"]) == 2
    study = StudyRecord(first["study_dir"])
    assert study.status == "cancelled" and study.progress == {"done": 2, "total": 6}
    events: list[dict] = []
    second = run_sweep(study_dir=first["study_dir"], pipeline=demo_loaded, on_progress=events.append)
    made = [(e["prompt"], e["seed"]) for e in events if e["event"] == "sweep_progress"]
    assert len(made) == 4 and set(made).isdisjoint({(r["prompt"], r["seed"]) for r in first["runs"]})
    assert second["status"] == "done" and second["total"] == 6 and len(second["runs"]) == 6
    assert len({(r["prompt"], r["seed"]) for r in second["runs"]}) == 6
    assert StudyRecord(first["study_dir"]).status == "done"
    assert {r["run_dir"] for r in first["runs"]} <= {r["run_dir"] for r in second["runs"]}
    assert all(r["steps"] == 2 for r in second["runs"])  # the carried-over runs too
    for run in second["runs"]:  # carried over or made now, the same run dict: the record's verdict, with scores
        assert run["verdict"] == RunRecord(Path(run["run_dir"])).verdict and run["elapsed_s"] is not None


def test_resume_refuses_settings_it_would_ignore(runs_dir: Path, capsys) -> None:
    from ghostviewer.cli import build_parser, main
    from ghostviewer.cli.sweep import RECORDED_BY_THE_SWEEP

    args = build_parser().parse_args(["sweep", "--resume", "STUDY"])
    assert {name: getattr(args, name) for name in RECORDED_BY_THE_SWEEP} == RECORDED_BY_THE_SWEEP  # the defaults
    code = main(["sweep", "--resume", str(runs_dir / "any-study"), "--seeds", "5", "--steps", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "--seeds, --steps would change them" in err


@pytest.mark.slow
def test_sweep_recording_keeps_verdict_and_first_anomaly(demo_loaded, runs_dir: Path) -> None:
    """A sweep's run (sweep.run_one) writes step tensors every k steps, keeps its writes until it ends and records no
    fingerprints; statistics still go in at every step, so the judgement — loud, silent (drift against the
    baseline) or none — is that of a full run, and the two compare as the same run (by their statistics)."""
    from ghostviewer.analysis.compare import compare_runs
    from ghostviewer.engine.loops.sweep_spec import SWEEP_TENSORS_EVERY, run_one

    cases = (("red circle", "short-prompt-attention", 0, 6), (PROMPTS[1], "nan-latents", 17, 6),
             (PROMPTS[0], "scaled-block", 3, 20), (PROMPTS[0], None, 1, 6))
    for prompt, fault, seed, steps in cases:
        settings = RunSpec(prompt=prompt, seed=seed, steps=steps, faults=(fault,) if fault else ())
        full = execute_run(demo_loaded, settings, runs_dir)
        light = run_one(demo_loaded, settings, runs_dir, None, SWEEP_TENSORS_EVERY)
        assert light["verdict"]["label"] == full["verdict"]["label"]
        assert light["first_anomaly"] == full["first_anomaly"]
        assert (fault is None) == (full["first_anomaly"] is None)  # every ghost here shows (a drift for scaled-block)
        record = RunRecord(Path(light["run_dir"]))
        kept = [s for s in range(steps) if s % SWEEP_TENSORS_EVERY == 0 or s == steps - 1]
        assert [s for s in range(steps) if record.step_tensors(s)] == kept
        assert len(record.stats("unet.mid_block", phase="denoise")) == steps
        assert record.fingerprint_kind == "none" and all(r.fingerprint is None for r in record.stats())
        assert compare_runs(full["run_dir"], light["run_dir"])["reproduced"]


def test_a_sweep_keeps_fingerprints_when_asked(demo_loaded, runs_dir: Path) -> None:
    for fingerprints in (False, True):
        result = run_sweep(["a red circle"], "0", pipeline=demo_loaded, steps=2, runs_dir=runs_dir,
                           fingerprints=fingerprints)
        record = RunRecord(result["runs"][0]["run_dir"])
        assert all((r.fingerprint is not None) == fingerprints for r in record.stats())
        assert StudyRecord(result["study_dir"]).params["fingerprints"] is fingerprints


def test_list_entries_with_their_own_seed_and_duplicates(demo_loaded, runs_dir: Path) -> None:
    items = [{"prompt": PROMPTS[0], "seed": 42, "steps": 3}, PROMPTS[1], PROMPTS[1]]
    result = run_sweep(items, "1,2", pipeline=demo_loaded, steps=2, runs_dir=runs_dir)
    assert result["planned"] == 5 and result["total"] == len(result["runs"]) == 3  # a duplicate runs once
    assert [(r["prompt"], r["seed"], r["steps"]) for r in result["runs"]] == [
        (PROMPTS[0], 42, 3), (PROMPTS[1], 1, 2), (PROMPTS[1], 2, 2)]
    with pytest.raises(GhostError, match="unknown fault"):
        run_sweep(items, "1", pipeline=demo_loaded, faults=["no-such-fault"], runs_dir=runs_dir)


def test_cli_sweep_json_exit_codes_and_malformed_lists(tmp_path: Path, runs_dir: Path, capsys) -> None:  # noqa: ANN001
    listing = tmp_path / "prompts.txt"
    listing.write_text(f"# two prompts\n{PROMPTS[0]}\n\n{PROMPTS[1]}\n", encoding="utf-8")
    code = cli_main(["sweep", str(listing), "--seeds", "6-7", "--steps", "2", "--fault", "nan-latents", "--json",
                     "--runs-dir", str(runs_dir)])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["failed"] == 2 and out["total"] == 4
    assert set(out) >= {"runs", "failure_rate", "failed", "total", "failure_rate_by_seed", "study_dir"}
    assert out["failure_rate"] == {PROMPTS[0]: 0.5, PROMPTS[1]: 0.5}
    healthy = cli_main(["sweep", str(listing), "--seeds", "1", "--steps", "2", "--json", "--runs-dir", str(runs_dir)])
    assert healthy == 0 and json.loads(capsys.readouterr().out)["failed"] == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": "b", "seed": 1}\n{"prompt": \n', encoding="utf-8")
    before = sorted(runs_dir.iterdir())
    assert cli_main(["sweep", str(bad), "--runs-dir", str(runs_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ghostviewer: bad.jsonl line 3:") and "\n" not in err
    assert sorted(runs_dir.iterdir()) == before  # refused before any study or run was made
    assert cli_main(["sweep", str(listing), "--seeds", "9-1", "--runs-dir", str(runs_dir)]) == 2


def test_engine_process_sweep_command(demo_loaded, tmp_path: Path, runs_dir: Path) -> None:
    from ghostviewer.engine.server import EngineSession

    events: list[dict] = []
    session = EngineSession(lambda event, **fields: events.append({"event": event, **fields}))
    session.loaded = demo_loaded
    listing = tmp_path / "p.csv"
    listing.write_text(f"prompt,negative\n{PROMPTS[0]},\n{PROMPTS[2]},blurry\n", encoding="utf-8")
    session.handle({"cmd": "sweep", "id": 9, "list": str(listing), "seeds": "6-7", "runs_dir": str(runs_dir),
                    "settings": {"steps": 2, "faults": ["nan-latents"], "source": "demo"}})
    names = [e["event"] for e in events]
    assert names[0] == "sweep_started" and names[-1] == "sweep_finished" and names.count("sweep_progress") == 4
    progress = [e for e in events if e["event"] == "sweep_progress"]
    assert all(e["id"] == 9 and {"done", "total", "rate", "eta", "run_dir", "verdict"} <= set(e) for e in progress)
    assert events[-1]["failed"] == 2 and "runs" not in events[-1]
    assert RunRecord(progress[-1]["run_dir"]).settings["source"] == "demo"  # a real source: replayable
    session._cancelled_early.add(10)  # a cancel that arrives before the command: nothing runs
    session.handle({"cmd": "sweep", "id": 10, "list": str(listing), "seeds": "1-3", "runs_dir": str(runs_dir),
                    "settings": {"steps": 2}})
    assert events[-1]["event"] == "sweep_finished" and events[-1]["status"] == "cancelled"
    assert events[-1]["total"] == 0 and events[-1]["planned"] == 6


@pytest.mark.slow
def test_ray_sweep_gives_the_same_verdicts_as_the_local_one(demo_loaded, runs_dir: Path) -> None:
    ray = pytest.importorskip("ray")
    local = run_sweep(PROMPTS[:2], "6-7", pipeline=demo_loaded, steps=2, faults=["nan-latents"], runs_dir=runs_dir)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a stray cluster
    try:
        remote = run_sweep(PROMPTS[:2], "6-7", source="demo", steps=2, faults=["nan-latents"], runs_dir=runs_dir,
                           ray="auto")
    finally:
        if started_here:
            ray.shutdown()
    assert sorted(map(_key, remote["runs"])) == sorted(map(_key, local["runs"]))
    assert remote["failure_rate"] == local["failure_rate"] and remote["failed"] == 2
    study = StudyRecord(remote["study_dir"])  # the driver recorded the actors' runs in one study
    assert len(study.runs()) == 4 and all(r.run_dir.parent == study.runs_dir for r in study.runs())
    assert all(RunRecord(r.run_dir).complete for r in study.runs())
