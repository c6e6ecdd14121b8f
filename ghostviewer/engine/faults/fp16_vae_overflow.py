"""fp16 overflow in a VAE decoder block: fine in float32, black in float16.

One decoder resnet produces activations thousands of times larger than usual and the next one scales them
back, as some real VAEs do. In float32 nothing is lost; in float16 the large values exceed 65504, become inf,
and GroupNorm turns them into NaN. The fp16-headroom statistic flags the block even in a float32 run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class Fp16VaeOverflowConfig:
    block: str = "vae.decoder.up_blocks.1.resnets.0"
    then: str = "vae.decoder.up_blocks.1.resnets.1"
    gain: float = 16384.0


class Fp16VaeOverflow:
    name = "fp16-vae-overflow"
    description = "a VAE decoder block overflows float16 (>65504): fine in float32, black in float16"
    injected_at = Fp16VaeOverflowConfig().block

    def __init__(self, config: Fp16VaeOverflowConfig | None = None) -> None:
        self.config = config or Fp16VaeOverflowConfig()
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def apply(self, ctx: RunContext) -> None:
        gain = self.config.gain
        amplify = resolve_module(ctx.pipe, self.config.block)
        restore = resolve_module(ctx.pipe, self.config.then)
        self._handles = [
            amplify.register_forward_hook(lambda _m, _a, out: out * gain, prepend=True),
            restore.register_forward_pre_hook(lambda _m, args: (args[0] / gain, *args[1:])),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
