"""The user's own code on an isolated module, carried onto its rebuilt copy by reference (in memory): attention
processors that are not diffusers' own, and forward hooks. Without them the rebuilt block would run diffusers'
default processor and behave differently from the block that ran."""

from __future__ import annotations

from torch import nn

from ghostviewer.engine.isolation.rebuild import class_path


def carry_user_code(original: nn.Module, rebuilt: nn.Module) -> list[str]:
    """Set the original's non-diffusers processors and forward hooks on `rebuilt`; what was carried, in words."""
    carried: list[str] = []
    for name, sub in original.named_modules():
        target = rebuilt.get_submodule(name) if name else rebuilt
        processor = getattr(sub, "processor", None)
        if processor is not None and not class_path(processor).startswith("diffusers.") \
                and hasattr(target, "set_processor"):
            target.set_processor(processor)
            carried.append(f"processor {class_path(processor)} on {name or 'the module'}")
        for key, hook in sub._forward_hooks.items():
            if key not in target._forward_hooks:
                target._forward_hooks[key] = hook
                carried.append(f"forward hook {getattr(hook, '__qualname__', type(hook).__name__)} on "
                               f"{name or 'the module'}")
    return carried
