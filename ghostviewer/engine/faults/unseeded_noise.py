"""A nondeterministic module: it adds noise drawn from a generator that is not keyed by the run's seed.

Same seed, different image — the "seed that does not reproduce". Replay finds where two runs first diverge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class UnseededNoiseConfig:
    block: str = "unet.up_blocks.1.attentions.0"
    strength: float = 0.05  # relative to the output's std


class UnseededNoise:
    name = "unseeded-noise"
    description = "a U-Net block adds noise from an unseeded generator: the same seed does not reproduce"
    injected_at = UnseededNoiseConfig().block

    def __init__(self, config: UnseededNoiseConfig | None = None) -> None:
        self.config = config or UnseededNoiseConfig()
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        strength = self.config.strength

        def hook(_module, _args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            noise = torch.randn(hidden.shape, generator=generator).to(hidden.device, hidden.dtype)
            noisy = hidden + strength * hidden.std() * noise
            return (noisy, *output[1:]) if isinstance(output, tuple) else noisy

        self._handle = resolve_module(ctx.pipe, self.config.block).register_forward_hook(hook, prepend=True)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
