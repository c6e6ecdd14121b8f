"""The user's own code on an isolated module, carried onto its rebuilt copy by reference (in memory): attention
processors that are not diffusers' own, and forward hooks. Without them the rebuilt block would run diffusers'
default processor and behave differently from the block that ran. And the user's edits of plain attributes
(`norm.eps = 0`, a changed scale): a rebuild from a config or constructor arguments has the values those give,
so each one that differs is set on the copy (and written into repro.py)."""

from __future__ import annotations

import math
from typing import Any

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
                if key in sub._forward_hooks_with_kwargs:  # called as hook(module, args, kwargs, output)
                    target._forward_hooks_with_kwargs[key] = True
                carried.append(f"forward hook {getattr(hook, '__qualname__', type(hook).__name__)} on "
                               f"{name or 'the module'}")
    return carried


_PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def attribute_edits(original: nn.Module, rebuilt: nn.Module) -> dict[str, dict[str, Any]]:
    """{submodule path ("" the module): {attribute: the original's value}} for each plain attribute of the
    original that the rebuilt copy has with another value."""
    edits: dict[str, dict[str, Any]] = {}
    for name, sub in original.named_modules():
        try:
            target = rebuilt.get_submodule(name) if name else rebuilt
        except AttributeError:
            continue
        mine, theirs = vars(sub), vars(target)
        changed = {key: value for key, value in mine.items()
                   if not key.startswith("_") and key != "training" and _plain(value)
                   and key in theirs and _plain(theirs[key]) and not _same(value, theirs[key])}
        if changed:
            edits[name] = changed
    return edits


def set_attributes(module: nn.Module, edits: dict[str, dict[str, Any]]) -> None:
    for name, values in edits.items():
        target = module.get_submodule(name) if name else module
        for key, value in values.items():
            setattr(target, key, value)
