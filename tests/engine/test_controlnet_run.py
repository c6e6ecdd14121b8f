"""GhostViewer's own ControlNet runs on the demo pipeline: `--control-image` with a ControlNet from a folder (a saved
ControlNetModel, or a pipeline folder's controlnet/) or the pipeline's own, recorded with the control image and the
ControlNet's weights, replayed bit-identical from the record alone, a zero scale named as having no effect, and every
bad input refused up front in one line (exit 2)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diffusers import ControlNetModel
from PIL import Image

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.record import RunRecord
from ghostviewer.spec import UserError
from tests.engine.tiny_controlnet import build_controlnet, control_image, controlnet_pipeline, save_controlnet
from tests.engine.tiny_pipelines import build_tiny_unet

PROMPT = "a red circle on a blue background"
STEPS = 2  # what a ControlNet changes shows from the first step


@pytest.fixture(scope="module")
def files(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo's ControlNet saved alone and inside a saved ControlNet pipeline, a control image, and the bad ones:
    a ControlNet of another model, one that shrinks its control image 2× (the demo's VAE: 4×), a folder that is no
    model, a file that is no image."""
    root = tmp_path_factory.mktemp("controlnet-run")
    pipe = demo_loaded.pipe
    controlnet = build_controlnet(pipe)
    paths = {"controlnet": save_controlnet(controlnet, root / "controlnet"), "pipeline": root / "pipeline"}
    controlnet_pipeline(pipe, controlnet).save_pretrained(paths["pipeline"], safe_serialization=True)
    paths["other"] = save_controlnet(ControlNetModel.from_unet(build_tiny_unet()), root / "other")
    shrink = ControlNetModel.from_unet(pipe.unet, conditioning_embedding_out_channels=(8, 16))
    paths["shrink"] = save_controlnet(shrink, root / "shrink")
    paths.update(empty=root / "empty", control=root / "control.png", broken=root / "broken.png")
    paths["empty"].mkdir()
    control_image().save(paths["control"])
    paths["broken"].write_text("not an image")
    return paths


def _pixels(path: Path | str) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _run(pipe: Any, runs_dir: Path, files: dict[str, Path], **kwargs: Any) -> dict[str, Any]:
    return api.run(pipe, PROMPT, steps=STEPS, seed=2, runs_dir=runs_dir, control_image=files["control"], **kwargs)


def test_a_controlnet_run_is_recorded_with_its_control_and_follows_it(demo_loaded, runs_dir: Path,
                                                                     files: dict[str, Path]) -> None:
    result = _run(demo_loaded.pipe, runs_dir, files, controlnet=files["controlnet"])
    record = RunRecord(result["run_dir"])
    settings = record.settings
    assert settings["kind"] == "controlnet" and settings["controlnet_scale"] == 1.0  # diffusers' default, recorded
    assert settings["control_image"] == str(files["control"].resolve())
    assert settings["controlnet"] == str(files["controlnet"].resolve())
    assert (settings["width"], settings["height"]) == (64, 64)  # the control image's size
    copy = record.image_path("input_control_image")
    assert copy is not None and np.array_equal(_pixels(copy), _pixels(files["control"]))
    pipeline = record.environment["pipeline"]
    assert pipeline["class"] == "StableDiffusionControlNetPipeline" and pipeline["weight_hashes"]["controlnet"]
    assert {r.phase for r in record.stats("controlnet.controlnet_mid_block")} == {"denoise"}
    assert result["verdict"]["label"] == "ok" and result["first_anomaly"] is None
    assert not record.events(kind="control")
    # At scale 0 the ControlNet adds nothing: exactly the text-to-image image, and the run says why.
    off = _run(demo_loaded.pipe, runs_dir, files, controlnet=files["controlnet"], controlnet_scale=0)
    plain = api.run(demo_loaded.pipe, PROMPT, steps=STEPS, seed=2, runs_dir=runs_dir)
    assert np.array_equal(_pixels(off["image"]), _pixels(plain["image"]))
    assert not np.array_equal(_pixels(result["image"]), _pixels(plain["image"]))
    (finding,) = RunRecord(off["run_dir"]).events(kind="control")
    assert "the control image had no effect" in finding.message and finding.data["scales"] == [0.0]
    assert "kind" not in RunRecord(plain["run_dir"]).settings  # a plain record reads as it always has


def test_the_replay_reads_the_control_image_from_the_record(demo_loaded, tmp_path: Path, runs_dir: Path,
                                                           files: dict[str, Path]) -> None:
    moved = {**files, "control": tmp_path / "control.png"}
    control_image().save(moved["control"])
    # A bypass and a capture may name the ControlNet's modules: they are checked against the pipeline it joins.
    original = _run(demo_loaded.pipe, runs_dir, moved, controlnet=files["controlnet"], controlnet_scale=0.7,
                    bypass=["controlnet.mid_block"], capture=["controlnet.controlnet_mid_block"])
    assert RunRecord(original["run_dir"]).settings["bypass"] == ["controlnet.mid_block"]
    moved["control"].unlink()  # the record alone now holds the control image
    report = api.replay(original["run_dir"], times=1, pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True and report["first_divergence"] is None


def test_the_pipelines_own_controlnet_or_a_pipeline_folders(files: dict[str, Path], runs_dir: Path,
                                                            capsys) -> None:
    """From the command line: a saved ControlNet pipeline runs with its own ControlNet; the demo takes the one
    in that pipeline folder's controlnet/. The same ControlNet and seed: the same image."""
    common = ["run", "--prompt", PROMPT, "--steps", str(STEPS), "--seed", "2", "--runs-dir", str(runs_dir),
              "--control-image", str(files["control"]), "--json"]
    assert main([*common, "--pipeline", str(files["pipeline"])]) == 0
    assert main([*common[:-3], "--pipeline", str(files["pipeline"])]) == 2  # no control image: refused, not failed
    assert "makes ControlNet calls: give --control-image IMG" in capsys.readouterr().err
    assert main([*common, "--controlnet", str(files["pipeline"]), "--controlnet-scale", "1"]) == 0
    records = [RunRecord(run) for run in runs_dir.iterdir()]
    assert len(records) == 2 and {r.settings["kind"] for r in records} == {"controlnet"}
    own, taken = sorted(records, key=lambda r: "controlnet" in r.settings)
    assert "controlnet" not in own.settings  # the pipeline's own
    assert taken.settings["controlnet"] == str(files["pipeline"].resolve())
    assert np.array_equal(_pixels(own.image_path()), _pixels(taken.image_path()))
    capsys.readouterr()


@pytest.mark.parametrize("arguments, words", [
    ({}, r"--control-image needs a ControlNet: this pipeline \(StableDiffusionPipeline\) has none; give "
         r"--controlnet DIR"),
    ({"control_image": "{missing}"}, "--control-image .*: no such file"),
    ({"control_image": "{broken}", "controlnet": "{controlnet}"}, "cannot read it as an image"),
    ({"controlnet": "{missing}"}, "--controlnet .*: no such folder"),
    ({"controlnet": "{empty}"}, "no config.json"),
    ({"controlnet": "{other}"},
     r"does not fit this pipeline .*block widths are \[32, 64\], the UNet2DConditionModel's \[48, 96, 128\]"),
    ({"controlnet": "{shrink}"}, "shrinks the control image 2×, the VAE 4×"),
    ({"controlnet_scale": -1.0}, "--controlnet-scale must be a number of at least 0"),
    ({"control_image": None, "controlnet": "{controlnet}"}, "--controlnet needs --control-image"),
    ({"init_image": "{control}"}, r"--control-image needs a ControlNet"),  # ControlNet img2img: no ControlNet
])
def test_bad_inputs_are_refused_in_one_line(demo_loaded, runs_dir: Path, files: dict[str, Path],
                                            arguments: dict[str, Any], words: str) -> None:
    paths = {**{name: str(path) for name, path in files.items()}, "missing": str(runs_dir / "nope")}
    given = {"control_image": "{control}", **arguments}
    given = {k: v.format(**paths) if isinstance(v, str) else v for k, v in given.items()}
    with pytest.raises(UserError) as refused:
        api.run(demo_loaded.pipe, PROMPT, steps=STEPS, runs_dir=runs_dir, **given)
    assert "\n" not in str(refused.value) and re.search(words, str(refused.value)), refused.value
    assert not list(runs_dir.iterdir())  # refused before anything ran


def test_the_command_line_says_it_in_one_line_and_exits_2(runs_dir: Path, files: dict[str, Path], capsys) -> None:
    argv = ["run", "--prompt", PROMPT, "--steps", str(STEPS), "--runs-dir", str(runs_dir),
            "--control-image", str(files["control"])]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--control-image needs a ControlNet" in err[0], err
    assert not list(runs_dir.iterdir())
    # A run whose control did nothing says so, though its image is healthy (exit 0).
    assert main([*argv, "--controlnet", str(files["controlnet"]), "--controlnet-scale", "0"]) == 0
    out = capsys.readouterr().out
    assert "verdict: ok" in out and "finding: the control image had no effect" in out
