"""A module call's main tensors, whatever its return convention (tensor, tuple, ModelOutput): the one place that
knows them, for the tracer, the family adapters, isolation, bypass and patching.

`main_tensor` is the output the trace records; `main_input` the input a bypass hands on; `replace_main_output`
puts a tensor in its output's place, keeping the convention, and `replaceable_tensor` is the tensor it replaces
(for an output object its first field, which need not be the one `main_tensor` picks).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from ghostviewer.engine.errors import GhostError

_OUTPUT_FIELDS = ("sample", "last_hidden_state", "hidden_states")
_INPUT_KEYWORDS = ("hidden_states", "input_tensor", "sample")


class Streams(Protocol):
    """What a family adapter knows of dual-stream blocks (SD3, Flux: `(text, image)` outputs)."""

    def is_dual_stream(self, module: nn.Module) -> bool: ...

    def streams(self, module: nn.Module, output: object) -> tuple[torch.Tensor | None, torch.Tensor | None]: ...


def main_tensor(output: object, module: nn.Module | None = None, adapter: Streams | None = None
                ) -> torch.Tensor | None:
    """The main tensor of a module output: a tensor, the first tensor of a tuple/list, or a `.sample`-like field
    (else the first tensor of `to_tuple()`); for a dual-stream block (give the module and its family's adapter)
    its image stream, as the trace records it."""
    if isinstance(output, torch.Tensor):
        return output
    if module is not None and adapter is not None and adapter.is_dual_stream(module):
        return adapter.streams(module, output)[0]
    if isinstance(output, (tuple, list)):
        for item in output:
            if isinstance(item, torch.Tensor):
                return item
        return None
    for name in _OUTPUT_FIELDS:
        candidate = getattr(output, name, None)
        if isinstance(candidate, torch.Tensor):
            return candidate
    if hasattr(output, "to_tuple"):
        return main_tensor(output.to_tuple())
    return None


def main_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The main input of a module call: the first positional tensor, else `hidden_states`, `input_tensor` or
    `sample` given by keyword."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    for key in _INPUT_KEYWORDS:
        if isinstance(kwargs.get(key), torch.Tensor):
            return kwargs[key]
    return None


def replaceable_tensor(output: object) -> torch.Tensor | None:
    """The tensor `replace_main_output` replaces: the output itself, the first tensor of a tuple, or the first
    field of an output object."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, tuple):
        return next((item for item in output if isinstance(item, torch.Tensor)), None)
    if hasattr(output, "keys"):
        first = next(iter(output.keys()), None)  # type: ignore[attr-defined]
        value = None if first is None else output[first]  # type: ignore[index]
        return value if isinstance(value, torch.Tensor) else None
    return None


def replace_main_output(output: object, value: torch.Tensor) -> object:
    """`output` with `value` (in the output's dtype) in its main tensor's place: the tensor itself, the first
    tensor of a tuple with `value`'s shape, or an output object's first field. GhostError for anything else."""
    if isinstance(output, torch.Tensor):
        return value.to(output.dtype)
    if isinstance(output, tuple):
        items = list(output)
        for i, item in enumerate(items):
            if isinstance(item, torch.Tensor) and item.shape == value.shape:
                items[i] = value.to(item.dtype)
                return tuple(items)
    if hasattr(output, "keys"):  # diffusers / transformers ModelOutput
        first = next(iter(output.keys()))
        return type(output)(**{**output, first: value.to(output[first].dtype)})
    raise GhostError(f"cannot bypass a block returning {type(output).__name__}")
