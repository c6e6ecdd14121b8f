"""How an isolated module is rebuilt without its pipeline, with diffusers alone, tried in this order:

- "config": a diffusers `ConfigMixin` model (Transformer2DModel, UNet2DConditionModel, AutoencoderKL…):
  `cls.from_config(config)`;
- "kwargs": a common block that keeps no config (ResnetBlock2D, Attention, BasicTransformerBlock, the U-Net's
  mid and down blocks): `cls(**recovered_constructor_arguments)`;
- "parent": any submodule of a `ConfigMixin` component: `Parent.from_config(config).get_submodule(path)`
  (builds the whole component once: exact, but costs its memory);
- "none": the module cannot be rebuilt; its inputs and weights are still saved.

Each candidate is accepted only when `check(rebuilt)` (strict weight loading and a run on the real inputs,
done by the caller) passes.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from ghostviewer.engine.isolation.constructors import Unrecoverable, recover_kwargs


@dataclass(frozen=True)
class BuildSpec:
    kind: str  # config | kwargs | parent | none
    class_path: str  # the isolated module's class
    values: dict[str, Any]  # the config, the constructor keywords, or the parent's config
    parent_class: str | None = None
    path: str | None = None  # the module inside the parent
    reason: str = ""  # why "none", or why earlier candidates were refused

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildSpec:
        return cls(**{k: data.get(k) for k in ("kind", "class_path", "values", "parent_class", "path")},
                   reason=str(data.get("reason") or ""))


def class_path(obj: object) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def load_class(path: str) -> Any:
    """A class by dotted path; a diffusers class that moved between versions by its top-level name."""
    module_name, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError):
        import diffusers

        return getattr(diffusers, name)


def _config_of(module: nn.Module) -> dict[str, Any] | None:
    from diffusers.configuration_utils import ConfigMixin

    if isinstance(module, ConfigMixin) and hasattr(module, "to_json_string"):
        return json.loads(module.to_json_string())
    return None


def candidates(module: nn.Module, parent: nn.Module | None, relative: str) -> Iterator[BuildSpec]:
    own = class_path(module)
    config = _config_of(module)
    if config is not None:
        yield BuildSpec("config", own, config)
    try:
        yield BuildSpec("kwargs", own, json.loads(json.dumps(recover_kwargs(module))))
    except Unrecoverable:
        pass
    parent_config = (_config_of(parent) or _transformers_config_of(parent)) if parent is not None and relative \
        else None
    if parent_config is not None:
        yield BuildSpec("parent", own, parent_config, parent_class=class_path(parent), path=relative)


def _transformers_config_of(module: nn.Module) -> dict[str, Any] | None:
    """A transformers model's config (a text encoder: CLIP, T5), for the "parent" route."""
    config = getattr(module, "config", None)
    if hasattr(config, "to_json_string") and hasattr(type(module), "config_class"):
        return json.loads(config.to_json_string(use_diff=False))
    return None


def from_parent_config(cls: Any, values: dict[str, Any]) -> nn.Module:
    """A component from its config: diffusers' `from_config`, or a transformers model from its config class."""
    if hasattr(cls, "from_config"):
        return cls.from_config(values)
    return cls(cls.config_class.from_dict(values))


def build(spec: BuildSpec) -> nn.Module:
    if spec.kind == "config":
        return load_class(spec.class_path).from_config(spec.values)
    if spec.kind == "kwargs":
        return load_class(spec.class_path)(**spec.values)
    if spec.kind == "parent" and spec.parent_class and spec.path:
        return from_parent_config(load_class(spec.parent_class), spec.values).get_submodule(spec.path)
    raise ValueError(f"cannot rebuild: {spec.reason or spec.kind}")


def choose_build(
    module: nn.Module, parent: nn.Module | None, relative: str, check: Callable[[nn.Module], str | None]
) -> BuildSpec:
    """The first candidate that builds and passes `check` (None = fine, else why not)."""
    refused: list[str] = []
    for spec in candidates(module, parent, relative):
        try:
            problem = check(build(spec))
        except Exception as exc:  # noqa: BLE001 - a candidate that does not build is just refused
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            return BuildSpec(spec.kind, spec.class_path, spec.values, spec.parent_class, spec.path,
                             reason="; ".join(refused))
        refused.append(f"{spec.kind}: {' '.join(problem.split())[:200]}")
    why = "; ".join(refused) or f"{type(module).__name__} has no diffusers config and no known constructor"
    return BuildSpec("none", class_path(module), {}, reason=why)
