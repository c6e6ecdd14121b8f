"""Out of memory at a chosen denoising step: the device error every large run meets one day.

The denoiser raises `torch.OutOfMemoryError` when it is called for step `step` (default 2), as a GPU that runs
out half-way through a run does. What it checks is the engine, not the pipeline: the run ends `failed` with the
error in its record, every step before it is kept, and the engine process takes the next run as if nothing
happened. On a pipeline run with fewer steps it never fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families.base import denoiser_of
from ghostviewer.engine.interventions.base import RunContext


@dataclass(frozen=True)
class OomAtStepConfig:
    step: int = 2


class OomAtStep:
    name = "oom-at-step"
    description = ("the denoiser runs out of memory (torch.OutOfMemoryError) at step 2: the run fails with the "
                   "error, the engine stays usable")
    injected_at = "unet"

    def __init__(self, config: OomAtStepConfig | None = None) -> None:
        self.config = config or OomAtStepConfig()
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        denoiser = denoiser_of(ctx.pipe)
        if denoiser is None:
            raise GhostError(f"{self.name} needs a pipeline with a denoiser (unet or transformer)")
        step = self.config.step

        def hook(_module: Any, _args: Any) -> None:
            if ctx.current_step() == step:
                raise torch.OutOfMemoryError(
                    f"out of memory at step {step} (simulated by the {self.name} fault): tried to allocate 2.00 GiB"
                )

        self._handle = denoiser.register_forward_pre_hook(hook)
        ctx.notes.append(f"{self.name}: the denoiser will run out of memory at step {step}")

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
