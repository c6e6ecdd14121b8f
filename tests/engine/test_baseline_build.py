"""Building a baseline (a `baseline` study), finding it again, and runs saying which baseline they used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ghostviewer.analysis.baseline import PROMPT_TOKENS
from ghostviewer.analysis.baseline_file import load_baseline
from ghostviewer.cli import main
from ghostviewer.demo.baseline_prompts import baseline_prompts
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loops.baseline_build import build_baseline
from ghostviewer.engine.loops.recorded import wrap_pipeline
from ghostviewer.engine.run.baseline_lookup import find_baseline
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing.prompt_tokens import token_ids
from ghostviewer.record import RunRecord, StudyRecord
from ghostviewer.spec import RunSpec
from tests.engine.tiny_pipelines import build_tiny_sd


def _events(result: dict, kind: str) -> list[str]:
    return [e.message for e in RunRecord(Path(result["run_dir"])).events() if e.kind == kind]


def test_build_find_and_use(demo_loaded, runs_dir: Path) -> None:
    result = build_baseline(demo_loaded, baseline_prompts(10), list(range(10)), runs_dir, steps=3, pairing="zip")
    path = Path(result["baseline"])
    assert path == runs_dir / "baselines" / f"{result['key']}.json" and path.stat().st_size < 1 << 20
    tokens = load_baseline(path).meta[PROMPT_TOKENS]  # the words its text encoder envelope speaks for
    assert tokens == token_ids(demo_loaded.pipe, baseline_prompts(10)) and len(tokens) > 10
    assert result["healthy"] + len(result["excluded"]) == result["runs"] == 10 and result["healthy"] >= 8
    study = StudyRecord(result["study_dir"])
    assert study.status == "done" and len(study.runs()) == 10 and study.params["steps"] == 3
    baseline = load_baseline(path)
    assert baseline.settings["steps"] == 3 and baseline.channels and baseline.image is not None
    assert {k[2] for k in baseline.channels} >= {"vae.decoder.up_blocks.2.resnets.1", "text_encoder.final_layer_norm"}

    settings = RunSpec(prompt="a red circle on a blue background", seed=300, steps=3)
    resolved = {**settings.to_dict(), "scheduler": "ddim", "width": 64, "height": 64, "guidance": 7.5}  # the demo's
    assert find_baseline(demo_loaded, resolved, runs_dir).key == result["key"]
    used = execute_run(demo_loaded, settings, runs_dir)
    assert any(m.startswith("using baseline") and str(runs_dir) in m for m in _events(used, "baseline"))
    other = execute_run(demo_loaded, RunSpec(prompt="a red circle", seed=1, steps=2), runs_dir)
    note = _events(other, "baseline")[0]  # the 3-step baseline judges 2 steps on normalised time, and says so
    assert note.startswith("using baseline") and "steps 2 vs 3: compared on normalised time" in note
    assert other["baseline"]["match"] == "architecture" and other["baseline"]["run_steps"] == 2
    assert "channel_means" in {f["name"] for f in RunRecord(Path(other["run_dir"])).files()}


def test_a_pipeline_built_in_memory_has_no_baseline(runs_dir: Path) -> None:
    """(One loaded from a folder and still holding its weights has its baseline: test_memory_identity.py.)"""
    memory = wrap_pipeline(build_tiny_sd())
    with pytest.raises(GhostError, match="weight hashes"):
        build_baseline(memory, ["a red circle"], [0], runs_dir)
    result = execute_run(memory, RunSpec(prompt="a red circle on a blue background", steps=2), runs_dir)
    assert "weight hashes" in _events(result, "baseline")[0]
    assert _events(result, "prompt_check")[0].startswith("prompt check")  # CLIP: used if local, else skipped


def test_cli_baseline_build(capsys, runs_dir: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# a few\na red circle on a blue background\na green square on a white background\n")
    code = main(["baseline", "build", "--pipeline", "demo", "--prompts", str(prompts), "--seeds", "0-3",
                 "--steps", "2", "--runs-dir", str(runs_dir), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["runs"] == 8 and Path(out["baseline"]).is_file()
    assert main(["baseline", "build", "--pipeline", "demo", "--seeds", "9-1", "--runs-dir", str(runs_dir)]) == 2
    assert "backwards" in capsys.readouterr().err


def test_a_baseline_build_records_the_dtype_it_loaded_so_its_runs_replay(runs_dir: Path) -> None:
    """Its runs were recorded without --dtype: a replay of one reloaded float32 and diverged at once."""
    from ghostviewer import api

    try:
        api.baseline("demo", ["a red circle on a blue background"], "0", steps=2, dtype="bfloat16", device="cpu",
                     runs_dir=runs_dir)
    except GhostError:  # two steps may draw nothing healthy: the run is recorded all the same
        pass
    (study,) = runs_dir.glob("baseline-*")
    (run_dir,) = [r.run_dir for r in StudyRecord(study).runs()]
    assert RunRecord(run_dir).settings["dtype"] == "bfloat16"
