"""Flip another component's config key for a settings-bisection trial (a VAE's `scaling_factor` or
`force_upcast`, a U-Net's `upcast_attention`, a transformers text encoder's `hidden_act` or `layer_norm_eps`): the
component is rebuilt from its config with the good run's value and the loaded weights — the same tensors, assigned
(no copy), built on the meta device first — and put back after. A diffusers model is built with `from_config`, a
transformers one as `type(model)(config)` from a copy of its config with the key set.

A key can be flipped only where that rebuild holds the loaded weights exactly (same parameter and buffer names and
shapes): a key that changes the architecture (`block_out_channels`, `hidden_size`, `num_hidden_layers`) cannot,
nor a component of another class in the good run, one with no config to rebuild it from or one whose forward the
user replaced. `flippable` says why in one line. The user's forward hooks and attention processors are carried
over to the rebuilt module by reference, so their own code keeps running in the trial.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
          "_forward_hooks_always_called")


def _is_transformers(module: Any) -> bool:
    try:
        from transformers import PretrainedConfig, PreTrainedModel
    except ImportError:  # pragma: no cover - diffusers pipelines bring transformers
        return False
    return isinstance(module, PreTrainedModel) and isinstance(getattr(module, "config", None), PretrainedConfig)


def _build(module: Any, changes: dict[str, Any]) -> Any:
    """The module's class from its config with `changes`, on the meta device (no memory, no initialisation)."""
    if _is_transformers(module):
        config = copy.deepcopy(module.config)
        for key, value in changes.items():
            if not hasattr(config, key):
                raise ValueError(f"{type(config).__name__} has no key {key!r}")
            setattr(config, key, value)
        with torch.device("meta"):
            return type(module)(config)
    config = {k: v for k, v in dict(module.config).items() if not str(k).startswith("_")}
    with torch.device("meta"):
        return type(module).from_config({**config, **changes})


def _shapes(module: Any) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in (*module.named_parameters(), *module.named_buffers())}


def flippable(pipe: Any, component: str, key: str, value: Any, good_class: Any) -> str | None:
    """None when `component.key` can be set to `value` for a trial, else why not (one line)."""
    module = getattr(pipe, component, None)
    if module is None:
        return f"the pipeline has no {component}"
    if good_class is not None and good_class != type(module).__name__:
        return f"the good run's {component} is a {good_class}, this one a {type(module).__name__}"
    diffusers_model = hasattr(type(module), "from_config") and hasattr(getattr(module, "config", None), "items")
    if not diffusers_model and not _is_transformers(module):
        return f"{type(module).__name__} has no diffusers or transformers config to rebuild it from"
    if "forward" in vars(module):
        return f"the user replaced {component}.forward: a rebuilt {component} would drop it"
    try:
        built = _build(module, {key: value})
    except Exception as exc:  # noqa: BLE001 - diffusers refuses a value in its own words
        return f"{type(module).__name__} cannot be built with {key}={value!r} ({str(exc).splitlines()[0]})"
    if _shapes(built) != _shapes(module):
        return f"the loaded weights do not fit {key}={value!r} (it changes {component}'s architecture)"
    return None


def _rebuilt(module: Any, changes: dict[str, Any]) -> Any:
    new = _build(module, changes)
    new.load_state_dict(module.state_dict(), strict=True, assign=True)
    old_buffers = dict(module.named_buffers())
    for name, buffer in list(new.named_buffers()):  # non-persistent buffers are not in the state dict
        if buffer.is_meta:
            owner, _, leaf = name.rpartition(".")
            new.get_submodule(owner)._buffers[leaf] = old_buffers[name]
    old_modules = dict(module.named_modules())
    for name, sub in new.named_modules():  # the user's hooks, by reference
        for attr in _HOOKS:
            getattr(sub, attr).update(getattr(old_modules[name], attr))
    processors = getattr(module, "attn_processors", None)
    if isinstance(processors, dict) and processors:
        new.set_attn_processor(dict(processors))
    return new.eval()


@contextmanager
def flipped(pipe: Any, changes: dict[str, dict[str, Any]]) -> Iterator[None]:
    """Each component rebuilt with its changed keys ({component: {key: value}}) for the block, the originals put
    back after it."""
    originals = {name: getattr(pipe, name) for name in changes if changes[name]}
    try:
        for name, module in originals.items():
            setattr(pipe, name, _rebuilt(module, changes[name]))
        yield
    finally:
        for name, module in originals.items():
            setattr(pipe, name, module)
