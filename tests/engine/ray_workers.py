"""Sweep actors whose device gives out, for the Ray cluster tests (imported by the Ray worker processes, so it
holds nothing but the actor class).

`FlakyDeviceWorker` is a real SweepWorker with a forward pre-hook on the U-Net, as a GPU that gives out would
fail the denoiser: the first worker process of a sweep (the first to create `poisoned-once` beside the runs
folder) has a poisoned device — every call raises a CUDA error, as a process whose CUDA context took an illegal
memory access does — and any worker runs out of memory (torch.OutOfMemoryError) on the prompt OOM_PROMPT.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ghostviewer.engine.loops.sweep_jobs import SweepJob
from ghostviewer.engine.loops.sweep_ray import SweepWorker

OOM_PROMPT = "a blue star on a white background"
CUDA_ERROR = ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously "
              "reported at some other API call, so the stacktrace below might be incorrect.")


class FlakyDeviceWorker(SweepWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.poisoned: bool | None = None  # decided at the first run (the runs folder is known then)
        self.prompt = ""
        self.loaded.pipe.unet.register_forward_pre_hook(self._device)

    def _device(self, _module: Any, _args: Any) -> None:
        if self.poisoned:
            raise RuntimeError(CUDA_ERROR)
        if self.prompt == OOM_PROMPT:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def run(self, job: SweepJob, runs_dir: str) -> dict[str, Any]:
        if self.poisoned is None:
            try:
                os.close(os.open(Path(runs_dir).parent / "poisoned-once", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                self.poisoned = True
            except FileExistsError:
                self.poisoned = False
        self.prompt = job.prompt
        return super().run(job, runs_dir)
