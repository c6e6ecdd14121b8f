"""The headless contract: JSON shapes, exit codes, one-line errors (CONTRACT.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ghostviewer.cli import main
from ghostviewer.record import RunRecord


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_run_json_is_one_document_and_healthy_exits_zero(runs_dir: Path) -> None:
    # A real subprocess: what a CI script sees, stdout holding exactly one JSON document.
    env = {**os.environ, "GHOSTVIEWER_LOG_DIR": str(runs_dir.parent / "logs")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ghostviewer",
            "run",
            "--pipeline",
            "demo",
            "--prompt",
            "a red circle on a blue background",
            "--seed",
            "3",
            "--runs-dir",
            str(runs_dir),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) >= {"run_dir", "prompt", "seed", "steps", "verdict", "first_anomaly", "image", "elapsed_s"}
    assert result["verdict"]["label"] == "ok" and result["first_anomaly"] is None
    assert result["seed"] == 3 and result["steps"] == 20
    assert RunRecord(Path(result["run_dir"])).complete
    assert "Traceback" not in proc.stderr


def test_fault_run_exits_one_with_the_anomaly(capsys, runs_dir: Path) -> None:
    code, out, _ = _cli(
        capsys,
        "run",
        "--prompt",
        "red circle",
        "--fault",
        "short-prompt-attention",
        "--steps",
        "4",
        "--runs-dir",
        str(runs_dir),
        "--json",
    )
    assert code == 1
    result = json.loads(out)
    assert result["first_anomaly"]["kind"] == "nan"
    assert result["first_anomaly"]["module"].startswith("unet.down_blocks.1.attentions.0")


def test_blocks_json(capsys) -> None:
    code, out, _ = _cli(capsys, "blocks", "--pipeline", "demo", "--json")
    assert code == 0
    blocks = {b["module"]: b for b in json.loads(out)["blocks"]}
    assert blocks["unet.down_blocks.0"] == {
        "module": "unet.down_blocks.0",
        "kind": "DownBlock2D",
        "bypassable": False,
        "bypass": None,
    }
    assert blocks["unet.mid_block.resnets.0"]["bypass"] == "identity"
    assert blocks["unet.up_blocks.1.resnets.0"]["bypass"] == "zero_residual"  # takes the skip concatenation
    assert blocks["text_encoder.encoder.layers.1"]["kind"] == "CLIPEncoderLayer"
    assert any(name.startswith("vae.decoder.") for name in blocks)


def test_demo_list_faults_json(capsys) -> None:
    code, out, _ = _cli(capsys, "demo", "--list-faults", "--json")
    assert code == 0
    faults = json.loads(out)["faults"]
    assert {"name": "short-prompt-attention"}.items() <= faults[0].items() or any(
        f["name"] == "short-prompt-attention" for f in faults
    )
    assert all(set(f) >= {"name", "description"} for f in faults)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--prompt", "x", "--steps", "0"], "steps must be at least 1"),
        (["run", "--prompt", "x", "--seed", "-7"], "seed must be between"),
        (["run", "--prompt", "x", "--pipeline", "/no/such/folder"], "no such pipeline"),
        (["run", "--prompt", "x", "--fault", "gremlin"], "unknown fault"),
        (["run", "--prompt", "x", "--bypass", "unet.down_blocks.0"], "cannot be bypassed"),
        (["run", "--prompt", "x", "--bypass", "unet.mid_block@5:2"], "step range is empty"),
        (["run", "--prompt", "x", "--dtype", "float13"], "unknown dtype"),
        (["run"], "--prompt"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_exits_two_with_one_line(capsys, runs_dir: Path, argv: list[str], message: str) -> None:
    code, out, err = (
        _cli(capsys, *argv, "--runs-dir", str(runs_dir)) if argv[0] == "run" and len(argv) > 1 else _cli(capsys, *argv)
    )
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out == ""
    assert not list(runs_dir.iterdir())


def test_an_internal_error_is_not_blamed_on_the_input(capsys, monkeypatch, tmp_path: Path) -> None:
    from ghostviewer import cli

    def crash(args: object) -> int:
        raise KeyError("a bug\nof ours")

    monkeypatch.setenv("GHOSTVIEWER_LOG_DIR", str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "inspect", crash)
    code, out, err = _cli(capsys, "inspect", str(tmp_path / "x.zip"))
    assert code == 1 and out == ""  # 1, never 2 (bad input): CONTRACT allows only 0/1/2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("ghostviewer: internal error") and "KeyError" in err and str(tmp_path) in err
    assert "Traceback" in (tmp_path / "ghostviewer-cli.log").read_text()


def test_with_a_runs_dir_the_log_goes_beside_the_runs(capsys, monkeypatch, tmp_path: Path) -> None:
    from ghostviewer import cli

    def crash(args: object) -> int:
        raise KeyError("a bug")

    elsewhere = tmp_path / "default-log"
    monkeypatch.setenv("GHOSTVIEWER_LOG_DIR", str(elsewhere))
    monkeypatch.setitem(cli.COMMANDS, "replay", crash)
    code, _, err = _cli(capsys, "replay", str(tmp_path / "run"), "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and str(tmp_path / "runs" / "logs" / "ghostviewer-cli.log") in err
    assert "Traceback" in (tmp_path / "runs" / "logs" / "ghostviewer-cli.log").read_text()
    assert not elsewhere.exists() or not any(elsewhere.iterdir())


def test_a_line_break_in_an_argument_stays_one_line(capsys, tmp_path: Path) -> None:
    code, _, err = _cli(capsys, "inspect", str(tmp_path / "two\nlines.zip"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "two\\nlines" in err


def test_not_a_pipeline_folder(capsys, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, _, err = _cli(capsys, "blocks", "--pipeline", str(tmp_path))
    assert code == 2 and "model_index.json" in err


def test_single_file_checkpoint_with_config(capsys, tmp_path: Path) -> None:
    from tests.engine.tiny_pipelines import save_tiny_sd, save_tiny_sd_single_file

    config = save_tiny_sd(tmp_path / "family")
    checkpoint, _ = save_tiny_sd_single_file(tmp_path / "model.safetensors")
    code, out, _ = _cli(capsys, "blocks", "--pipeline", str(checkpoint), "--config", str(config), "--json")
    assert code == 0
    assert any(b["module"].startswith("unet.") for b in json.loads(out)["blocks"])


def test_one_name_given_as_a_string_is_one_name(runs_dir: Path) -> None:
    """api.run(faults="nan-latents") is that fault, not the faults 'n', 'a', ...; likewise bypass and capture."""
    from ghostviewer import api
    from ghostviewer.record import RunRecord

    result = api.run("demo", "a red circle", steps=2, faults="nan-latents", bypass="unet.mid_block",
                     capture="unet.mid_block", runs_dir=runs_dir)
    settings = RunRecord(result["run_dir"]).settings
    assert (settings["faults"], settings["bypass"], settings["capture"]) == (
        ["nan-latents"], ["unet.mid_block"], ["unet.mid_block"])


def test_isolate_and_export_take_allow_pickle() -> None:
    from ghostviewer.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["isolate", "RUN", "--module", "m", "-o", "out", "--allow-pickle"]).allow_pickle
    assert parser.parse_args(["export", "RUN", "-o", "b.zip", "--with-inputs", "--allow-pickle"]).allow_pickle
    assert not parser.parse_args(["isolate", "RUN", "--module", "m", "-o", "out"]).allow_pickle


def test_a_pipeline_that_is_not_one_is_said_so() -> None:
    from ghostviewer import api
    from ghostviewer.engine.errors import GhostError

    for source in (None, 5, object()):
        with pytest.raises(GhostError, match="a pipeline is 'demo', a folder"):
            api.blocks(source)
