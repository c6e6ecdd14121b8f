"""A stray per-channel bias in a VAE decoder block: every image comes out colour-shifted, with no NaN or inf.

The kind of bug a checkpoint conversion leaves behind (a bias vector taken from the wrong layer, or added
twice): the decoder's last resnet adds +k to its even channels and −k to its odd ones. GroupNorm keeps the
activations in range, so the image is a plausible one, only in the wrong colours (shifted toward purple); its
whole-output mean does not move, so only the per-channel means show where it happens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class DecoderColorShiftConfig:
    block: str = "vae.decoder.up_blocks.2.resnets.1"
    bias: float = 2.0


class DecoderColorShift:
    name = "decoder-color-shift"
    description = "a VAE decoder block adds a stray per-channel bias: colours shift, no NaN (a silent ghost)"
    injected_at = DecoderColorShiftConfig().block

    def __init__(self, config: DecoderColorShiftConfig | None = None) -> None:
        self.config = config or DecoderColorShiftConfig()
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        bias = self.config.bias

        def hook(_module, _args, output: torch.Tensor) -> torch.Tensor:
            signs = torch.ones(output.shape[1], device=output.device, dtype=output.dtype)
            signs[1::2] = -1.0
            return output + bias * signs.view(1, -1, 1, 1)

        self._handle = resolve_module(ctx.pipe, self.config.block).register_forward_hook(hook, prepend=True)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
