"""A pipeline folder whose config.json describes a far larger model than its weights (edited to 100,000 channels, or
another model's config beside these weights) is refused in one line before diffusers builds it — diffusers
allocates and randomly initialises the whole model before it reads a weight, so this took 160 GB (refused by the
allocator only because it was that large; a config a few times too large would have been built). The check counts
on the meta device, so the refusal costs no memory; a faithful copy of the demo still loads."""

from __future__ import annotations

import json
import resource
import shutil
from pathlib import Path

import pytest

from ghostviewer.cli import main as cli_main

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo-pipeline"
pytestmark = pytest.mark.skipif(not (DEMO / "model_index.json").is_file(), reason="the demo pipeline is not built")


def _copy_with_unet_channels(tmp_path: Path, channels: list[int] | None) -> Path:
    folder = tmp_path / "pipeline"
    shutil.copytree(DEMO, folder)
    if channels is not None:
        config = json.loads((folder / "unet" / "config.json").read_text(encoding="utf-8"))
        config["block_out_channels"] = channels
        (folder / "unet" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize("channels", [[100_000, 200_000, 300_000], [480, 960, 1280]])
def test_a_config_far_larger_than_its_weights_is_refused_before_it_is_built(
        channels: list[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy_with_unet_channels(tmp_path, channels)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert cli_main(["blocks", "--pipeline", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unet's config.json describes a UNet2DConditionModel of" in err, err
    assert "not the config of these weights" in err
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grown_kib < 512 * 1024  # nothing the size of the described model was allocated


def test_a_faithful_copy_of_the_demo_still_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["blocks", "--pipeline", str(_copy_with_unet_channels(tmp_path, None)), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blocks"]


def test_a_controlnet_config_far_larger_than_its_weights_is_refused(demo_loaded, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from tests.engine.tiny_controlnet import build_controlnet, control_image, save_controlnet

    folder = save_controlnet(build_controlnet(demo_loaded.pipe), tmp_path / "controlnet")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["block_out_channels"] = [100_000, 200_000, 300_000]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    image = tmp_path / "scribble.png"
    control_image().save(image)
    code = cli_main(["run", "--prompt", "a red circle", "--steps", "1", "--control-image", str(image),
                     "--controlnet", str(folder), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "controlnet's config.json describes a ControlNetModel of" in err, err
