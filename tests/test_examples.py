"""The examples run as a user would run them — the service example in this process as `python
examples/watch_service.py ...` runs it (tests/script_in_process.py: torch and diffusers are not imported a second
time); `ghostviewer record --` watches an unmodified program in a real process of its own (its exit code is the
program's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ghostviewer.record import StudyRecord
from tests.script_in_process import run_script

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import sys
import torch
from diffusers import DiffusionPipeline
pipe = DiffusionPipeline.from_pretrained(sys.argv[1])
pipe.set_progress_bar_config(disable=True)
for seed in (1, 2):
    pipe("a red circle", num_inference_steps=3, generator=torch.Generator("cpu").manual_seed(seed))
sys.exit(3)
"""


@pytest.mark.slow
def test_the_watched_service_example_serves_and_keeps_a_summary(tmp_path: Path) -> None:
    done = run_script(ROOT / "examples" / "watch_service.py", "--self-test", "4", "--runs-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["calls"] == 4 and summary["failed"] == 0 and summary["kept"] == 0  # healthy: summaries only
    assert StudyRecord(summary["study_dir"]).summary()["kind"] == "watch"


@pytest.mark.slow
def test_record_runs_an_unmodified_program_and_keeps_its_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(PROGRAM)
    done = subprocess.run([sys.executable, "-m", "ghostviewer", "record", "--runs-dir", str(tmp_path / "runs"), "--",
                           "python", str(script), str(ROOT / "resources" / "demo-pipeline")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("ghostviewer: 2 pipeline calls watched, 0 failed")
    studies = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("watch-")]
    assert len(studies) == 1 and len(StudyRecord(studies[0]).runs()) == 2
    assert StudyRecord(studies[0]).params["program"] == f"app.py {ROOT / 'resources' / 'demo-pipeline'}"


def test_record_without_a_program_is_a_usage_error(capsys) -> None:
    from ghostviewer.cli import main

    assert main(["record", "--"]) == 2
    assert "nothing to run" in capsys.readouterr().err
