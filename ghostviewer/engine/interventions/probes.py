"""Probes on the pipeline itself: the initial latents (`pipeline.prepare_latents`) and every scheduler step.

They record the tensors that live between modules — where a NaN from a bad seed or a scheduler appears — and
hand the step's predicted x0 to the runner (the family adapter's: the scheduler's own, else x0 = x_t − σ·v for
flow matching, else from alphas_cumprod). Applied last, so they observe what other interventions changed.
For pipelines without `callback_on_step_end` (PixArt), `on_step` is called after each scheduler step instead.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.families.base import alphas_x0
from ghostviewer.engine.interventions.base import AttributePatch, RunContext


def _x0_from_model_output(
    scheduler: Any, model_output: torch.Tensor, timestep: Any, sample: torch.Tensor
) -> torch.Tensor | None:
    """Predicted clean latents for schedulers that do not return them (DDPM-style alphas_cumprod schedules)."""
    return alphas_x0(scheduler, model_output, timestep, sample)


class PipelineProbes:
    name = "probes"

    def __init__(
        self,
        on_x0: Callable[[torch.Tensor], None],
        on_initial: Callable[[torch.Tensor], None],
        on_step: Callable[[Any, torch.Tensor], None] | None = None,
        thread: int | None = None,
    ) -> None:
        self._on_x0 = on_x0
        self._on_initial = on_initial
        self._on_step = on_step  # (timestep, latents after the step): the step-callback fallback
        self._patches: list[AttributePatch] = []
        self._thread = thread  # set: only that thread's calls are probed (a watched pipeline shared by threads)

    def apply(self, ctx: RunContext) -> None:
        pipe = ctx.pipe
        prepare_latents = pipe.prepare_latents
        scheduler = pipe.scheduler
        step = scheduler.step
        adapter = adapter_for(pipe)
        owner = self._thread

        def probed_prepare_latents(*args: Any, **kwargs: Any) -> Any:
            latents = prepare_latents(*args, **kwargs)
            if owner is not None and threading.get_ident() != owner:
                return latents
            tensor = latents[0] if isinstance(latents, tuple) else latents
            ctx.record_tensor("pipeline.prepare_latents", tensor, phase="denoise")
            self._on_initial(tensor)
            return latents

        # wraps: diffusers reads scheduler.step's signature to pass `generator` and `eta` (an ancestral scheduler's
        # noise would otherwise be unseeded in every traced run)
        @functools.wraps(step)
        def probed_step(
            model_output: torch.Tensor, timestep: Any, sample: torch.Tensor, *args: Any, **kwargs: Any
        ) -> Any:
            if owner is not None and threading.get_ident() != owner:
                return step(model_output, timestep, sample, *args, **kwargs)
            ctx.record_tensor("pipeline.noise_pred", model_output, phase="denoise")
            out = step(model_output, timestep, sample, *args, **kwargs)
            x0 = adapter.x0(scheduler, model_output, timestep, sample, out)
            prev = out[0] if isinstance(out, tuple) else out.prev_sample
            ctx.record_tensor("scheduler.step", prev, phase="denoise")
            if x0 is not None:
                self._on_x0(x0)
            if self._on_step is not None:
                self._on_step(timestep, prev)
            return out

        self._patches = [
            AttributePatch(pipe, "prepare_latents", probed_prepare_latents),
            AttributePatch(scheduler, "step", probed_step),
        ]

    def remove(self) -> None:
        for patch in reversed(self._patches):
            patch.restore()
        self._patches = []
