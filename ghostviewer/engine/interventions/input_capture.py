"""Input capture: one call of one module — its real positional and keyword inputs, its weights as they were at
that moment (a fault may have changed them) and its output — copied to the host, for isolating it.

The call is chosen by denoising step (None: any phase, calls counted over the whole run) and by call index
within that step (0: the first; classifier-free guidance may call a module more than once per step). Steps
are counted here, from the timesteps the denoiser is called with (a new timestep, a new step), so the capture
needs nothing from the runner. Nothing the module computes is changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.interventions.base import RunContext, in_own_call
from ghostviewer.engine.module_io import main_tensor
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class InputCaptureConfig:
    module: str
    step: int | None = None  # denoising step; None: count calls over the whole run (encode/decode modules)
    call: int = 0

    def __post_init__(self) -> None:
        if self.call < 0 or (self.step is not None and self.step < 0):
            raise ValueError("step and call are non-negative")


@dataclass
class CapturedCall:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: dict[str, torch.Tensor]
    processors: dict[str, str] = field(default_factory=dict)  # Attention submodule -> processor class path
    output: torch.Tensor | None = None  # the main output tensor (a dual-stream block's image stream), host copy


def host_copy(value: Any) -> Any:
    """Tensors detached and copied to the CPU, through tuples, lists and dicts; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True).contiguous()
    if isinstance(value, tuple):
        return tuple(host_copy(v) for v in value)
    if isinstance(value, list):
        return [host_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: host_copy(v) for k, v in value.items()}
    return value


def processor_paths(module: nn.Module) -> dict[str, str]:
    """The attention processor class of every submodule that has one, by relative path."""
    found = {}
    for name, sub in module.named_modules():
        processor = getattr(sub, "processor", None)
        if processor is not None and hasattr(sub, "set_processor"):
            found[name] = f"{type(processor).__module__}.{type(processor).__qualname__}"
    return found


class DenoiserSteps:
    """The denoising step, counted from the denoiser's calls: each new `timestep` value starts the next step."""

    def __init__(self) -> None:
        self.step = -1
        self._last: float | None = None

    def __call__(self, _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        timestep = kwargs.get("timestep", args[1] if len(args) > 1 else None)
        if isinstance(timestep, torch.Tensor):
            timestep = float(timestep.reshape(-1)[0]) if timestep.numel() else None
        value = None if timestep is None else float(timestep)
        if value is None or value != self._last:
            self.step += 1
        self._last = value


class InputCapture:
    name = "input-capture"

    def __init__(self, config: InputCaptureConfig) -> None:
        self.config = config
        self.captured: CapturedCall | None = None
        self._calls: dict[int | None, int] = {}
        self._armed = False
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def apply(self, ctx: RunContext) -> None:
        try:
            module = resolve_module(ctx.pipe, self.config.module)
        except KeyError as exc:
            raise GhostError(f"cannot capture {self.config.module}: {exc.args[0]}") from None
        wanted = self.config
        adapter = adapter_for(ctx.pipe)  # SD3/Flux blocks return (text, image): the image stream, as traced
        steps = DenoiserSteps()
        if wanted.step is not None:  # before the capture's own hook, should the module be the denoiser itself
            denoiser = resolve_module(ctx.pipe, self.config.module.split(".", 1)[0])
            self._handles.append(denoiser.register_forward_pre_hook(steps, with_kwargs=True))

        def before(block: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if in_own_call():  # GhostViewer's own (the prompt's embeddings recorded): the record counts no such call
                return
            step = steps.step if wanted.step is not None else None
            call = self._calls.get(step, 0)
            self._calls[step] = call + 1
            if self.captured is None and step == wanted.step and call == wanted.call:
                self._armed = True
                state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in block.state_dict().items()}
                self.captured = CapturedCall(host_copy(args), host_copy(kwargs), state, processor_paths(block))

        def after(block: nn.Module, _args: tuple[Any, ...], _kwargs: dict[str, Any], output: Any) -> None:
            if self._armed and self.captured is not None:
                self._armed = False
                main = main_tensor(output, block, adapter)
                self.captured.output = None if main is None else host_copy(main)

        self._handles += [
            module.register_forward_pre_hook(before, with_kwargs=True),
            module.register_forward_hook(after, with_kwargs=True),  # after bypasses and faults: the real output
        ]

    @property
    def done(self) -> bool:
        return self.captured is not None and not self._armed

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
