"""The weight hashes of a pipeline object handed over in memory: those of the folder it was loaded from, when every
weight it holds is still exactly that folder's.

A pipeline given as an object (`api.run(pipe, …)`, `replay`/`bisect` with `pipeline=`) has no files of its own, so
it had no weight hashes: no baseline matched it and silent faults (a drift) went unchecked — even for the demo or
a folder with a baseline, loaded with `from_pretrained` and patched only with hooks, the very case the object path
is for. diffusers remembers the folder (`name_or_path`); when each weight in memory equals the folder's files
(tensor by tensor, at the dtype it was loaded in), the object holds those weights and takes their hashes. Weights
changed in place (a fused LoRA, a loaded state_dict) or a swapped component leave it without hashes, and the run's
log says why. Reading every weight takes a while on a large model, so the answer is cached per pipeline until one
of its tensors changes (identity, storage or version counter).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from ghostviewer.engine.loading.weight_files import (
    LEGACY_ATTENTION_NAMES,
    SAFE_SUFFIXES,
    component_weight_files,
    hash_files,
)
from ghostviewer.engine.tracing.blocks import pipeline_components

_CACHE: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], dict[str, str], str]] = weakref.WeakKeyDictionary()


def folder_of(pipe: Any) -> Path | None:
    """The diffusers folder the pipeline was loaded from, when it still exists."""
    config = getattr(pipe, "config", None)
    name = getattr(pipe, "name_or_path", None) or (config.get("_name_or_path") if hasattr(config, "get") else None)
    if not name:
        return None
    folder = Path(str(name))
    return folder if (folder / "model_index.json").is_file() else None


def memory_weight_hashes(pipe: Any) -> tuple[dict[str, str], str]:
    """(component -> weight hash as a folder load gives them, a note) or ({}, why there are none)."""
    folder = folder_of(pipe)
    if folder is None:
        return {}, "the pipeline object in memory was not loaded from a diffusers folder (no weight hashes)"
    signature = _signature(pipe)
    cached = _CACHE.get(pipe)
    if cached is not None and cached[0] == signature:
        return dict(cached[1]), cached[2]
    try:
        hashes, note = _compare(pipe, folder)
    except Exception as exc:  # noqa: BLE001 - whatever the weights are (offloaded, odd): no identity, said why
        hashes, note = {}, f"the pipeline object's weights cannot be compared with {folder}: {exc}"
    if all(entry[-1] >= 0 for entry in signature[:-2]):  # an inference tensor has no version counter to trust
        try:
            _CACHE[pipe] = (signature, hashes, note)
        except TypeError:  # not weak-referenceable: no cache
            pass
    return dict(hashes), note


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return -1


_SAMPLES = 32  # values read from each tensor for the cache's signature


# dtypes numpy reads without a copy: a CPU tensor's sample is then taken by numpy (~3x cheaper than a torch slice)
_NUMPY_DTYPES = frozenset((torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16,
                           torch.int8, torch.uint8, torch.bool))
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a subclass (quantised, distributed) numpy may not read


def _state_tensors(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of what `state_dict(keep_vars=True)` holds (parameters and persistent buffers), walked without
    building the dict: names are each module's own, the walk's order fixed."""
    stack = [module]
    while stack:
        current = stack.pop()
        skip = current._non_persistent_buffers_set
        for name, tensor in current._parameters.items():
            if tensor is not None:
                yield name, tensor
        for name, tensor in current._buffers.items():
            if tensor is not None and name not in skip:
                yield name, tensor
        if current._modules:
            stack.extend(child for child in reversed(current._modules.values()) if child is not None)


@torch.no_grad()
def _signature(pipe: Any) -> tuple[Any, ...]:
    """Each tensor's identity, storage and version counter, and a strided sample of its values: an edit through
    `.data` (a LoRA merged in place) leaves the version counter alone but changes the sampled values (an edit of a
    few scattered elements can still go unseen until the pipeline is loaded again)."""
    entries: list[tuple[Any, ...]] = []
    on_cpu: list[np.ndarray] = []
    samples: dict[torch.device, list[torch.Tensor]] = {}
    for component, module in pipeline_components(pipe).items():
        for key, tensor in _state_tensors(module):
            entries.append((component, key, id(tensor), tensor.data_ptr(), _version(tensor)))
            count = tensor.numel()
            if not count or tensor.is_meta or tensor.is_complex():
                continue
            stride = max(1, count // _SAMPLES)
            if type(tensor) in _PLAIN and tensor.device.type == "cpu" and tensor.dtype in _NUMPY_DTYPES:
                on_cpu.append(tensor.detach().numpy().reshape(-1)[::stride].astype(np.float32))
            else:
                flat = tensor.detach().reshape(-1)
                samples.setdefault(flat.device, []).append(flat[::stride].float())
    values = tuple(torch.cat(parts).cpu().numpy().tobytes() for parts in samples.values())  # one copy a device
    return (*entries, np.concatenate(on_cpu).tobytes() if on_cpu else b"", values)


def _compare(pipe: Any, folder: Path) -> tuple[dict[str, str], str]:
    hashes: dict[str, str] = {}
    for name, module in pipeline_components(pipe).items():
        try:
            files = [f for f in component_weight_files(folder, name, allow_pickle=False) if f.suffix in SAFE_SUFFIXES]
        except Exception as exc:  # noqa: BLE001 - a missing component, pickle-only weights: no identity, said why
            return {}, f"the pipeline object's {name} cannot be matched to {folder}: {exc}"
        if not files:
            return {}, f"{folder} holds no safetensors weights for the pipeline object's {name}"
        if any(t.is_meta for t in module.state_dict().values()):
            return {}, f"the pipeline object's {name} is offloaded (weights on the meta device): not compared"
        differs = _differs(module, _loaded_files(files))
        if differs:
            return {}, f"the pipeline object's weights are not {folder}'s: {name} {differs}"
        hashes[name] = hash_files(files)
    return hashes, f"the pipeline object holds the weights of {folder}"


def _loaded_files(files: list[Path]) -> list[Path]:
    """The files a plain load reads: without a variant infix (`model.fp16.safetensors`) when there are such; the
    hash covers every file, as a folder load's does."""
    plain = [f for f in files if len(f.name.split(".")) == 2]
    return plain or files


def _lookup(state: dict[str, torch.Tensor], key: str, prefix: str) -> torch.Tensor | None:
    """The model's tensor for a file key, after the renames loaders make (a base-model prefix, pre-0.14 attention
    names: weight_files._weight_key_mismatch makes the same ones)."""
    candidates = [key, f"{prefix}.{key}" if prefix else key, key.removeprefix(f"{prefix}.") if prefix else key]
    candidates += [c.replace(old, new) for c in list(candidates) for old, new in LEGACY_ATTENTION_NAMES.items()
                   if old in c]
    return next((state[c] for c in candidates if c in state), None)


@torch.no_grad()
def _differs(module: torch.nn.Module, files: list[Path]) -> str | None:
    """None when every parameter of `module` equals its value in `files`; otherwise what differs."""
    state = module.state_dict()
    prefix = getattr(module, "base_model_prefix", "")
    compared: set[int] = set()  # storages compared (tied weights share one)
    try:
        for path in files:
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                    target = _lookup(state, key, prefix)
                    if target is None:
                        continue
                    stored = handle.get_tensor(key).to(device=target.device, dtype=target.dtype)
                    if stored.shape != target.shape or not torch.equal(stored, target):
                        return f"differs from {path.name} at {key}"
                    compared.add(target.data_ptr())
    except (SafetensorError, OSError) as exc:
        return f"cannot be read from {files[0].parent}: {exc}"
    for key, parameter in module.named_parameters():
        if parameter.numel() and parameter.data_ptr() not in compared:
            return f"has a weight its files do not hold ({key})"
    return None
