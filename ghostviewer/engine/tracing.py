"""The tracer: forward hooks that record per-module statistics and feature maps, phase by phase, step by step.

Hooks only queue device-side stat vectors; `flush()` moves a whole step's worth to the host in one transfer.
Hooks are attached inside a context manager and removed in `finally`, so a failed run never leaves one behind.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ghostviewer.engine.blocks import Depth, iter_modules, phase_of
from ghostviewer.engine.stats import fingerprint, finish_stats, first_tensor, tensor_stats
from ghostviewer.record import StatRow


@dataclass(frozen=True)
class TraceConfig:
    depth: Depth = "block"
    capture: tuple[str, ...] = ()  # glob patterns of module paths whose outputs are kept as feature maps
    capture_size: int = 32  # spatial side of a captured map, after average pooling
    capture_channels: int = 64


@dataclass
class _Pending:
    path: str
    phase: str
    step: int | None
    call: int
    seq: int
    shape: tuple[int, ...]
    dtype: str
    stats: torch.Tensor | list[float]
    fp: torch.Tensor | int | None


@dataclass
class StepHarvest:
    rows: list[StatRow] = field(default_factory=list)
    feature_maps: dict[str, np.ndarray] = field(default_factory=dict)


def downsample_feature_map(t: torch.Tensor, size: int, channels: int) -> np.ndarray | None:
    """A small float16 host copy of a module output: (C, H, W) for images, (tokens, dim) for sequences.

    The last batch item is kept: with classifier-free guidance it is the prompt-conditioned half.
    """
    x = t.detach()[-1]
    if x.ndim == 3:
        x = x[:channels].float()
        if max(x.shape[-2:]) > size:
            x = F.adaptive_avg_pool2d(x, (min(size, x.shape[-2]), min(size, x.shape[-1])))
    elif x.ndim == 2:
        x = x[:256, :256].float()
    else:
        return None
    return x.to(torch.float16).cpu().numpy()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Tracer:
    def __init__(self, pipe: object, config: TraceConfig | None = None) -> None:
        self.config = config or TraceConfig()
        self.modules: list[tuple[str, nn.Module]] = list(iter_modules(pipe, self.config.depth))
        self.step: int | None = None
        self._pending: list[_Pending] = []
        self._maps: dict[str, np.ndarray] = {}
        self._calls: dict[tuple[str, int | None], int] = {}
        self._seq = 0
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._phases: dict[str, str] = {}
        self._capture_cache: dict[str, bool] = {}
        self.muted: list[Any] = []  # bypass specs (module, active_at): outputs inside them are not recorded

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def wants_capture(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.config.capture)

    # Per-path answers are cached: hooks run hundreds of times per step.
    def _phase_of(self, path: str) -> str:
        if path not in self._phases:
            self._phases[path] = phase_of(path)
        return self._phases[path]

    def _captured(self, path: str) -> bool:
        if path not in self._capture_cache:
            self._capture_cache[path] = self.wants_capture(path)
        return self._capture_cache[path]

    def record(self, path: str, tensor: torch.Tensor, phase: str | None = None) -> None:
        """Queue the stats of one tensor: a module output, or a pipeline-level tensor such as the initial latents."""
        phase = phase or self._phase_of(path)
        step = (self.step or 0) if phase == "denoise" else None
        if self.muted and self._inside_bypass(path, step):
            return
        call = self._calls.get((path, step), 0)
        self._calls[(path, step)] = call + 1
        self._pending.append(
            _Pending(
                path,
                phase,
                step,
                call,
                self._seq,
                tuple(tensor.shape),
                str(tensor.dtype).removeprefix("torch."),
                tensor_stats(tensor),
                fingerprint(tensor),
            )
        )
        self._seq += 1
        if self._captured(path):
            fmap = downsample_feature_map(tensor, self.config.capture_size, self.config.capture_channels)
            if fmap is not None:
                key = path if call == 0 else f"{path}#{call}"
                self._maps[key] = fmap

    def _inside_bypass(self, path: str, step: int | None) -> bool:
        return any(path.startswith(spec.module + ".") and spec.active_at(step) for spec in self.muted)

    def _hook_for(self, path: str):
        def hook(_module: nn.Module, _args: tuple, output: object) -> None:
            tensor = first_tensor(output)
            if tensor is not None:
                self.record(path, tensor)

        return hook

    @contextmanager
    def hooks(self) -> Iterator[Tracer]:
        try:
            for path, module in self.modules:
                self._handles.append(module.register_forward_hook(self._hook_for(path)))
            yield self
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()

    def flush(self) -> StepHarvest:
        """Everything queued since the last flush, as host-side rows: at most one device-to-host transfer."""
        pending, self._pending = self._pending, []
        maps, self._maps = self._maps, {}
        on_device = [p.stats for p in pending if isinstance(p.stats, torch.Tensor)]
        moved = iter(torch.stack([t.to(on_device[0].device) for t in on_device]).cpu().tolist() if on_device else [])
        fp_on_device = [p.fp for p in pending if isinstance(p.fp, torch.Tensor)]
        fps = iter(torch.stack([t.to(fp_on_device[0].device) for t in fp_on_device]).cpu().tolist()
                   if fp_on_device else [])
        rows = []
        for p in pending:
            raw = next(moved) if isinstance(p.stats, torch.Tensor) else p.stats
            numel = math.prod(p.shape) if p.shape else 1
            rows.append(
                StatRow(
                    phase=p.phase,
                    step=p.step,
                    module=p.path,
                    call=p.call,
                    seq=p.seq,
                    shape=p.shape,
                    dtype=p.dtype,
                    **finish_stats(raw, numel),
                    fingerprint=next(fps) if isinstance(p.fp, torch.Tensor) else p.fp,
                )
            )
        return StepHarvest(rows, maps)
