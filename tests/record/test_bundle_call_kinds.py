"""A bug report of an img2img batch, or of a watched call, repeats the call that was made — not a text-to-image
call of the same prompt: the README's command takes the bundle's copy of the init image, its strength and batch;
a watched call is made again from its record (`ghostviewer replay`), and repro.py does both."""

from __future__ import annotations

import json
import shlex
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import StableDiffusionImg2ImgPipeline
from PIL import Image

import ghostviewer
from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.record import RunRecord
from ghostviewer.record.bundle_export import export_bundle
from tests.script_in_process import run_script

PROMPT = "a blue square on a yellow background"
INIT = Image.fromarray(np.full((64, 64, 3), (200, 40, 40), np.uint8))


def _unzipped(run_dir: str, where: Path) -> tuple[dict, Path]:
    bundle = where / "bug.zip"
    export_bundle([Path(run_dir)], bundle, issue_env="System Info: the test machine")
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(where / "bundle")
    manifest = json.loads((where / "bundle" / "manifest.json").read_text())
    return manifest["runs"][0], where / "bundle"


def _finals(run_dir: str | Path) -> list[np.ndarray]:
    images = sorted((Path(run_dir) / "images").glob("final*.png"))
    return [np.asarray(Image.open(p)) for p in images]


def test_an_img2img_batch_bundle_command_makes_the_same_images(demo_loaded, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    init = tmp_path / "init.png"
    INIT.save(init)
    run = api.run("demo", PROMPT, seed=4, steps=4, init_image=init, strength=0.5, batch=2, runs_dir=tmp_path / "runs")
    init.unlink()  # the user's file is gone: the bundle carries what the call got
    entry, folder = _unzipped(run["run_dir"], tmp_path)
    command = shlex.split(entry["command"])
    assert command[:2] == ["ghostviewer", "run"] and not entry["watched"]
    for flag, value in (("--init-image", f"runs/{entry['run_id']}/images/input_init_image.png"),
                        ("--strength", "0.5"), ("--batch", "2")):
        assert command[command.index(flag) + 1] == value, entry["command"]
    assert f"    {entry['command']}" in (folder / "README.txt").read_text()

    monkeypatch.chdir(folder)  # as the README says: where the bundle is unzipped
    assert main([*command[1:], "--runs-dir", str(tmp_path / "again"), "--json"]) == 0
    (again,) = (tmp_path / "again").iterdir()
    assert RunRecord(again).settings["kind"] == "img2img"
    assert [a.tobytes() for a in _finals(again)] == [b.tobytes() for b in _finals(run["run_dir"])]
    _diffusers_alone_makes(folder, run["run_dir"], images=2)


def _diffusers_alone_makes(folder: Path, run_dir: str, images: int) -> None:
    """ISSUE.md's reproduce.py, with diffusers alone (GhostViewer hidden), makes the run's first image again."""
    done = run_script(folder / "reproduce.py", "--save", str(folder / "again.png"), forbid=("ghostviewer", "tests"))
    assert done.returncode == 0, done.stdout + done.stderr  # healthy: no symptom in any image
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == [f"image {n}" for n in range(1, images + 1)]
    again = np.asarray(Image.open(folder / "again.png")).astype(int)
    assert np.abs(again - _finals(run_dir)[0].astype(int)).max() <= 1  # the same image (the PNG's rounding aside)


def test_a_watched_call_bundle_replays_it_from_its_record(demo_loaded, tmp_path: Path) -> None:
    pipe = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
    with ghostviewer.watch(pipe, runs_dir=tmp_path / "watched") as watcher:
        pipe([PROMPT, "a red circle on a blue background"], image=INIT, strength=0.5, num_inference_steps=4,
             generator=[torch.Generator().manual_seed(s) for s in (8, 9)])
    (run,) = watcher.runs
    entry, folder = _unzipped(run["run_dir"], tmp_path)
    assert entry["watched"] and entry["command"] == f"ghostviewer replay runs/{entry['run_id']}"
    readme = (folder / "README.txt").read_text()
    assert "made again from its record" in readme and f"    ghostviewer replay runs/{entry['run_id']}" in readme

    done = run_script(folder / "repro.py", "--runs-dir", str(tmp_path / "replays"))
    assert done.returncode == 0, done.stdout + done.stderr  # healthy, as recorded
    assert "verdict ok (recorded: ok)" in done.stdout
    (study,) = (tmp_path / "replays").iterdir()
    (again,) = (p for p in (study / "runs").iterdir() if p.is_dir())
    record = RunRecord(again)
    assert record.call["kwargs"]["prompt"] == [PROMPT, "a red circle on a blue background"]
    assert [a.tobytes() for a in _finals(again)] == [b.tobytes() for b in _finals(run["run_dir"])]
    assert "generators[1]" in (folder / "reproduce.py").read_text()  # each image's own recorded generator
    _diffusers_alone_makes(folder, run["run_dir"], images=2)
