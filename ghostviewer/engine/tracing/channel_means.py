"""Per-channel means of the traced encode and decode outputs: where a baseline can afford them.

The tracer keeps one mean over a whole output; a colour shift in the VAE decoder or a text encoder that returns
the wrong prompt's encoding moves single channels and can leave that mean where it was. The encode and decode
phases run once per run (against twenty U-Net calls), so the mean of each channel of their outputs costs nothing
worth measuring. Only a module's first call in a phase is kept (in the encode phase, the prompt's encoding; the
negative prompt's comes second), of the first batch item: (C, H, W) outputs give C means, (tokens, dim) give dim.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ghostviewer.analysis.baseline_store import channel_means_tensors
from ghostviewer.engine.module_io import main_tensor
from ghostviewer.engine.tracing.blocks import phase_of

if TYPE_CHECKING:  # it is applied like an intervention, and uses nothing of the run's context
    from ghostviewer.engine.interventions.base import RunContext

PHASES = ("encode", "decode")
MAX_CHANNELS = 4096


def channel_mean(tensor: torch.Tensor) -> np.ndarray | None:
    """Means over every axis but the channels of the first batch item, as float32 on the host."""
    x = tensor.detach()[0]
    if x.ndim == 3:
        means = x.float().mean(dim=(1, 2))
    elif x.ndim == 2:
        means = x.float().mean(dim=0)
    else:
        return None
    if means.numel() > MAX_CHANNELS:
        return None
    return means.to("cpu").numpy()


class ChannelMeans:
    """Forward hooks on the traced encode/decode modules; `values[(phase, module)]` fills as the run goes."""

    name = "channel-means"

    def __init__(self, modules: Sequence[tuple[str, nn.Module]], muted: Sequence[Any] = ()) -> None:
        self.targets = [(path, module) for path, module in modules if phase_of(path) in PHASES]
        self.muted = list(muted)  # bypass specs: outputs inside a bypassed block are not the run's
        self.values: dict[tuple[str, str], np.ndarray] = {}
        self.thread: int | None = None  # set: only that thread's outputs (a watched pipeline shared by threads)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def _hook(self, path: str):
        key = (phase_of(path), path)

        def hook(_module: nn.Module, _args: tuple, output: object) -> None:
            if key in self.values or any(path.startswith(spec.module + ".") and spec.active_at(None)
                                         for spec in self.muted):
                return
            if self.thread is not None and threading.get_ident() != self.thread:
                return
            tensor = main_tensor(output)
            means = channel_mean(tensor) if isinstance(tensor, torch.Tensor) else None
            if means is not None:
                self.values[key] = means

        return hook

    def apply(self, ctx: RunContext) -> None:
        self._handles = [module.register_forward_hook(self._hook(path)) for path, module in self.targets]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def arrays(self) -> dict[str, np.ndarray]:
        """The means as a record's tensors: 'phase/module' -> (C,) float32."""
        return channel_means_tensors(self.values)
