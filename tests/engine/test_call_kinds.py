"""GhostViewer's own img2img, inpaint and batched calls on the real demo pipeline: made the diffusers way from the
one loaded pipeline, recorded with their input images, replayed bit-identical, and every bad input refused up front
in one line (exit 2)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.record import RunRecord

PROMPT = "a red circle on a blue background"
STEPS = 4


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A 64×64 init image (a green square on yellow: far from the prompt), a mask repainting its right half, a
    mask of another size and a file that is no image."""
    init = np.zeros((64, 64, 3), np.uint8)
    init[:] = (230, 220, 40)
    init[12:36, 12:36] = (20, 160, 40)
    mask = np.zeros((64, 64), np.uint8)
    mask[:, 32:] = 255
    paths = {name: tmp_path / f"{name}.png" for name in ("init", "mask", "small")}
    Image.fromarray(init).save(paths["init"])
    Image.fromarray(mask).save(paths["mask"])
    Image.new("L", (32, 32)).save(paths["small"])
    paths["broken"] = tmp_path / "broken.png"
    paths["broken"].write_text("not an image")
    return paths


def _pixels(path: Path | str) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.float32) / 255


def test_img2img_run_is_recorded_with_its_input_and_only_its_strengths_steps(demo_loaded, runs_dir: Path,
                                                                            inputs: dict[str, Path]) -> None:
    plain = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, runs_dir=runs_dir)
    events: list[dict] = []
    result = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, runs_dir=runs_dir, init_image=inputs["init"],
                     strength=0.25, on_progress=events.append)
    record = RunRecord(result["run_dir"])
    settings = record.settings
    steps_events = [e for e in events if e.get("event") == "step"]
    assert steps_events and all(e["steps"] == int(STEPS * 0.25) for e in steps_events)  # progress bars end full
    assert settings["kind"] == "img2img" and settings["strength"] == 0.25
    assert settings["init_image"] == str(inputs["init"].resolve()) and "mask" not in settings
    assert len(record.steps()) == int(STEPS * 0.25)  # diffusers runs int(steps × strength) steps
    recorded = record.image_path("input_init_image")
    assert recorded is not None and np.array_equal(_pixels(recorded), _pixels(inputs["init"]))
    # At a low strength the image stays near its init image; a text-to-image run of the same seed does not.
    init, made = _pixels(inputs["init"]), _pixels(result["image"])
    assert np.abs(made - init).mean() < 0.5 * np.abs(_pixels(plain["image"]) - init).mean()
    assert "kind" not in RunRecord(plain["run_dir"]).settings  # a plain record reads as it always has


def test_inpaint_keeps_the_unmasked_half_and_records_the_mask(demo_loaded, runs_dir: Path,
                                                             inputs: dict[str, Path]) -> None:
    result = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, runs_dir=runs_dir, init_image=inputs["init"],
                     mask=inputs["mask"])
    record = RunRecord(result["run_dir"])
    assert record.settings["kind"] == "inpaint"
    assert record.settings["strength"] == 1.0  # diffusers' default for inpainting, recorded as used
    assert record.image_path("input_mask") is not None and record.image_path("input_init_image") is not None
    init, made = _pixels(inputs["init"]), _pixels(result["image"])
    kept, repainted = np.abs(made - init)[:, :28].mean(), np.abs(made - init)[:, 36:].mean()
    assert kept < repainted
    assert result["verdict"]["label"] == "ok" and result["first_anomaly"] is None


def test_img2img_replays_bit_identical(demo_loaded, runs_dir: Path, inputs: dict[str, Path]) -> None:
    original = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, runs_dir=runs_dir, init_image=inputs["init"],
                       strength=0.5, seed=3)
    report = api.replay(original["run_dir"], times=1, pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True and report["first_divergence"] is None


def test_a_batch_of_two_has_two_images_and_two_verdicts(demo_loaded, runs_dir: Path) -> None:
    result = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, runs_dir=runs_dir, batch=2)
    assert len(result["images"]) == 2 and len(result["verdicts"]) == 2
    assert all(Path(p).is_file() for p in result["images"])
    assert not np.array_equal(_pixels(result["images"][0]), _pixels(result["images"][1]))  # two noises, one seed
    assert RunRecord(result["run_dir"]).settings["batch"] == 2
    report = api.replay(result["run_dir"], times=1, pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True


@pytest.mark.parametrize("arguments, words", [
    (["--init-image", "{missing}"], "no such file"),
    (["--init-image", "{broken}"], "cannot read it as an image"),
    (["--init-image", "{init}", "--mask", "{small}"], "the mask .* is 32×32 but the init image is 64×64"),
    (["--init-image", "{init}", "--strength", "0"], r"strength must be more than 0 and at most 1, not 0\.0"),
    (["--init-image", "{init}", "--strength", "1.5"], r"strength must be more than 0 and at most 1, not 1\.5"),
    (["--init-image", "{init}", "--strength", "0.2"], r"int\(4 × 0\.2\) = 0 denoising steps: raise the strength "
                                                      r"to at least 0\.25 or the steps to at least 5"),
    (["--init-image", "{init}", "--width", "128"], "is 64×64 but the run asks for 128×64"),
    (["--mask", "{mask}"], "--mask needs --init-image"),
    (["--strength", "0.5"], "needs --init-image"),
])
def test_bad_inputs_are_refused_in_one_line(demo_loaded, runs_dir: Path, inputs: dict[str, Path], capsys,
                                            arguments: list[str], words: str) -> None:
    paths = {**{name: str(path) for name, path in inputs.items()}, "missing": str(runs_dir / "nope.png")}
    argv = ["run", "--prompt", PROMPT, "--steps", str(STEPS), "--runs-dir", str(runs_dir),
            *[a.format(**paths) for a in arguments]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(words, err[0]), err
    assert not list(runs_dir.iterdir())  # refused before anything ran


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_cuda_generator_without_cuda_is_refused(demo_loaded, runs_dir: Path, capsys) -> None:
    assert main(["run", "--prompt", PROMPT, "--generator-device", "cuda", "--runs-dir", str(runs_dir)]) == 2
    assert "--generator-device cuda needs a CUDA device" in capsys.readouterr().err
