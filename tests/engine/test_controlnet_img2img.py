"""GhostViewer's own ControlNet img2img and inpaint runs on the demo pipeline: an img2img or inpaint run given a
control image is made in diffusers' StableDiffusionControlNetImg2ImgPipeline / …InpaintPipeline (from_pipe, the
loaded weights shared), recorded with all its input images, follows its control, replays bit-identical from the
record alone, and is refused up front in one line when an input is bad."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec, UserError, validate
from tests.engine.tiny_controlnet import call_input_files, control_image

PROMPT = "a red circle on a blue background"
STEPS = 3


@pytest.fixture(scope="module")
def files(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("controlnet-img2img")
    paths = {**call_input_files(demo_loaded.pipe, root), "small_control": root / "small_control.png"}
    control_image(32).save(paths["small_control"])
    return paths


def _pixels(path: Path | str) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _run(demo_loaded, runs_dir: Path, files: dict[str, Path], **kwargs: Any) -> dict[str, Any]:  # noqa: ANN001
    given = {"init_image": files["init"], "control_image": files["control"], "controlnet": files["controlnet"],
             **kwargs}
    return api.run(demo_loaded.pipe, PROMPT, steps=STEPS, seed=4, runs_dir=runs_dir, **given)


@pytest.mark.parametrize("kind, pipeline_class", [("img2img", "StableDiffusionControlNetImg2ImgPipeline"),
                                                  ("inpaint", "StableDiffusionControlNetInpaintPipeline")])
def test_a_controlnet_img2img_or_inpaint_run_is_recorded_follows_its_control_and_replays(
        demo_loaded, runs_dir: Path, files: dict[str, Path], kind: str, pipeline_class: str) -> None:  # noqa: ANN001
    extra = {"mask": files["mask"]} if kind == "inpaint" else {}
    result = _run(demo_loaded, runs_dir, files, strength=0.75, **extra)
    record = RunRecord(result["run_dir"])
    settings = record.settings
    assert settings["kind"] == kind and settings["strength"] == 0.75 and settings["controlnet_scale"] == 1.0
    assert settings["control_image"] == str(files["control"].resolve())
    assert settings["init_image"] == str(files["init"].resolve())
    assert record.environment["pipeline"]["class"] == pipeline_class
    assert record.environment["pipeline"]["weight_hashes"]["controlnet"]
    names = ["input_init_image", "input_control_image", *(["input_mask"] if kind == "inpaint" else [])]
    for name in names:
        assert record.image_path(name) is not None
    assert len(record.steps()) == int(STEPS * 0.75)  # only the strength's steps denoise
    assert {r.phase for r in record.stats("controlnet.controlnet_mid_block")} == {"denoise"}
    assert result["first_anomaly"] is None
    # The control changes the image: at scale 0 the ControlNet adds nothing, and the run says so.
    off = _run(demo_loaded, runs_dir, files, strength=0.75, controlnet_scale=0, **extra)
    assert not np.array_equal(_pixels(off["image"]), _pixels(result["image"]))
    assert "had no effect" in RunRecord(off["run_dir"]).events(kind="control")[0].message
    if kind == "inpaint":  # the unmasked (left) half is kept close to the init image
        left = np.abs(_pixels(result["image"])[:, :24].astype(int) - _pixels(files["init"])[:, :24].astype(int))
        assert left.mean() < 40
    report = api.replay(result["run_dir"], times=1, pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True and report["first_divergence"] is None


def test_the_control_image_is_resized_to_the_init_images_size(demo_loaded, runs_dir: Path,
                                                              files: dict[str, Path]) -> None:  # noqa: ANN001
    result = _run(demo_loaded, runs_dir, {**files, "control": files["small_control"]}, strength=0.7)
    record = RunRecord(result["run_dir"])
    assert (record.settings["width"], record.settings["height"]) == (64, 64)
    assert any("resized to the run's 64×64" in e.message for e in record.events())


@pytest.mark.parametrize("arguments, words", [
    ({"controlnet": None}, "--control-image needs a ControlNet"),
    ({"strength": 1.5}, "strength must be more than 0 and at most 1"),
    ({"strength": 0.1}, r"runs int\(3 × 0.1\) = 0 denoising steps"),
    ({"control_image": "{missing}"}, "--control-image .*: no such file"),
])
def test_bad_controlnet_img2img_inputs_are_refused_in_one_line(demo_loaded, runs_dir: Path, files: dict[str, Path],
                                                              arguments: dict[str, Any], words: str) -> None:
    import re

    given = {k: v.format(missing=str(runs_dir / "nope.png")) if isinstance(v, str) else v
             for k, v in arguments.items()}
    with pytest.raises(UserError) as refused:
        _run(demo_loaded, runs_dir, {**files}, **given)
    assert "\n" not in str(refused.value) and re.search(words, str(refused.value)), refused.value
    assert not list(runs_dir.iterdir())


def test_a_controlnet_text_to_image_spec_with_an_init_image_is_refused(files: dict[str, Path]) -> None:
    spec = RunSpec(prompt=PROMPT, kind="controlnet", init_image=str(files["init"]),
                   control_image=str(files["control"]))
    with pytest.raises(UserError, match="a controlnet \\(text-to-image\\) run takes no --init-image"):
        validate(spec)


def test_the_command_line_makes_a_controlnet_inpaint_run(runs_dir: Path, files: dict[str, Path], capsys) -> None:
    argv = ["run", "--prompt", PROMPT, "--steps", "2", "--runs-dir", str(runs_dir), "--init-image",
            str(files["init"]), "--mask", str(files["mask"]), "--control-image", str(files["control"])]
    assert main(argv) == 2  # the demo has no ControlNet of its own
    assert "--control-image needs a ControlNet" in capsys.readouterr().err
    assert main([*argv, "--controlnet", str(files["controlnet"]), "--json"]) == 0
    (run,) = list(runs_dir.iterdir())
    assert RunRecord(run).settings["kind"] == "inpaint"
