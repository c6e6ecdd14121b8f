"""Replay loops and comparisons on the real demo pipeline: bit-identical when healthy, the first diverging
module when a block is nondeterministic, the initial noise when two seeds are compared."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.engine.errors import GhostError
from ghostviewer.record import RunRecord, StudyRecord

PROMPT = "a red circle on a blue background"
STEPS = 2  # every divergence here is at step 0; bit-identical replays do not depend on the count


def _run(pipe, runs_dir: Path, **kwargs) -> dict:
    return api.run(pipe, PROMPT, steps=STEPS, runs_dir=runs_dir, **kwargs)


@pytest.fixture(scope="module")
def seeds_4_and_5(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """Two healthy runs, seeds 4 and 5, only read by the tests (a replay's study goes beside its original)."""
    runs = tmp_path_factory.mktemp("replay-runs")
    return _run(demo_loaded.pipe, runs, seed=4), _run(demo_loaded.pipe, runs, seed=5)


@pytest.mark.slow
def test_healthy_run_replays_bit_identical_20_of_20(demo_loaded, seeds_4_and_5: tuple[dict, dict]) -> None:
    original = seeds_4_and_5[0]
    report = api.replay(original["run_dir"], times=20, pipeline=demo_loaded.pipe)
    assert report["reproduced"] is True and report["reproduced_runs"] == 20 and report["times"] == 20
    assert report["first_divergence"] is None
    study = StudyRecord(report["study_dir"])
    assert study.kind == "replay" and study.status == "done"
    assert [r.role for r in study.runs()] == ["original"] + ["replay"] * 20
    assert study.progress == {"done": 20, "total": 20}
    # every recorded output carries a fingerprint: "same" means bit-identical, not close
    assert all(row.fingerprint is not None for row in RunRecord(original["run_dir"]).stats())


@pytest.mark.slow
def test_unseeded_noise_fault_diverges_at_its_block(demo_loaded, runs_dir: Path, capsys) -> None:
    original = _run(demo_loaded.pipe, runs_dir, seed=1, faults=["unseeded-noise"])
    report = api.replay(original["run_dir"], times=2, pipeline=demo_loaded.pipe)
    assert report["reproduced"] is False and report["reproduced_runs"] == 0
    divergence = report["first_divergence"]
    assert divergence["module"] == "unet.up_blocks.1.attentions.0"
    assert divergence["phase"] == "denoise" and divergence["step"] == 0 and divergence["run"] == 1
    # the same from the command line, which reloads the recorded source ("demo")
    original = api.run("demo", PROMPT, seed=1, steps=STEPS, runs_dir=runs_dir, device="cpu", faults=["unseeded-noise"])
    assert main(["replay", original["run_dir"], "--times", "2", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["reproduced"] is False
    assert document["first_divergence"]["module"] == "unet.up_blocks.1.attentions.0"


def test_replay_with_a_pipeline_the_user_patched(demo_loaded, runs_dir: Path) -> None:
    """A user who suspects their own module loops it through api.replay(pipeline=…)."""
    pipe = demo_loaded.pipe
    block = pipe.unet.mid_block.resnets[0]

    def flaky(_module, _args, output):  # a custom module that draws from the global RNG
        return output + 1e-3 * torch.randn(output.shape)

    handle = block.register_forward_hook(flaky)
    try:
        original = api.run(pipe, PROMPT, seed=2, steps=STEPS, runs_dir=runs_dir)
        report = api.replay(original["run_dir"], times=2, pipeline=pipe)
    finally:
        handle.remove()
    assert report["reproduced"] is False
    assert report["first_divergence"]["module"] == "unet.mid_block.resnets.0"


def test_compare_two_seeds_diverges_at_the_initial_noise(seeds_4_and_5: tuple[dict, dict]) -> None:
    a, b = seeds_4_and_5
    result = api.compare(a["run_dir"], b["run_dir"])
    assert result["same"] is False and result["settings_diff"] == {"seed": [4, 5]}
    assert result["first_divergence"]["module"] == "pipeline.prepare_latents"
    assert result["first_divergence"]["step"] == 0
    assert result["module_deltas"]["unet.mid_block"] > 0
    same = api.compare(a["run_dir"], a["run_dir"])
    assert same["same"] is True and same["first_divergence"] is None and same["settings_diff"] == {}


def test_cli_compare_and_replay_exit_codes(seeds_4_and_5: tuple[dict, dict], runs_dir: Path, capsys) -> None:
    a, b = seeds_4_and_5
    assert main(["compare", a["run_dir"], b["run_dir"], "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["first_divergence"]["module"] == "pipeline.prepare_latents"
    assert main(["compare", a["run_dir"], a["run_dir"]]) == 0
    assert "bit-identical" in capsys.readouterr().out
    assert main(["compare", a["run_dir"], str(runs_dir / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["replay", a["run_dir"], "--times", "0"]) == 2
    assert "--times" in capsys.readouterr().err


def test_replay_of_an_in_memory_run_needs_the_object(demo_loaded, runs_dir: Path) -> None:
    original = _run(demo_loaded.pipe, runs_dir, seed=3)
    with pytest.raises(GhostError, match="pipeline="):
        api.replay(original["run_dir"], times=1)


def test_a_swap_inside_one_output_is_named_at_that_module(demo_loaded, runs_dir: Path) -> None:
    """Two elements of unet.mid_block's output trade places at step 0: a plain sum of the bits would call that
    output unchanged and blame the next block; the position-weighted fingerprint names mid_block."""
    good = _run(demo_loaded.pipe, runs_dir)
    calls = []

    def swap(_module, _args, out):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 1:
            flat = out.view(-1)
            first = flat[0].clone()
            flat[0], flat[77] = flat[77], first
        return out

    handle = demo_loaded.pipe.unet.mid_block.register_forward_hook(swap)
    try:
        bad = _run(demo_loaded.pipe, runs_dir)
    finally:
        handle.remove()
    where = api.compare(good["run_dir"], bad["run_dir"])["first_divergence"]
    assert (where["module"], where["step"], where["what"]) == ("unet.mid_block", 0, "fingerprint"), where


def test_runs_whose_fingerprints_were_made_differently_compare_by_statistics(demo_loaded, runs_dir: Path) -> None:
    a = _run(demo_loaded.pipe, runs_dir)
    b = _run(demo_loaded.pipe, runs_dir)
    assert api.compare(a["run_dir"], b["run_dir"])["same"] is True
    db = sqlite3.connect(Path(b["run_dir"]) / "run.sqlite")  # b as an older GhostViewer wrote it: plain sums
    with db:
        environment = json.loads(db.execute("SELECT value FROM meta WHERE key = 'environment'").fetchone()[0])
        del environment["fingerprint"]
        db.execute("UPDATE meta SET value = ? WHERE key = 'environment'", (json.dumps(environment),))
        db.execute("UPDATE stats SET fp = fp + 12345")
    db.close()
    assert RunRecord(b["run_dir"]).fingerprint_kind == "sum"
    assert api.compare(a["run_dir"], b["run_dir"])["same"] is True  # not a false divergence
