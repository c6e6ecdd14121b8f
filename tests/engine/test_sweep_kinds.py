"""Sweeps whose rows name the call's inputs (init_image, strength, mask, control_image; lora): each run is made and
recorded as its kind, a relative path is read from the list file's folder (not the current folder), and a bad row
is refused before the sweep starts, naming its line. `baseline build` refuses a list it cannot build from (entries of
two kinds; tests/engine/test_baseline_kinds.py builds from the kinds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.record import RunRecord
from ghostviewer.spec import UserError
from tests.engine.tiny_controlnet import build_controlnet, control_image, controlnet_pipeline

PROMPT = "a red circle on a blue background"
STEPS = 2


@pytest.fixture
def lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the list's images beside it; the test runs from another folder."""
    folder = tmp_path / "lists"
    folder.mkdir()
    Image.fromarray(np.full((64, 64, 3), (230, 220, 40), np.uint8)).save(folder / "init.png")
    mask = np.zeros((64, 64), np.uint8)
    mask[:, 32:] = 255
    Image.fromarray(mask).save(folder / "mask.png")
    control_image().save(folder / "control.png")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return folder


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_sweeps_rows_make_and_record_their_kinds(demo_loaded, lists: Path, runs_dir: Path) -> None:
    rows = _write(lists / "rows.jsonl", [
        {"prompt": PROMPT, "init_image": "init.png", "strength": 0.5},
        {"prompt": PROMPT, "init_image": "init.png", "mask": "mask.png"},
        {"prompt": PROMPT},
    ])
    report = api.sweep(rows, seeds="1", source=demo_loaded.pipe, steps=STEPS, runs_dir=runs_dir)
    assert report["total"] == 3 and report["failed"] == 0
    records = [RunRecord(run["run_dir"]) for run in report["runs"]]
    img2img, inpaint, plain = (r.settings for r in records)
    assert (img2img["kind"], img2img["strength"]) == ("img2img", 0.5)
    assert img2img["init_image"] == str((lists / "init.png").resolve())  # the list's folder, not the current one
    assert (inpaint["kind"], inpaint["strength"], inpaint["mask"]) == ("inpaint", 1.0, str(lists / "mask.png"))
    assert "kind" not in plain
    assert len(records[0].steps()) == 1  # int(2 × 0.5)
    assert records[0].image_path("input_init_image") is not None


def test_a_control_image_row_on_a_controlnet_pipeline(demo_loaded, lists: Path, runs_dir: Path) -> None:
    pipe = controlnet_pipeline(demo_loaded.pipe, build_controlnet(demo_loaded.pipe))
    rows = _write(lists / "control.jsonl", [{"prompt": PROMPT, "control_image": "control.png"}])
    report = api.sweep(rows, seeds="3", source=pipe, steps=STEPS, runs_dir=runs_dir)
    (run,) = report["runs"]
    settings = RunRecord(run["run_dir"]).settings
    assert settings["kind"] == "controlnet" and settings["control_image"] == str(lists / "control.png")


@pytest.mark.parametrize("rows, words", [
    ([{"prompt": PROMPT}, {"prompt": PROMPT, "init_image": "nope.png"}],
     "bad.jsonl line 2: init_image nope.png: no such file (read from the list's folder"),
    ([{"prompt": PROMPT, "init_image": "init.png", "strength": 1.5}],
     "bad.jsonl line 1: strength must be more than 0 and at most 1, not 1.5"),
    ([{"prompt": PROMPT, "init_image": "init.png", "strength": 0.1}],
     "bad.jsonl entry 1: strength 0.1 with 2 steps runs int(2 × 0.1) = 0 denoising steps"),
    ([{"prompt": PROMPT, "mask": "mask.png"}], "bad.jsonl entry 1: --mask needs --init-image"),
    ([{"prompt": PROMPT, "lora": "missing.safetensors:0.5"}], "bad.jsonl line 1: lora missing.safetensors"),
])
def test_a_bad_row_is_refused_before_the_sweep_starts(lists: Path, runs_dir: Path, rows: list[dict],
                                                      words: str, capsys) -> None:
    listed = _write(lists / "bad.jsonl", rows)
    with pytest.raises(UserError) as refused:
        api.sweep(listed, seeds="1", steps=STEPS, runs_dir=runs_dir)
    assert words in str(refused.value) and "\n" not in str(refused.value), refused.value
    assert main(["sweep", str(listed), "--pipeline", "demo", "--seeds", "1", "--steps", str(STEPS),
                 "--runs-dir", str(runs_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not list(runs_dir.iterdir())  # nothing ran, no study


def test_baseline_build_refuses_rows_it_cannot_build(lists: Path, runs_dir: Path, capsys) -> None:
    listed = _write(lists / "base.jsonl", [{"prompt": PROMPT}, {"prompt": PROMPT, "init_image": "init.png"}])
    assert main(["baseline", "build", "--pipeline", "demo", "--prompts", str(listed), "--seeds", "1",
                 "--steps", str(STEPS), "--runs-dir", str(runs_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "base.jsonl entry 2: kind img2img where the first run has text2img" in err[0]
    assert main(["baseline", "build", "--pipeline", "demo", "--mask", str(lists / "mask.png"),
                 "--runs-dir", str(runs_dir)]) == 2
    assert "--mask needs --init-image" in capsys.readouterr().err
    assert not list(runs_dir.iterdir())
