"""Bisection on the ghost lab: by bypass (within ⌈log2 N⌉ + 1 re-runs), by settings (ddmin), with patching."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.analysis.bisect_plan import budget, choose_half, covered, inside
from ghostviewer.analysis.ddmin import ddmin
from ghostviewer.analysis.symptom import Symptom
from ghostviewer.cli import main
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.loops.bisect_blocks import bisect_run
from ghostviewer.engine.loops.patch_run import patch_run
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.record import RunRecord, StatRow, StudyRecord
from ghostviewer.spec import RunSpec
from tests.engine.test_runner import assert_no_leftovers

STAR = "a yellow star on a black background"
# The fp16 tests decode at 32 px: float16 convolutions on a CPU cost ~1 s a decode at the demo's 64 px, and the
# overflow (a ×16384 gain on one block) does not depend on the size.
SMALL = {"width": 32, "height": 32}


@pytest.fixture(scope="module")
def half_vae():
    """The demo pipeline with its VAE in float16, loaded once for this module."""
    return load_pipeline("demo", device="cpu", dtype="float32,vae=float16")


@pytest.fixture(scope="module")
def short_prompt_bad(demo_loaded, tmp_path_factory) -> dict:
    """One short-prompt-attention run, read (never written) by the tests that bisect or patch it."""
    return _bad(demo_loaded, tmp_path_factory.mktemp("bad"), "red circle", "short-prompt-attention", steps=4)


def _bad(loaded, runs_dir: Path, prompt: str, fault: str, **kwargs) -> dict:
    result = execute_run(loaded, RunSpec(prompt=prompt, faults=(fault,), source="demo", **kwargs), runs_dir)
    assert result["verdict"]["label"] != "ok" or result["first_anomaly"] is not None
    return result


def _within_budget(result: dict) -> None:
    n = result["candidates"]
    # ⌈log2 N⌉ + 1, plus the first anomaly's own block and its parent tried alone first (at most two)
    assert math.ceil(math.log2(n)) + 1 <= result["budget"] <= math.ceil(math.log2(n)) + 3
    assert 1 <= result["reruns"] <= result["budget"], result["trail"]
    assert result["reruns"] == len(result["trail"])


def _confirmed(result: dict) -> None:
    """The culprit was bypassed alone in the trail, and that removed the symptom."""
    alone = [e for e in result["trail"] if e["bypassed"] == [result["culprit"]]]
    assert alone and alone[-1]["symptom"] is False


# -- the plan and the oracle, without torch --------------------------------------------------------------


def test_halving_isolates_any_single_culprit_within_budget() -> None:
    rng = random.Random(5)
    for _ in range(300):
        nodes: list[str] = []
        for i in range(rng.randint(1, 24)):
            parent = rng.choice(nodes) if nodes and rng.random() < 0.5 else rng.choice("abc")
            nodes.append(f"{parent}.{i}")
        for culprit in nodes:
            possible, reruns = list(nodes), 0
            while len(possible) > 1:
                chosen = choose_half(possible)
                cover = covered(chosen, possible)
                assert len(cover) == len(possible) // 2
                reruns += 1
                gone = any(inside(culprit, block) for block in chosen)
                possible = cover if gone else [p for p in possible if p not in cover]
            assert possible == [culprit] and reruns + 1 <= budget(len(nodes))


def test_ddmin_finds_a_one_minimal_failing_subset() -> None:
    calls: list[list[str]] = []

    def fails(subset: list[str]) -> bool:
        calls.append(subset)
        return {"dtype:vae", "scheduler"} <= set(subset)

    units = ["dtype:text_encoder", "dtype:unet", "dtype:vae", "guidance", "scheduler", "steps"]
    assert sorted(ddmin(units, fails)) == ["dtype:vae", "scheduler"]
    assert len(calls) == len({frozenset(c) for c in calls})  # never the same subset twice
    assert ddmin(["dtype"], fails) == ["dtype"] and len(calls) == len({frozenset(c) for c in calls})


def _row(phase: str, module: str, seq: int, nan: int = 0, step: int | None = None) -> StatRow:
    step = 0 if phase == "denoise" and step is None else step
    return StatRow(phase, step, module, 0, seq, (1, 4), "float32", -1.0, 1.0, 0.0, 0.5, 1.0, nan, 0)


def test_a_different_failure_is_not_the_symptom_and_not_healthy() -> None:
    assert Symptom.of({"label": "ok"}, None) is None
    symptom = Symptom.of({"label": "nan"}, {"phase": "denoise", "step": 0, "module": "unet.x", "kind": "nan"})
    assert symptom is not None
    clean = [_row("encode", "text_encoder.a", 0), _row("denoise", "unet.x", 1), _row("decode", "vae.y", 2)]
    assert symptom.shown_by({"label": "noise"}, None, clean) is False  # a different failure: symptom gone
    assert symptom.shown_by({"label": "nan"}, None, clean) is True  # the same label
    later = [*clean, _row("decode", "vae.z", 3, nan=5)]
    masked = {"phase": "denoise", "step": 0, "module": "unet.w", "kind": "collapse"}
    assert symptom.shown_by({"label": "blank"}, masked, later) is True  # a NaN behind an earlier collapse counts
    earlier = [_row("encode", "text_encoder.a", 0, nan=1), *clean[1:]]
    assert symptom.shown_by({"label": "blank"}, None, earlier) is False  # before the symptom's phase: not it
    assert symptom.shown_by(None, None, [], status="failed") is None


# -- bisection by bypass on the ghost lab ----------------------------------------------------------------


def test_bisection_names_the_collapsing_attention_block(demo_loaded, short_prompt_bad: dict, runs_dir: Path) -> None:
    bad = short_prompt_bad
    events: list[dict] = []
    result = bisect_run(bad["run_dir"], runs_dir=runs_dir, on_progress=events.append)
    assert result["culprit"] == "unet.down_blocks.1.attentions.0", result["trail"]
    _within_budget(result)
    _confirmed(result)
    assert result["patching"]["healthy"] is True and result["patching"]["calls_patched"] == 4
    study = StudyRecord(result["study_dir"])
    assert study.kind == "bisect" and study.status == "done"
    roles = [run.role for run in study.runs()]
    assert roles[0] == "bad" and roles.count("trial") == result["reruns"] and "patched" in roles
    kinds = [e["event"] for e in events]
    assert kinds[0] == "bisect_started" and "trial_step" in kinds and kinds[-1] == "bisect_finished"
    assert_no_leftovers(demo_loaded.pipe)


@pytest.mark.slow
def test_bisection_names_the_overflowing_vae_block_in_float16(half_vae, runs_dir: Path) -> None:
    bad = _bad(half_vae, runs_dir, STAR, "fp16-vae-overflow", steps=2, dtype="float32,vae=float16", **SMALL)
    assert bad["first_anomaly"]["kind"] == "inf"
    result = bisect_run(bad["run_dir"], pipeline=half_vae.pipe, runs_dir=runs_dir)
    assert result["culprit"] == "vae.decoder.up_blocks.1.resnets.0", result["trail"]
    assert all(m.startswith("vae.decoder.") for m in result["candidate_blocks"])  # pruned to the decode phase
    _within_budget(result)
    _confirmed(result)
    assert_no_leftovers(half_vae.pipe)


@pytest.mark.parametrize(
    ("fault", "prompt", "seed", "upstream"),
    [
        ("nan-latents", "a green square on a white background", 17, "pipeline.prepare_latents"),
        ("inf-trigger-word", "a purple cross on a yellow background", 0, "text_encoder.embeddings"),
    ],
)
def test_a_fault_upstream_of_every_block_has_no_culprit_and_says_why(
    demo_loaded, runs_dir: Path, fault: str, prompt: str, seed: int, upstream: str
) -> None:
    bad = _bad(demo_loaded, runs_dir, prompt, fault, seed=seed, steps=4)
    result = bisect_run(bad["run_dir"], pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert result["culprit"] is None and upstream in result["reason"]
    assert result["reruns"] == 0 and result["candidates"] == 0  # nothing runs before it: no re-run wasted
    assert StudyRecord(result["study_dir"]).status == "done"


def test_a_healthy_run_has_nothing_to_bisect(demo_loaded, runs_dir: Path, capsys) -> None:
    ok = execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=4), runs_dir)
    with pytest.raises(GhostError, match="nothing to bisect: the run is healthy"):
        bisect_run(ok["run_dir"], pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert main(["bisect", ok["run_dir"], "--runs-dir", str(runs_dir), "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["exit_code"] == 2 and err.strip().count("\n") == 0 and "healthy" in err


def test_patching_an_upstream_block_does_not_heal(demo_loaded, short_prompt_bad: dict, runs_dir: Path) -> None:
    bad = short_prompt_bad
    result = patch_run(bad["run_dir"], "unet.down_blocks.0.resnets.0", pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert result["healthy"] is False and result["symptom"] is True and result["verdict"] == "nan"
    assert_no_leftovers(demo_loaded.pipe)


@pytest.mark.parametrize("hooked", ["unet.mid_block.resnets.1.conv2", "unet.mid_block.resnets.1"])
def test_api_bisect_with_a_pipeline_the_user_patched(demo_loaded, runs_dir: Path, hooked: str) -> None:
    """The user's NaN hook sits inside the culprit block, or on the block itself: a bypass of the block must
    silence a hook on the block too, or the block could never be named."""
    pipe = demo_loaded.pipe
    handle = resolve_module(pipe, hooked).register_forward_hook(lambda _m, _a, out: out + float("nan"))
    try:
        bad = api.run(pipe, "a blue square on a white background", steps=4, runs_dir=runs_dir)
        assert bad["first_anomaly"]["module"].startswith("unet.mid_block")
        result = api.bisect(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert result["culprit"] == "unet.mid_block.resnets.1", result["trail"]
    _within_budget(result)
    # no fault-free run is known: the next seed is tried as a reference, and the user's hook fails it too
    assert result["patching"] is None and "not confirmed by patching" in result["patching_note"]
    assert_no_leftovers(pipe)


# -- settings bisection and the command line -------------------------------------------------------------


@pytest.mark.slow
def test_settings_bisection_names_dtype_for_fp16_vae_overflow(demo_loaded, runs_dir: Path) -> None:
    fp16 = load_pipeline("demo", device="cpu", dtype="float16")
    bad = _bad(fp16, runs_dir, STAR, "fp16-vae-overflow", steps=2, dtype="float16", **SMALL)
    good = execute_run(demo_loaded, RunSpec(prompt=STAR, steps=2, guidance=6.0, faults=("fp16-vae-overflow",),
                                            **SMALL), runs_dir)
    result = api.bisect(bad["run_dir"], good["run_dir"], runs_dir=runs_dir)
    assert result["culprit_settings"] == {"dtype": ["float32", "float32,vae=float16"]}, result["trail"]
    assert result["culprit_differences"] == ["dtype:vae"]
    assert set(result["differences"]) == {"dtype:text_encoder", "dtype:unet", "dtype:vae", "guidance"}
    assert 1 <= result["reruns"] == len(result["trail"]) <= 4
    assert StudyRecord(result["study_dir"]).kind == "bisect"


@pytest.mark.slow
def test_cli_bisect_json(short_prompt_bad: dict, runs_dir: Path, capsys) -> None:
    # in-process: the command loads the recorded source itself, as `ghostviewer bisect` does (`python -m
    # ghostviewer` is sys.exit(main(argv)))
    code = main(["bisect", short_prompt_bad["run_dir"], "--runs-dir", str(runs_dir), "--json"])
    out, err = capsys.readouterr()
    assert code == 1, err  # a culprit is a problem found in the pipeline
    result = json.loads(out)
    assert result["culprit"] == "unet.down_blocks.1.attentions.0"
    assert {"culprit", "reruns", "trail", "study_dir"} <= set(result)
    assert set(result["trail"][0]) >= {"bypassed", "verdict", "first_anomaly", "run_dir", "symptom"}
    assert "trial 1:" in err and "Traceback" not in err


def test_bisection_names_the_drifting_block_of_a_silent_ghost(demo_loaded, runs_dir: Path) -> None:
    """scaled-block at the demo's defaults (the shipped baseline's settings): a clean image, a drift only. A bypass
    moves the stats downstream of it, so drift there is not the symptom; the block itself is named and patched."""
    bad = _bad(demo_loaded, runs_dir, "a yellow circle on a blue background", "scaled-block", seed=21)
    anomaly = bad["first_anomaly"]
    assert anomaly["kind"] == "drift" and anomaly["module"] == "unet.down_blocks.1.resnets.0"
    result = bisect_run(bad["run_dir"], pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert result["culprit"] == "unet.down_blocks.1.resnets.0", result["trail"]
    _within_budget(result)
    _confirmed(result)
    assert result["patching"]["symptom"] is False and result["patching"]["healthy"] is True
    # The oracle itself: drift at or after a bypassed block is the bypass's; M judged only where it ran untouched.
    symptom = Symptom.of(bad["verdict"], anomaly)
    assert symptom is not None and not symptom.judges_drift  # no baseline given: the old rule
    record = RunRecord(bad["run_dir"])
    judged = Symptom.of_record(record)  # with the baseline its run recorded (the demo's shipped one)
    assert judged is not None and judged.judges_drift and judged.hidden_by("unet.down_blocks.1.resnets.0")
    rows = record.stats()
    assert judged.shown_by({"label": "ok"}, anomaly, rows) is True  # the bad run shows its own drift
    assert judged.shown_by({"label": "off_prompt"}, None, rows, bypassed=["unet.down_blocks.1.resnets.0"]) is False
    assert_no_leftovers(demo_loaded.pipe)


def test_an_anomaly_after_every_block_is_not_said_to_start_upstream(demo_loaded, runs_dir: Path) -> None:
    """A zeroed VAE output layer lies in no bypassable block: bisection ends without a culprit, within its
    budget, and says the fault is most likely that layer, not "upstream"."""
    layer = "vae.decoder.conv_out"
    handle = resolve_module(demo_loaded.pipe, layer).register_forward_hook(lambda _m, _a, out: out * 0)
    try:
        bad = execute_run(demo_loaded, RunSpec(prompt="red circle", steps=2, source="demo"), runs_dir)
        assert bad["first_anomaly"]["kind"] == "collapse", bad["first_anomaly"]
        result = bisect_run(bad["run_dir"], pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert result["culprit"] is None and result["reruns"] <= result["budget"]
    assert "lies in no bypassable block" in result["reason"] and "upstream" not in result["reason"], result["reason"]


def test_a_failure_that_does_not_come_back_blames_no_block(demo_loaded, runs_dir: Path) -> None:
    """A run recorded as nan whose re-runs are all healthy (an intermittent ghost that did not return): one
    unchanged re-run past the budget shows the failure does not come back, and no block is named."""
    good = execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=2, source="demo"),
                       runs_dir)
    assert good["verdict"]["label"] == "ok" and good["first_anomaly"] is None
    db = sqlite3.connect(Path(good["run_dir"]) / "run.sqlite")
    with db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'verdict'", (json.dumps({"label": "nan"}),))
    db.close()
    result = bisect_run(good["run_dir"], pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert result["culprit"] is None and "did not come back" in result["reason"], result
    assert result["reruns"] <= result["budget"] + 1 and result["trail"][-1]["bypassed"] == []
    assert all(entry["healthy"] for entry in result["trail"])
