"""`export --issue`: ISSUE.md in diffusers' template sections, and a reproduction that runs without GhostViewer and
makes the recorded image."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer import api
from ghostviewer.cli import main

# Runs the reproduction with every ghostviewer import refused: what a maintainer without GhostViewer has. The
# collector is off (nothing it frees matters to a tiny run; it would walk torch's import a dozen times).
WITHOUT_GHOSTVIEWER = ("import gc, runpy, sys; gc.disable(); sys.modules['ghostviewer'] = None; "
                       "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


@pytest.mark.slow
def test_issue_bundle_reproduces_the_image_with_diffusers_alone(tmp_path: Path, capsys) -> None:
    run = api.run("demo", "a red circle on a blue background", seed=3, steps=4, runs_dir=tmp_path / "runs")
    bundle = tmp_path / "report.zip"
    assert main(["export", run["run_dir"], "-o", str(bundle), "--issue"]) == 0
    with zipfile.ZipFile(bundle) as zf:
        issue = zf.read("ISSUE.md").decode()
        (tmp_path / "reproduce.py").write_bytes(zf.read("reproduce.py"))
    for section in ("### Describe the bug", "### Reproduction", "### Logs", "### System Info"):
        assert section in issue
    assert "StableDiffusionPipeline: the image is ok" in issue and "- diffusers version:" in issue
    listed = {f["name"] if isinstance(f, dict) else f for f in api.inspect(bundle)["files"]}
    assert {"ISSUE.md", "reproduce.py"} <= listed  # members like any other: listed, hashed, accepted on reading
    assert "ghostviewer" not in (tmp_path / "reproduce.py").read_text().split('"""')[2]  # the code imports none
    saved = tmp_path / "again.png"
    done = subprocess.run([sys.executable, "-c", WITHOUT_GHOSTVIEWER, str(tmp_path / "reproduce.py"), "--save",
                           str(saved)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    again = np.asarray(Image.open(saved), dtype=np.int16)
    recorded = np.asarray(Image.open(run["image"]).convert("RGB"), dtype=np.int16)
    assert again.shape == recorded.shape and np.abs(again - recorded).max() <= 1


def test_the_reproduction_checks_the_recorded_symptom() -> None:
    from ghostviewer.record.bundle_issue import reproduction

    entry = {"settings": {"prompt": "x", "seed": 4, "steps": 3, "guidance": 7.5, "source": "some/model",
                          "device": "cpu"},
             "pipeline": {"components": {"unet": {"dtype": "float16"}, "vae": {"dtype": "float32"},
                                         "text_encoder": {"dtype": "float16"},
                                         "scheduler": {"class": "EulerDiscreteScheduler"}}},
             "verdict": {"label": "nan"}, "environment": {"determinism": {"generator_device": "cuda"}}}
    code = reproduction(entry)
    compile(code, "reproduce.py", "exec")
    assert "torch_dtype=torch.float16" in code and "pipe.vae.to(torch.float32)" in code
    assert "EulerDiscreteScheduler.from_config" in code and "torch.Generator('cuda').manual_seed(4)" in code
    assert "bad = bad or bool(not np.isfinite(image).all())" in code  # in any of the call's images
    assert "for number, image in enumerate(images, 1):" in code and "sys.exit(1 if bad else 0)" in code


def test_env_prints_what_a_bug_report_needs(capsys) -> None:
    import json

    assert main(["env", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["packages"]["diffusers"] and report["packages"]["torch"]
    assert {"cuda_available", "attention", "determinism", "python", "platform"} <= set(report)
    assert main(["env"]) == 0
    assert "- PyTorch build:" in capsys.readouterr().out
