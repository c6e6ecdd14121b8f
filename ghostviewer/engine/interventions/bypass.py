"""Bypass: a block passes its input straight through, optionally only for a range of denoising steps.

Identity where the block's output has its input's shape (residual blocks, transformer blocks, mid blocks).
A resnet whose shortcut changes the channel count (the U-Net's up blocks, which take the skip concatenation,
and the first resnet of a wider level) gets the documented substitute "zero residual": only its shortcut
path runs, `conv_shortcut(input) / output_scale_factor`, as if its residual branch had output zeros. Other
blocks (whole down/up blocks, samplers, convolutions) are refused with a message naming bypassable ones inside.
The block still runs and its output is replaced, so the module's return convention (tensor, tuple, output
dataclass) is kept whatever it is; the replacement comes after every other hook on the block, so a user's hook
on a bypassed block is silenced with it. Dual-stream blocks (SD3, Flux: `(encoder_hidden, hidden)`) pass both streams
through, as SD3's own `skip_layers` does; the family adapter knows which is which.
"""

from __future__ import annotations

import torch
from torch import nn

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.module_io import main_input, replace_main_output
from ghostviewer.engine.tracing.blocks import bypass_mode, is_bypassable, resolve_module
from ghostviewer.spec.bypass import BypassSpec, BypassSpecError


class BypassConfig(BypassSpec):
    """A bypass as the engine applies it: the shared spec, with parse errors as GhostError (exit code 2)."""

    @classmethod
    def parse(cls, spec: str) -> BypassConfig:
        try:
            parsed = BypassSpec.parse(spec)
        except BypassSpecError as exc:
            raise GhostError(str(exc)) from None
        return cls(parsed.module, parsed.start, parsed.end)


class Bypass:
    name = "bypass"

    def __init__(self, config: BypassSpec) -> None:
        self.config = config
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def check(self, pipe: object) -> nn.Module:
        """The module to bypass; GhostError when it does not exist or changes its input's shape."""
        try:
            module = resolve_module(pipe, self.config.module)
        except KeyError as exc:
            raise GhostError(f"cannot bypass {self.config.module}: {exc.args[0]}") from None
        if not is_bypassable(module):
            inner = [n for n, m in module.named_modules() if n and is_bypassable(m)][:3]
            hint = f"; bypassable inside it: {', '.join(f'{self.config.module}.{n}' for n in inner)}" if inner else ""
            raise GhostError(
                f"{self.config.module} ({type(module).__name__}) changes the shape of its input, "
                f"so it cannot be bypassed as identity{hint}"
            )
        return module

    def apply(self, ctx: RunContext) -> None:
        module = self.check(ctx.pipe)
        config = self.config
        zero_residual = bypass_mode(module) == "zero_residual"
        adapter = adapter_for(ctx.pipe)

        def hook(block: nn.Module, args: tuple, kwargs: dict, output: object) -> object:
            if not config.active_at(ctx.current_step()):
                return output
            both = adapter.bypass_output(block, args, kwargs, output)
            if both is not NotImplemented:
                return both
            source = main_input(args, kwargs)
            if source is None:
                return output
            if zero_residual:
                source = block.conv_shortcut(source.contiguous()) / block.output_scale_factor
            return replace_main_output(output, source)

        # Appended: it runs after the hooks already on the block (a fault's, prepended; the user's own), so a
        # bypassed block hands on its input whatever those did to its output. The tracer hooks on afterwards
        # (runner.py) and records the bypassed output.
        self._handle = module.register_forward_hook(hook, with_kwargs=True)
        _library_hooks_last(module)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def _library_hooks_last(module: nn.Module) -> None:
    """transformers collects encoder layers' outputs (the `hidden_states` SDXL and SD3 condition on) with forward
    hooks it puts on a model at its first call. Those must collect the bypassed output, so they go after ours:
    otherwise every run after the first in a process conditions on the un-bypassed layer, and replays diverge."""
    hooks = module._forward_hooks
    for key, fn in list(hooks.items()):
        if getattr(fn, "__module__", "").startswith("transformers."):
            hooks.move_to_end(key)
