"""The window's Replay of a run (the engine's `run` command with `replay_of`): a watched img2img call is re-issued
with the init image its record keeps, and GhostViewer's own img2img run takes its init image from the record once
the file it named is gone — both give back the original image bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from diffusers import StableDiffusionImg2ImgPipeline
from PIL import Image

import ghostviewer
from ghostviewer import api
from ghostviewer.engine.loops.recorded import replay_run
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec

PROMPT = "a blue square on a yellow background"
INIT = Image.fromarray(np.full((64, 64, 3), (200, 40, 40), np.uint8))


def _final(run_dir: str | Path) -> np.ndarray:
    return np.asarray(Image.open(Path(run_dir) / "images" / "final.png"))


def _replay(loaded, run_dir: str, runs_dir: Path) -> dict:  # noqa: ANN001 - the engine's LoadedPipeline
    settings = RunSpec.from_dict(dict(RunRecord(run_dir).settings))  # what the window sends: the record's settings
    return replay_run(loaded, settings, run_dir, runs_dir)


def test_a_watched_img2img_call_replays_with_the_init_image_its_record_keeps(demo_loaded, tmp_path: Path) -> None:
    pipe = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
    with ghostviewer.watch(pipe, runs_dir=tmp_path / "watched") as watcher:
        pipe([PROMPT] * 2, image=INIT, strength=0.5, num_inference_steps=4,
             generator=[torch.Generator().manual_seed(s) for s in (4, 5)])
    (run,) = watcher.runs
    assert RunRecord(run["run_dir"]).settings["kind"] == "img2img"  # settings alone cannot make this call again

    again = _replay(demo_loaded, run["run_dir"], tmp_path / "replays")  # the engine's text-to-image pipeline
    record = RunRecord(again["run_dir"])
    assert record.call["kind"] == "img2img" and record.call["kwargs"]["strength"] == 0.5
    assert [s.index for s in record.steps()] == [0, 1] and len(record.verdicts) == 2
    assert np.array_equal(_final(again["run_dir"]), _final(run["run_dir"]))


def test_an_own_img2img_run_replays_from_its_record_when_the_init_image_is_gone(demo_loaded, tmp_path: Path) -> None:
    init = tmp_path / "init.png"
    INIT.save(init)
    run = api.run(demo_loaded.pipe, PROMPT, seed=2, steps=4, init_image=init, strength=0.5,
                  runs_dir=tmp_path / "runs")
    init.unlink()  # moved or deleted since: the record's copy is what the call got

    again = _replay(demo_loaded, run["run_dir"], tmp_path / "replays")
    assert again["verdict"]["label"] == run["verdict"]["label"]
    assert np.array_equal(_final(again["run_dir"]), _final(run["run_dir"]))
