"""Text conditioning with no effect: the U-Net is handed the empty prompt's encoding in place of the prompt's.

The classic "the prompt is ignored" bug — the negative (unconditional) embeddings passed twice, a cached empty
encoding reused for every prompt: the text encoder itself works, but both halves of classifier-free guidance
the U-Net sees are the unconditional one, so guidance does nothing and the image is whatever the model draws
unprompted. A clean image, no NaN, in colours the prompt did not ask for: only the prompt check tells it.

The fault sits at the U-Net's input (the `unet` component itself, which is not a traced block); the text
encoder's recorded outputs are the healthy ones. It needs guidance > 1 (a batch holding both halves); without
it, the run says so and nothing is changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class DeadTextConditioningConfig:
    denoiser: str = "unet"


class DeadTextConditioning:
    name = "dead-text-conditioning"
    description = "the U-Net gets the empty prompt's encoding instead of the prompt's: the prompt is ignored"
    injected_at = DeadTextConditioningConfig().denoiser

    def __init__(self, config: DeadTextConditioningConfig | None = None) -> None:
        self.config = config or DeadTextConditioningConfig()
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        noted: list[bool] = []

        def hook(_module: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
            states = kwargs.get("encoder_hidden_states")
            if states is None and len(args) > 2:
                states = args[2]
            if not isinstance(states, torch.Tensor) or states.shape[0] % 2:
                if not noted:
                    noted.append(True)
                    ctx.notes.append(f"{self.name}: no guidance batch (guidance ≤ 1?): the fault changes nothing")
                return args, kwargs
            half = states.shape[0] // 2  # diffusers concatenates [unconditional, conditional]
            dead = torch.cat([states[:half], states[:half]])
            if "encoder_hidden_states" in kwargs or len(args) <= 2:
                return args, {**kwargs, "encoder_hidden_states": dead}
            return (*args[:2], dead, *args[3:]), kwargs

        block = resolve_module(ctx.pipe, self.config.denoiser)
        self._handle = block.register_forward_pre_hook(hook, with_kwargs=True, prepend=True)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
