"""Real runs of the call kinds beyond text-to-image for the GUI's tests and screenshots, made in-process on the demo
pipeline: GhostViewer's own inpaint run of a batch (api.run_spec), a watched img2img call of a batch with one sample
made NaN at one step (a step callback of the caller's own: no fault preset hits one sample only), and a plain
text-to-image run."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

PROMPT = "a red circle on a blue background"
STEPS = 4
BAD_SAMPLE, BAD_STEP = 1, 1  # the watched batch's sample made NaN, at the end of this step


def input_images(folder: Path) -> dict[str, Path]:
    """A 64×64 init image (a green square on yellow, a red bar at the bottom) and a mask repainting its right half."""
    init = np.zeros((64, 64, 3), np.uint8)
    init[:] = (230, 220, 40)
    init[12:36, 12:36] = (20, 160, 40)
    init[52:60, 4:60] = (200, 30, 30)
    mask = np.zeros((64, 64), np.uint8)
    mask[:, 32:] = 255
    paths = {"init": folder / "init.png", "mask": folder / "mask.png"}
    Image.fromarray(init).save(paths["init"])
    Image.fromarray(mask).save(paths["mask"])
    return paths


_MADE: dict[str, dict[str, Any]] = {}  # one set of runs per test process: the tests only read them


def shared_runs(pipe: Any, folder_factory: Any, batch: int = 3) -> dict[str, Any]:
    """make_runs once per process (pytest's tmp_path_factory makes the folder), whichever test module asks first."""
    if "runs" not in _MADE:
        _MADE["runs"] = make_runs(folder_factory.mktemp("call-kinds"), pipe, batch)
    return _MADE["runs"]


def make_runs(folder: Path, pipe: Any = None, batch: int = 3) -> dict[str, Any]:
    """{"inpaint": run dict, "watched": run dict, "text2img": run dict, "init": path, "mask": path}; `pipe`: the
    demo pipeline already loaded (None: loaded here)."""
    import torch
    from diffusers import AutoPipelineForImage2Image

    import ghostviewer
    from ghostviewer import api
    from ghostviewer.engine.loading.pipelines import load_pipeline

    runs = folder / "runs"
    runs.mkdir(exist_ok=True)
    paths = input_images(folder)
    pipe = pipe if pipe is not None else load_pipeline("demo", device="cpu").pipe
    own = api.run_spec(pipe, {"prompt": PROMPT, "steps": STEPS, "seed": 3, "init_image": str(paths["init"]),
                              "mask": str(paths["mask"]), "batch": 2}, runs_dir=runs)
    text2img = api.run_spec(pipe, {"prompt": PROMPT, "steps": STEPS, "seed": 3}, runs_dir=runs)
    img2img = AutoPipelineForImage2Image.from_pipe(pipe)  # the same components: the demo pipeline is left as it was
    img2img.set_progress_bar_config(disable=True)

    def poison(_pipe: Any, index: int, _timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        if index == BAD_STEP:
            latents = tensors["latents"].clone()
            latents[BAD_SAMPLE] = float("nan")
            return {"latents": latents}
        return {}

    with ghostviewer.watch(img2img, runs_dir=runs) as watcher, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # diffusers: one init image for a batch is "deprecated"
        img2img(PROMPT, image=Image.open(paths["init"]).convert("RGB"), strength=0.75, num_inference_steps=STEPS,
                num_images_per_prompt=batch, generator=torch.Generator().manual_seed(5), output_type="np",
                callback_on_step_end=poison)
    (watched,) = watcher.runs
    return {"inpaint": own, "watched": watched, "text2img": text2img, **paths}
