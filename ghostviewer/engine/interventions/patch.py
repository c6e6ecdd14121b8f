"""Activation patching: one block's output replaced, call by call, by the same block's output in a reference run.

Bisection says "bypassing X makes the symptom go away"; patching asks the sharper question "had X produced what
it produces in a good run, would the bad run have been fine?". `PatchCapture` rides along a reference run and
keeps X's main output of every call; `Patch` then rides along the bad run and swaps each call's output for the
reference's output of the same call. Calls are matched in execution order — the n-th call of X in one run with
the n-th in the other, which is (step, call) by (step, call) when both runs have the same structure (steps,
guidance batching); a different number of calls or a different shape is refused, never patched approximately.

The captured outputs stay on the device, at full precision, for the life of one patch: they are the exact
tensors of a run made in the same process, not the pooled float16 previews of a record (STYLE's "copy off the
device" is for what outlives a run; this does not). Both hooks are appended, so the tracer (added later, after
them) records the patched output, and faults hooked on the block (prepended) run before the patch replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.module_io import replace_main_output, replaceable_tensor
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class PatchConfig:
    module: str  # the block whose output is captured (reference run) or replaced (patched run)


def _resolve(pipe: object, path: str) -> nn.Module:
    try:
        return resolve_module(pipe, path)
    except KeyError as exc:
        raise GhostError(f"cannot patch {path}: {exc.args[0]}") from None


@dataclass
class PatchCapture:
    """On the reference run: keeps the block's main output of every call, in order, on its device."""

    config: PatchConfig
    outputs: list[torch.Tensor] = field(default_factory=list)
    name: str = "patch-capture"
    _handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        self.outputs.clear()

        def capture_hook(_block: nn.Module, _args: tuple, output: object) -> None:
            tensor = replaceable_tensor(output)
            if tensor is None:
                raise GhostError(f"{self.config.module} returns {type(output).__name__}: no tensor to patch with")
            self.outputs.append(tensor.detach().clone())  # a copy: the pipeline may reuse the memory

        self._handle = _resolve(ctx.pipe, self.config.module).register_forward_hook(capture_hook)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


@dataclass
class Patch:
    """On the patched run: the n-th call's output becomes the reference's n-th output (dtype and device of the run)."""

    config: PatchConfig
    reference: list[torch.Tensor]
    calls: int = 0
    name: str = "patch"
    _handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        self.calls = 0

        def patch_hook(_block: nn.Module, _args: tuple, output: object) -> object:
            index = self.calls
            self.calls += 1
            current = replaceable_tensor(output)
            if index >= len(self.reference):
                raise GhostError(
                    f"{self.config.module} ran more often in the patched run than in the reference "
                    f"({len(self.reference)} calls): the runs differ in structure, so there is nothing to patch with"
                )
            value = self.reference[index]
            if current is None or current.shape != value.shape:
                shape = None if current is None else tuple(current.shape)
                raise GhostError(
                    f"{self.config.module}, call {index}: the reference output has shape {tuple(value.shape)}, "
                    f"the patched run's {shape}: not a comparable reference"
                )
            return replace_main_output(output, value.to(current.device))

        self._handle = _resolve(ctx.pipe, self.config.module).register_forward_hook(patch_hook)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
