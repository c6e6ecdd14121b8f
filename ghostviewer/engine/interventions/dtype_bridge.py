"""Mixed per-component dtypes (`--dtype float32,vae=float16`): cast tensors at each component's entrances.

diffusers pipelines pass tensors between components without casting, so a float16 VAE behind a float32 U-Net
fails on its first convolution. Pre-hooks on each component's entry modules cast floating inputs to that
component's dtype — the usual way to test "is it fine in float32 but broken in float16?" one part at a time.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import pipeline_components

# Modules called directly by pipelines (not only through the component's forward).
_ENTRANCES = {"vae": ("post_quant_conv", "decoder", "encoder", "quant_conv")}


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    if isinstance(value, tuple):
        return tuple(_cast(v, dtype) for v in value)
    return value


def _component_dtype(module: nn.Module) -> torch.dtype | None:
    parameter = next(module.parameters(), None)
    return parameter.dtype if parameter is not None else None


class DtypeBridge:
    name = "dtype-bridge"

    def __init__(self) -> None:
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    @staticmethod
    def needed(pipe: object) -> bool:
        dtypes = {_component_dtype(m) for m in pipeline_components(pipe).values()} - {None}
        return len(dtypes) > 1

    def apply(self, ctx: RunContext) -> None:
        for name, component in pipeline_components(ctx.pipe).items():
            dtype = _component_dtype(component)
            if dtype is None:
                continue
            targets = [component] + [getattr(component, e) for e in _ENTRANCES.get(name, ()) if hasattr(component, e)]

            def hook(_module: nn.Module, args: tuple, kwargs: dict, dtype: torch.dtype = dtype) -> tuple:
                return _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}

            for target in targets:
                self._handles.append(target.register_forward_pre_hook(hook, with_kwargs=True))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
