"""Isolate and fuzz (issue 11, parts 4 and 5): a module's real inputs, weights and config from a re-run, a repro
that needs no GhostViewer, and a fuzz that finds the short-prompt-attention collapse at short sequences only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ghostviewer.cli import main
from ghostviewer.engine.isolation.fuzz import fuzz_module, seq_lengths
from ghostviewer.engine.isolation.isolate import isolate_module
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec
from tests.engine.test_runner import assert_no_leftovers
from tests.script_in_process import run_script

FAULT_BLOCK = "unet.down_blocks.1.attentions.0"
RESNET = "unet.mid_block.resnets.0"


@pytest.fixture(scope="module")
def cases(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("isolate")
    runs = root / "runs"
    runs.mkdir()
    bad = execute_run(demo_loaded, RunSpec(prompt="red circle", seed=0, steps=2,
                                               faults=("short-prompt-attention",)), runs)
    good = execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", seed=0, steps=2), runs)
    return {
        "bad_run": bad["run_dir"], "good_run": good["run_dir"], "root": root,
        "bad": isolate_module(bad["run_dir"], FAULT_BLOCK, out_dir=root / "fault", pipeline=demo_loaded),
        "good": isolate_module(good["run_dir"], RESNET, out_dir=root / "resnet", pipeline=demo_loaded),
    }


def _repro(path: str) -> subprocess.CompletedProcess:
    """repro.py in a fresh interpreter, out of the repository and with no path to it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-X", "importtime", path], capture_output=True, text=True,
                          cwd=Path(path).parent, env=env, timeout=180)


def _imported(stderr: str) -> set[str]:
    lines = [line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in lines}


def test_isolate_saves_real_inputs_weights_and_config(cases: dict, demo_loaded) -> None:
    result, out = cases["bad"], Path(cases["bad"]["out_dir"])
    assert result["module"] == FAULT_BLOCK and result["step"] == 0  # the first anomaly's step
    assert result["class"].endswith("Transformer2DModel") and result["rebuildable"] and result["rebuilt_by"] == "config"
    for name in ("inputs.safetensors", "inputs.json", "weights.safetensors", "module.json", "repro.py", "README.md"):
        assert (out / name).is_file(), name
    assert not [p for p in out.iterdir() if p.suffix in (".pt", ".pkl", ".bin", ".ckpt")]
    inputs = result["inputs"]
    assert inputs["hidden_states"] == {"shape": [2, 96, 8, 8], "dtype": "float32"}
    assert inputs["encoder_hidden_states"]["shape"] == [2, 32, 64] and inputs["return_dict"] is False
    assert result["output"]["nan"] == result["output"]["numel"] > 0
    assert result["faults"] == ["short-prompt-attention"]
    assert "Injected fault" in (out / "README.md").read_text()
    assert json.loads((out / "module.json").read_text())["build"]["values"]["in_channels"] == 96
    assert_no_leftovers(demo_loaded.pipe)


@pytest.mark.slow
def test_repro_runs_without_ghostviewer_and_exits_1_on_nan(cases: dict) -> None:
    source = Path(cases["bad"]["repro"]).read_text()
    assert "import ghostviewer" not in source and "from ghostviewer" not in source
    assert "Injected fault (GhostViewer ghost lab): short-prompt-attention" in source
    proc = _repro(cases["bad"]["repro"])
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "NaN 12288" in proc.stdout
    imported = _imported(proc.stderr)
    assert {"torch", "diffusers", "safetensors"} <= imported and "ghostviewer" not in imported


@pytest.mark.slow
def test_healthy_resnet_repro_exits_0(cases: dict) -> None:
    result = cases["good"]
    assert result["class"].endswith("ResnetBlock2D") and result["rebuilt_by"] == "kwargs" and not result["faults"]
    # in this process (no second torch import), GhostViewer and the tests refused while it runs; the fault's repro
    # above runs in a fresh interpreter
    proc = run_script(result["repro"], forbid=("ghostviewer", "tests"))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "NaN 0  Inf 0" in proc.stdout


def test_fuzz_finds_the_collapse_at_short_sequences_only(cases: dict) -> None:
    table = fuzz_module(cases["bad"]["out_dir"])
    seq = {row["value"]: row for row in table["cases"] if row["vary"] == "seq_len"}
    assert sorted(seq) == seq_lengths(32)
    broken = sorted(length for length, row in seq.items() if row["broken"])
    assert broken == [3, 4]  # BOS + 1 or 2 words + EOS: the fault's "at most 2 words"
    assert all(seq[n]["why"] == "nan" for n in broken)
    assert not any(row["broken"] for length, row in seq.items() if length > 4)
    assert table["broken"] > 0 and table["total"] == len(table["cases"]) - table["skipped"]
    healthy = fuzz_module(cases["good"]["out_dir"])
    assert healthy["broken"] == 0 and {row["vary"] for row in healthy["cases"]} >= {"spatial", "batch", "scale"}


def test_fuzz_takes_a_module_and_inputs_in_memory() -> None:
    import torch
    from diffusers.models.attention_processor import Attention

    torch.manual_seed(0)
    attn = Attention(query_dim=16, cross_attention_dim=8, heads=2, dim_head=8)
    table = fuzz_module((attn, {"hidden_states": torch.randn(2, 4, 16), "encoder_hidden_states": torch.randn(2, 5, 8)}))
    assert table["broken"] == 0 and any(row["vary"] == "seq_len" for row in table["cases"])


def test_cli_isolate_fuzz_json_exits_1(cases: dict, capsys: pytest.CaptureFixture[str]) -> None:
    out = cases["root"] / "cli"
    code = main(["isolate", cases["bad_run"], "--module", FAULT_BLOCK, "-o", str(out), "--fuzz", "--json"])
    stdout, _ = capsys.readouterr()
    result = json.loads(stdout)
    assert code == 1 and result["fuzz"]["broken_values"]["seq_len"] == [3, 4]
    assert (out / "repro.py").is_file()


def test_cli_isolate_unknown_module_exits_2_with_close_names(cases: dict, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["isolate", cases["bad_run"], "--module", "unet.down_blocks.1.atention.0", "-o",
                 str(cases["root"] / "nope"), "--json"])
    stdout, stderr = capsys.readouterr()
    assert code == 2 and json.loads(stdout)["exit_code"] == 2  # --json: the refusal as one JSON document
    assert len(stderr.strip().splitlines()) == 1 and FAULT_BLOCK in stderr
    code = main(["isolate", cases["bad_run"], "--module", RESNET, "--step", "9", "-o", str(cases["root"] / "n")])
    assert code == 2 and "outside" in capsys.readouterr().err


def test_engine_process_isolate_command(cases: dict, demo_loaded) -> None:
    from ghostviewer.engine.server import EngineSession

    events: list[dict] = []
    session = EngineSession(lambda event, **fields: events.append({"event": event, **fields}))
    session.loaded = demo_loaded
    command = {"cmd": "isolate", "id": 3, "run_dir": cases["good_run"], "module": RESNET, "step": 1,
               "out": str(cases["root"] / "engine"), "fuzz": True}
    session.handle(command)
    assert events[-1]["event"] == "isolated", events[-1]
    assert events[-1]["id"] == 3 and events[-1]["step"] == 1
    assert events[-1]["fuzz"]["total"] > 0
    recorded = {row.step: row for row in RunRecord(cases["good_run"]).stats(RESNET)}  # the run's own record
    assert events[-1]["output"]["mean"] == pytest.approx(recorded[1].mean, rel=1e-4, abs=1e-6)
    assert abs(recorded[1].mean - recorded[0].mean) > 1e-3  # so the step is the one asked for
    session.handle({**command, "id": 4, "module": "unet.nowhere"})
    assert events[-1]["event"] == "error" and events[-1]["id"] == 4 and "unknown module" in events[-1]["message"]


def test_denoiser_steps_count_new_timesteps() -> None:
    import torch

    from ghostviewer.engine.interventions.input_capture import DenoiserSteps

    steps, seen = DenoiserSteps(), []
    for t in (981, 981, 500, 500, 19):  # unbatched classifier-free guidance calls the denoiser twice a step
        steps(torch.nn.Identity(), (None, torch.tensor(t)), {})
        seen.append(steps.step)
    assert seen == [0, 0, 1, 1, 2]
