"""A watched call recorded exactly, so it can be re-issued: its keywords as JSON (tensors and arrays into the record's
safetensors, images as PNG), its generators and their states as the call found them, and the pipeline's state around
it (scheduler, adapters, attention processors, accelerate hooks, the user's own hooks, compiled components,
the calling thread).

What cannot be recorded (an opaque callable, an object of unknown kind) is named in `unrecorded`, never dropped.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from ghostviewer.engine.tracing.blocks import pipeline_components
from ghostviewer.engine.tracing.tracer import _tree_signature
from ghostviewer.engine.watch.user_hooks import user_hooks

CALL_TENSORS = "call_inputs"  # the record's safetensors entry holding the call's tensors, arrays, generator states
KEY_LIMIT = 64  # characters of a keyword path in a file name


@dataclass
class CallRecord:
    """The JSON of a call (`json`), and the tensors and images it refers to (saved into the record)."""

    json: dict[str, Any]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)
    generators: list[torch.Generator] = field(default_factory=list)

    @property
    def unrecorded(self) -> list[str]:
        return self.json["unrecorded"]


def call_kind(pipe: Any, arguments: dict[str, Any]) -> str:
    """text2img | img2img | inpaint | controlnet (spec CALL_KINDS): from the pipeline class, then from its inputs."""
    name = type(pipe).__name__
    for word, kind in (("ControlNet", "controlnet"), ("Inpaint", "inpaint"), ("Img2Img", "img2img"),
                       ("Image2Image", "img2img")):
        if word in name:
            return kind
    if arguments.get("mask_image") is not None:
        return "inpaint"
    if arguments.get("image") is not None:
        return "img2img"
    return "text2img"


class _Encoder:
    def __init__(self, record: CallRecord) -> None:
        self.record = record

    def _key(self, name: str) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:KEY_LIMIT]

    def encode(self, value: Any, name: str) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$float": repr(value)}
        if isinstance(value, torch.Generator):
            return {"$generator": self._generator(value)}
        if isinstance(value, torch.Tensor):
            key = self._key(name)
            host = value.detach().to("cpu", copy=True)
            stored = host.float() if host.dtype in (torch.bfloat16,) or not _numpy_dtype(host) else host
            self.record.tensors[key] = stored.numpy()
            return {"$tensor": key, "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                    "device": str(value.device)}
        if isinstance(value, np.ndarray):
            key = self._key(name)
            self.record.tensors[key] = np.array(value, copy=True)
            return {"$array": key, "shape": list(value.shape), "dtype": str(value.dtype)}
        if isinstance(value, Image.Image):
            key = "call_" + self._key(name).replace(".", "_")
            image = value if value.mode in ("L", "RGB", "RGBA") else value.convert("RGBA")
            self.record.images[key] = np.asarray(image).copy()
            return {"$image": f"images/{key}.png", "size": list(value.size), "mode": value.mode}
        if isinstance(value, (list, tuple)):
            return [self.encode(item, f"{name}.{i}") for i, item in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self.encode(v, f"{name}.{k}") for k, v in value.items()}
        self.record.unrecorded.append(name)
        kind = getattr(value, "__qualname__", None) or type(value).__qualname__
        return {"$unrecorded": f"{'callable' if callable(value) else 'object'} {kind}"}

    def _generator(self, generator: torch.Generator) -> int:
        """Its position in the call's generator list; its seed and state (as the call found it) are kept."""
        generators = self.record.generators
        for index, known in enumerate(generators):
            if known is generator:
                return index
        index = len(generators)
        generators.append(generator)
        state_key = f"generator_{index}_state"
        self.record.tensors[state_key] = generator.get_state().numpy().copy()
        self.record.json["generators"].append({"device": str(generator.device), "seed": int(generator.initial_seed()),
                                               "state": state_key})
        return index


def _numpy_dtype(tensor: torch.Tensor) -> bool:
    try:
        tensor[:0].numpy()
    except (TypeError, RuntimeError):
        return False
    return True


def describe_call(pipe: Any, arguments: dict[str, Any], thread: threading.Thread | None = None,
                  signature: int | None = None, hooked: bool | None = None) -> CallRecord:
    """The call as made: `arguments`, the keywords the caller passed (positional ones named by the signature).
    `signature`: the pipeline's module tree (tracer._tree_signature), when the caller has just taken it; `hooked`:
    whether that walk saw any hook (blocks.tree_walk; None: look)."""
    thread = thread or threading.current_thread()
    record = CallRecord(json={
        "pipeline_class": f"{type(pipe).__module__}.{type(pipe).__qualname__}",
        "kind": call_kind(pipe, arguments),
        "kwargs": {},
        "unrecorded": [],
        "generators": [],
    })
    encoder = _Encoder(record)
    record.json["kwargs"] = {name: encoder.encode(value, name) for name, value in arguments.items()}
    record.json.update(pipeline_state(pipe, signature, hooked))
    record.json["thread"] = {"name": thread.name, "ident": thread.ident, "main": thread is threading.main_thread()}
    return record


def pipeline_state(pipe: Any, signature: int | None = None, hooked: bool | None = None) -> dict[str, Any]:
    """What the pipeline was set up with around the call: scheduler, adapters, processors, hooks, compilation."""
    scheduler = getattr(pipe, "scheduler", None)
    components = pipeline_components(pipe)
    state: dict[str, Any] = {
        "scheduler": None if scheduler is None else {
            "class": type(scheduler).__name__, "config": _plain(dict(getattr(scheduler, "config", {}) or {}))},
        "adapters": _adapters(pipe, components),
        "attention_processors": _processors(pipe, components, signature),
        "hooks": _accelerate_hooks(pipe, components),
        "compiled": sorted(name for name, module in components.items() if _compiled(module)),
        "user_hooks": [] if hooked is False else user_hooks(components),  # the user's code: a folder's lacks it
    }
    return state


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def _adapters(pipe: Any, components: dict[str, Any]) -> dict[str, Any]:
    """PEFT adapters per component: names, the active ones, scales where the layers say, fused or not."""
    found: dict[str, Any] = {}
    for name, module in components.items():
        config = getattr(module, "peft_config", None)
        if not isinstance(config, dict) or not config:
            continue
        scales: dict[str, float] = {}
        fused = False
        for sub in module.modules():
            scaling = getattr(sub, "scaling", None)
            if isinstance(scaling, dict):
                for adapter, scale in scaling.items():
                    scales.setdefault(str(adapter), float(scale))
            fused = fused or bool(getattr(sub, "merged_adapters", None))
        active = getattr(module, "active_adapters", None)
        active = active() if callable(active) else active
        found[name] = {"names": sorted(map(str, config)), "active": list(map(str, active or [])), "scales": scales,
                       "fused": fused}
    fused_loras = getattr(pipe, "num_fused_loras", 0)
    if fused_loras:
        found["fused_loras"] = int(fused_loras)
    return found


_ATTENTION: weakref.WeakKeyDictionary[Any, tuple[int, list[tuple[str, str, Any]]]] = weakref.WeakKeyDictionary()


def _attention_modules(pipe: Any, components: dict[str, Any], signature: int | None = None
                       ) -> list[tuple[str, str, Any]]:
    """(component, path, module) of every module holding an attention processor, cached per pipeline while its
    module tree is the same objects (`attn_processors` walks the whole tree: ~3 ms a call on the demo)."""
    signature = _tree_signature(pipe) if signature is None else signature
    try:
        cached = _ATTENTION.get(pipe)
    except TypeError:
        cached = None
    if cached is not None and cached[0] == signature:
        return cached[1]
    found = [(name, path, module) for name, component in components.items()
             for path, module in component.named_modules() if hasattr(module, "processor")]
    with contextlib.suppress(TypeError):
        _ATTENTION[pipe] = (signature, found)
    return found


def _processors(pipe: Any, components: dict[str, Any], signature: int | None = None
                ) -> dict[str, dict[str, list[str]]]:
    """{component: {processor class: [module paths]}}: which attention processor runs where."""
    out: dict[str, dict[str, list[str]]] = {}
    for name, path, module in _attention_modules(pipe, components, signature):
        out.setdefault(name, {}).setdefault(type(module.processor).__name__, []).append(path)
    return out


def _accelerate_hooks(pipe: Any, components: dict[str, Any]) -> dict[str, Any]:
    hooks = {name: type(module._hf_hook).__name__ for name, module in components.items()
             if getattr(module, "_hf_hook", None) is not None}
    device_map = getattr(pipe, "hf_device_map", None)
    out: dict[str, Any] = {"components": hooks}
    if device_map:
        out["device_map"] = _plain(device_map)
    return out


def _compiled(module: Any) -> bool:
    return hasattr(module, "_orig_mod") or type(module).__name__ == "OptimizedModule"
