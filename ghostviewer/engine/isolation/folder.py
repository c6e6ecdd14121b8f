"""An isolated folder: what `isolate` writes and `fuzz` reads back.

    module.json          the module's path, class, how to rebuild it, dtype, processors, injected faults, the
                         run it came from and the statistics of its real output
    inputs.json          the call's arguments (tensors by key, see arguments.py)
    inputs.safetensors   the call's tensors
    weights.safetensors  the module's state_dict at that call
    repro.py, README.md  the standalone repro (torch, diffusers and safetensors only)

Nothing is unpickled and no code from the folder is run by GhostViewer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.isolation.arguments import EncodedCall, decode_call
from ghostviewer.engine.isolation.carry import set_attributes
from ghostviewer.engine.isolation.rebuild import BuildSpec, build, class_path, load_class

SCHEMA = 1
FILES = ("module.json", "inputs.json", "inputs.safetensors", "weights.safetensors")


@dataclass
class IsolatedCase:
    meta: dict[str, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: dict[str, torch.Tensor]

    @property
    def module_path(self) -> str:
        return str(self.meta["module"])

    @property
    def faults(self) -> list[dict[str, Any]]:
        return list(self.meta.get("faults") or [])

    @property
    def build(self) -> BuildSpec:
        return BuildSpec.from_json(self.meta["build"])


def write_folder(out: Path, meta: dict[str, Any], call: EncodedCall, state: dict[str, torch.Tensor]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in call.tensors.items()}, str(out / "inputs.safetensors"))
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "weights.safetensors"))
    (out / "inputs.json").write_text(json.dumps(call.spec, indent=2) + "\n", encoding="utf-8")
    (out / "module.json").write_text(json.dumps({"schema": SCHEMA, **meta}, indent=2) + "\n", encoding="utf-8")


def read_folder(folder: str | Path) -> IsolatedCase:
    path = Path(folder)
    missing = [name for name in FILES if not (path / name).is_file()]
    if missing:
        raise GhostError(f"{path} is not an isolated module folder (missing {', '.join(missing)})")
    try:
        meta = json.loads((path / "module.json").read_text(encoding="utf-8"))
        spec = json.loads((path / "inputs.json").read_text(encoding="utf-8"))
        tensors = load_file(str(path / "inputs.safetensors"))
        state = load_file(str(path / "weights.safetensors"))
    except (OSError, ValueError) as exc:
        raise GhostError(f"cannot read isolated folder {path}: {exc}") from None
    if meta.get("schema") != SCHEMA:
        raise GhostError(f"{path}/module.json has schema {meta.get('schema')!r}; this GhostViewer reads {SCHEMA}")
    args, kwargs = decode_call(spec, tensors)
    return IsolatedCase(meta, args, kwargs, state)


def module_dtype(module: nn.Module) -> torch.dtype:
    for tensor in (*module.parameters(), *module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


def diffusers_processors(processors: dict[str, str], fresh: nn.Module | None = None) -> dict[str, str]:
    """Only diffusers' own processors (a fault's is written as an injected fault instead), and with `fresh` (a
    newly built module) only those that differ from what it has by default."""
    kept = {name: cls for name, cls in processors.items() if cls.startswith("diffusers.")}
    if fresh is not None:
        kept = {n: c for n, c in kept.items() if class_path(getattr(fresh.get_submodule(n), "processor", None)) != c}
    return kept


def materialize(module: nn.Module, dtype: str, state: dict[str, torch.Tensor],
                processors: dict[str, str]) -> nn.Module:
    """A freshly built module in the run's dtype with the run's weights (strictly) and attention processors."""
    if module_dtype(module) != getattr(torch, dtype):
        nn.Module.to(module, getattr(torch, dtype))  # not ModelMixin.to, which warns about casting
    module.load_state_dict(state, strict=True)
    for name, cls in diffusers_processors(processors).items():
        sub = module.get_submodule(name)
        if class_path(sub.processor) != cls:
            sub.set_processor(load_class(cls)())
    return module.eval()


def rebuild_case(case: IsolatedCase) -> nn.Module:
    spec = case.build
    if spec.kind == "none":
        raise GhostError(f"{case.module_path} cannot be rebuilt outside its pipeline: {spec.reason}")
    module = materialize(build(spec), case.meta["dtype"], case.state, case.meta.get("processors") or {})
    set_attributes(module, case.meta.get("attributes") or {})  # the user's edits of plain attributes
    return module
