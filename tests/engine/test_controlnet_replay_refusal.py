"""A watched ControlNet call replayed without `pipeline=`: its record names the folder the pipeline came from (the
demo) but not the ControlNet, which was added in memory. The replay is refused in one GhostViewer line that names the
missing component and how to pass it — not diffusers' from_pipe wording ("expected [...] but only {...} were passed")
— from the API and from `ghostviewer replay` (exit 2); on the call's own pipeline it still replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import ghostviewer
from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.engine.errors import GhostError
from ghostviewer.record import RunRecord
from tests.engine.tiny_controlnet import build_controlnet, control_image, controlnet_pipeline

PROMPT = "a red circle on a blue background"


@pytest.fixture(scope="module")
def watched(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:  # noqa: ANN001
    pipe = controlnet_pipeline(demo_loaded.pipe, build_controlnet(demo_loaded.pipe))
    with ghostviewer.watch(pipe, runs_dir=tmp_path_factory.mktemp("controlnet-replay")) as watcher:
        pipe(PROMPT, image=control_image(), num_inference_steps=2, output_type="np",
             generator=torch.Generator().manual_seed(3))
    (run,) = watcher.runs
    return pipe, run["run_dir"]


def _one_line(message: str) -> None:
    assert "\n" not in message and "were passed" not in message and "expected [" not in message, message


def test_a_replay_from_the_recorded_folder_names_the_missing_controlnet(watched) -> None:  # noqa: ANN001
    _, run_dir = watched
    assert RunRecord(run_dir).settings["source"].endswith("demo-pipeline")  # the folder, not the ControlNet
    with pytest.raises(GhostError) as refused:
        api.replay(run_dir, times=1)
    message = str(refused.value)
    _one_line(message)
    assert "a controlnet (ControlNetModel)" in message and "demo-pipeline only" in message
    assert "pipeline=pipe" in message
    assert "StableDiffusionControlNetPipeline.from_pipe(pipe, controlnet=ControlNetModel.from_pretrained(" in message
    assert not list((Path(run_dir).parent).glob("replay-*"))  # refused before a study is made


def test_the_cli_says_it_in_one_line_and_exits_2(watched, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    _, run_dir = watched
    assert main(["replay", run_dir, "--times", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "controlnet (ControlNetModel)" in err[0], err
    _one_line(err[0])


def test_a_pipeline_without_the_controlnet_is_refused_and_the_calls_own_replays(watched, demo_loaded) -> None:  # noqa: ANN001
    pipe, run_dir = watched
    with pytest.raises(GhostError, match=r"the pipeline passed as pipeline= has none") as refused:
        api.replay(run_dir, times=1, pipeline=demo_loaded.pipe)
    _one_line(str(refused.value))
    report = api.replay(run_dir, times=1, pipeline=pipe)
    assert report["reproduced"] is True
