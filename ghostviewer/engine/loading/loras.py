"""LoRA files for GhostViewer's own runs, through diffusers' PEFT integration: read and checked before anything runs
(a readable safetensors file — never pickle —, every key on a module of the pipeline that takes it, the shapes that
module takes), hashed for the record, loaded for one run only (`loras_loaded`: `load_lora_weights`, `set_adapters`
with the scales, `fuse_lora(safe_fusing=True)` only when asked) and always unloaded after it, the pipeline left as it
was (fused weights put back bit for bit, not by subtracting the delta again). Also what the pipeline holds now
(`lora_layers`, `adapter_names`): the findings of engine/run/lora_effect.py read it.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from ghostviewer.engine.errors import GhostError
from ghostviewer.spec.loras import parse_lora

ADAPTER_PREFIX = "ghostviewer_lora_"  # the adapter names of GhostViewer's own LoRAs: lora 0 is ghostviewer_lora_0
# A key's module path: the key without its LoRA parameter suffix (PEFT, diffusers' older formats).
_SUFFIX = re.compile(r"(?:\.(?:lora_A|lora_B|lora_down|lora_up|lora\.down|lora\.up|lora_linear_layer\.down|"
                     r"lora_linear_layer\.up|lora_embedding_A|lora_embedding_B|lora_magnitude_vector)|"
                     r"_lora\.(?:down|up))(?:\.[A-Za-z0-9_]+)*$|\.alpha$")  # _lora: attention-processor format
_DOWN = re.compile(r"(?:\.(?:lora_A|lora_down|lora\.down|lora_linear_layer\.down)|_lora\.down)\.weight$")
_UP = re.compile(r"(?:\.(?:lora_B|lora_up|lora\.up|lora_linear_layer\.up)|_lora\.up)\.weight$")


@dataclass(frozen=True)
class LoraFile:
    """One LoRA of a run, read and checked: its file, scale, adapter name, sha256 and where it goes."""

    path: Path
    scale: float
    adapter: str
    sha256: str
    components: tuple[str, ...]
    keys: int

    def describe(self, fused: bool) -> dict[str, Any]:
        return {"file": str(self.path), "sha256": self.sha256, "scale": self.scale, "adapter": self.adapter,
                "components": list(self.components), "keys": self.keys, "fused": fused}


_OWN: dict[int, dict[str, str]] = {}  # id(pipe) -> {adapter: file} while loras_loaded holds GhostViewer's own


def lora_files(pipe: Any) -> dict[str, str]:
    """{adapter name: file} of the LoRAs GhostViewer loaded on this pipeline for the run under way ({}: none)."""
    return dict(_OWN.get(id(pipe), {}))


def _tuner_layer() -> type | None:
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return None
    return BaseTunerLayer


def _modules(pipe: Any) -> dict[str, torch.nn.Module]:
    components = getattr(pipe, "components", None) or {}
    return {name: module for name, module in components.items() if isinstance(module, torch.nn.Module)}


def lora_layers(pipe: Any) -> Iterator[tuple[str, str, Any]]:
    """(component, module path, PEFT layer) of every LoRA-carrying layer of the pipeline, in module order."""
    tuner = _tuner_layer()
    if tuner is None:
        return
    for name, component in _modules(pipe).items():
        for path, module in component.named_modules():
            if isinstance(module, tuner):
                yield name, path, module


def adapter_names(pipe: Any) -> dict[str, list[str]]:
    """{component: [adapter names]} of the adapters loaded on the pipeline (PEFT's peft_config), none: {}."""
    found: dict[str, list[str]] = {}
    for name, component in _modules(pipe).items():
        config = getattr(component, "peft_config", None)
        if isinstance(config, dict) and config:
            found[name] = sorted(map(str, config))
    return found


def _sha256(path: Path, flag: str) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise GhostError(f"{flag}: cannot read it ({exc.strerror or exc})") from None
    return digest.hexdigest()


def _header(path: Path, flag: str) -> dict[str, tuple[int, ...]]:
    """{key: shape} from the safetensors header (cheap); a pickle or a foreign file is refused here, unread."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise GhostError(f"{flag}: not a safetensors file ({reason}); LoRAs are read from .safetensors only, never "
                         "from pickle") from None


def _converted_keys(pipe: Any, path: Path, flag: str) -> list[str]:
    """The file's keys as diffusers will load them (kohya / A1111 names converted), without touching the pipeline."""
    try:
        state = pipe.lora_state_dict(str(path), use_safetensors=True, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever diffusers makes of the file: it is not a LoRA it can load
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise GhostError(f"{flag}: diffusers cannot read it as a LoRA for {type(pipe).__name__}: {reason}") from None
    state = state[0] if isinstance(state, tuple) else state
    return list(state)


def _module_path(key: str) -> str:
    return _SUFFIX.sub("", key.replace(".processor.", "."))


def _check_keys(pipe: Any, flag: str, shapes: dict[str, tuple[int, ...]],
                keys: list[str]) -> tuple[str, ...]:
    """Every key on a module of a component diffusers loads LoRAs into, with shapes that module takes; the
    components it goes to."""
    modules = _modules(pipe)
    loadable = tuple(getattr(pipe, "_lora_loadable_modules", ()) or ())
    named: dict[str, dict[str, torch.nn.Module]] = {}
    used: list[str] = []
    for key in keys:
        component, _, rest = key.partition(".")
        if component not in modules:
            raise GhostError(f"{flag}: its key {key!r} is for a {component!r} component, which this pipeline "
                             f"({type(pipe).__name__}) does not have: a LoRA made for another model?")
        if loadable and component not in loadable:
            raise GhostError(f"{flag}: its key {key!r} is for the {component}, which diffusers loads no LoRA into on "
                             f"{type(pipe).__name__} (only {', '.join(loadable)})")
        if component not in named:  # walked once per component (setdefault would walk it for every key)
            named[component] = dict(modules[component].named_modules())
        tree = named[component]
        path = _module_path(rest)
        module = tree.get(path) or tree.get(f"{path}.0")  # to_out_lora: to_out.0
        if module is None:
            raise GhostError(f"{flag}: its key {key!r} matches no module of the pipeline's {component} "
                             f"({type(modules[component]).__name__}): a LoRA made for another model?")
        _check_shape(flag, key, shapes.get(key), component, path, module)
        if component not in used:
            used.append(component)
    return tuple(used)


def _check_shape(flag: str, key: str, shape: tuple[int, ...] | None, component: str, path: str,
                 module: torch.nn.Module) -> None:
    if shape is None or len(shape) < 2:
        return
    width = getattr(module, "in_features", getattr(module, "in_channels", None))
    height = getattr(module, "out_features", getattr(module, "out_channels", None))
    if _DOWN.search(key) and width is not None and shape[1] != width:
        raise GhostError(f"{flag}: its key {key!r} takes {shape[1]} inputs but {component}.{path} gives {width}: a "
                         "LoRA made for another model?")
    if _UP.search(key) and height is not None and shape[0] != height:
        raise GhostError(f"{flag}: its key {key!r} makes {shape[0]} outputs but {component}.{path} makes {height}: "
                         "a LoRA made for another model?")


def read_loras(pipe: Any, entries: Sequence[str]) -> list[LoraFile]:
    """The run's LoRAs read and checked against the pipeline, one line each (GhostError), before anything runs."""
    if not entries:
        return []
    if _tuner_layer() is None:
        raise GhostError("--lora needs peft (diffusers loads LoRAs through it): pip install 'peft>=0.12'")
    if not callable(getattr(pipe, "load_lora_weights", None)):
        raise GhostError(f"this pipeline ({type(pipe).__name__}) takes no LoRA: diffusers has no LoRA loader for it")
    loaded = adapter_names(pipe)
    if loaded:
        where = "; ".join(f"{component}: {', '.join(names)}" for component, names in loaded.items())
        raise GhostError(f"this pipeline already has LoRA adapters loaded ({where}): --lora would change them; unload "
                         "them first (pipe.unload_lora_weights()) or run without --lora")
    loras: list[LoraFile] = []
    for index, entry in enumerate(entries):
        lora = parse_lora(entry)
        path = Path(lora.path).resolve()
        flag = f"--lora {lora.path}"
        if not path.is_file():
            raise GhostError(f"{flag}: no such file" if not path.exists() else f"{flag}: not a file")
        digest = _sha256(path, flag)
        shapes = _header(path, flag)
        if not shapes:
            raise GhostError(f"{flag}: the file holds no tensors")
        components = _check_keys(pipe, flag, shapes, _converted_keys(pipe, path, flag))
        loras.append(LoraFile(path, float(lora.scale), f"{ADAPTER_PREFIX}{index}", digest, components, len(shapes)))
    return loras


def _saved_state(pipe: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The base weights under every LoRA layer, copied: a fused run puts them back exactly."""
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []
    for _component, _path, layer in lora_layers(pipe):
        base = layer.get_base_layer()
        for tensor in (getattr(base, "weight", None), getattr(base, "bias", None)):
            if isinstance(tensor, torch.Tensor):
                saved.append((tensor, tensor.detach().clone()))
    return saved


def _grad_flags(pipe: Any) -> list[tuple[torch.nn.Parameter, bool]]:
    # PEFT marks the base weights frozen when it injects an adapter; a run must not leave them so
    return [(p, p.requires_grad) for module in _modules(pipe).values() for p in module.parameters()]


@contextlib.contextmanager
def loras_loaded(pipe: Any, loras: Sequence[LoraFile], fuse: bool = False) -> Iterator[None]:
    """The LoRAs loaded (and fused, when asked) for the block, then unloaded whatever happens: the pipeline after is
    the pipeline before (its modules, weights and flags)."""
    if not loras:
        yield
        return
    flags = _grad_flags(pipe)
    merged = vars(pipe).get("_merged_adapters")  # diffusers' record of fused LoRAs (a class attribute until set)
    merged = None if merged is None else set(merged)
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []
    _OWN[id(pipe)] = {lora.adapter: str(lora.path) for lora in loras}
    try:
        for lora in loras:
            try:
                with warnings.catch_warnings():  # PEFT warns that a second adapter joins the first: meant here
                    warnings.filterwarnings("ignore", message="Already found a `peft_config`")
                    pipe.load_lora_weights(str(lora.path), adapter_name=lora.adapter, use_safetensors=True,
                                           local_files_only=True)
            except Exception as exc:  # noqa: BLE001 - diffusers' or PEFT's refusal, said in one line
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise GhostError(f"--lora {lora.path}: diffusers could not load it: {reason}") from None
        pipe.set_adapters([lora.adapter for lora in loras], adapter_weights=[lora.scale for lora in loras])
        if fuse:
            saved = _saved_state(pipe)
            _fuse(pipe, loras)
        yield
    finally:
        _OWN.pop(id(pipe), None)
        with torch.no_grad():
            if fuse and getattr(pipe, "num_fused_loras", 0):
                with contextlib.suppress(Exception):
                    pipe.unfuse_lora(components=list(getattr(pipe, "_lora_loadable_modules", ())))
            pipe.unload_lora_weights()
            for tensor, copy in saved:  # unfusing subtracts the delta again: not bit for bit the weight it was
                tensor.data.copy_(copy)
        if merged is not None:
            pipe._merged_adapters = merged
        else:
            vars(pipe).pop("_merged_adapters", None)
        for parameter, flag in flags:
            parameter.requires_grad_(flag)


def _fuse(pipe: Any, loras: Sequence[LoraFile]) -> None:
    components = sorted({c for lora in loras for c in lora.components})
    try:
        pipe.fuse_lora(components=components, lora_scale=1.0, safe_fusing=True,
                       adapter_names=[lora.adapter for lora in loras])
    except ValueError as exc:
        if "nan" not in str(exc).lower():
            raise GhostError(f"--fuse-lora: diffusers could not fuse the LoRAs: {' '.join(str(exc).split())}") from None
        names = ", ".join(str(lora.path) for lora in loras)
        raise GhostError(f"--fuse-lora: fusing {names} gives NaN weights (diffusers' safe_fusing refused it): the LoRA "
                         "is broken or its scale too large") from None
