"""A U-Net block whose output is scaled ×1.5: the image still looks right, the activations do not.

What a wrong `output_scale_factor`, a LoRA merged at the wrong strength or a skipped rescale does: one resnet's
output is 1.5 times what it should be at every step. The network absorbs it — the image stays clean and
on-prompt — but the block's statistics sit far outside their healthy range from the first step: a drift that
only a baseline can name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class ScaledBlockConfig:
    block: str = "unet.down_blocks.1.resnets.0"
    scale: float = 1.5


class ScaledBlock:
    name = "scaled-block"
    description = "one U-Net resnet's output is scaled ×1.5: the image looks fine, its activations drift"
    injected_at = ScaledBlockConfig().block

    def __init__(self, config: ScaledBlockConfig | None = None) -> None:
        self.config = config or ScaledBlockConfig()
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        scale = self.config.scale
        block = resolve_module(ctx.pipe, self.config.block)
        self._handle = block.register_forward_hook(lambda _m, _a, out: out * scale, prepend=True)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
