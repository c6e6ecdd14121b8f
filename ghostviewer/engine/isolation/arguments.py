"""A module call's arguments on disk without pickle: tensors in safetensors, everything else in JSON.

Positional arguments are named by the module's `forward` signature where they can be, so a call is saved as
keyword arguments (`hidden_states`, `encoder_hidden_states`, …); what cannot be named stays positional.
JSON values: None, bools, ints, floats (non-finite ones as {"float": "nan"}), strings; {"tensor": key};
{"tuple": […]}, {"list": […]}, {"dict": {…}}; {"unsupported": "TypeName"} for anything else, passed as None.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class EncodedCall:
    spec: dict[str, Any]  # {"args": [...], "kwargs": {...}, "unsupported": [...]}
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


def name_arguments(forward: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """(remaining positional, keyword) with every positional argument the signature names moved to keywords."""
    try:
        signature = inspect.signature(forward)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return tuple(args), dict(kwargs)
    positional: list[Any] = []
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append(value)
        else:
            named[name] = value
    return tuple(positional), named


def encode_call(args: tuple, kwargs: dict) -> EncodedCall:
    call = EncodedCall({"args": [], "kwargs": {}, "unsupported": []})
    call.spec["args"] = [_encode(v, f"args.{i}", call) for i, v in enumerate(args)]
    call.spec["kwargs"] = {k: _encode(v, k, call) for k, v in kwargs.items()}
    return call


def _encode(value: Any, key: str, call: EncodedCall) -> Any:
    if isinstance(value, torch.Tensor):
        call.tensors[key] = value.detach().contiguous()
        return {"tensor": key}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": str(value)}
    if isinstance(value, (tuple, list)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [_encode(v, f"{key}.{i}", call) for i, v in enumerate(value)]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v, f"{key}.{k}", call) for k, v in value.items()}}
    call.spec["unsupported"].append(f"{key} ({type(value).__name__})")
    return {"unsupported": type(value).__name__}


def decode_value(spec: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """inputs.json values: plain JSON, or {"tensor": key}, {"float": "nan"}, {"tuple": [...]}, {"list": [...]},
    {"dict": {...}}; an argument GhostViewer could not save ({"unsupported": …}) is passed as None.

    repro.py carries this function's own source (repro_text.py), so its body uses nothing but built-ins.
    """
    if not isinstance(spec, dict):
        return spec
    if "tensor" in spec:
        return tensors[spec["tensor"]]
    if "float" in spec:
        return float(spec["float"])
    if "tuple" in spec:
        return tuple(decode_value(v, tensors) for v in spec["tuple"])
    if "list" in spec:
        return [decode_value(v, tensors) for v in spec["list"]]
    if "dict" in spec:
        return {k: decode_value(v, tensors) for k, v in spec["dict"].items()}
    return None


def decode_call(spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> tuple[tuple, dict]:
    args = tuple(decode_value(v, tensors) for v in spec.get("args", []))
    return args, {k: decode_value(v, tensors) for k, v in spec.get("kwargs", {}).items()}


def describe(spec: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """{name: {"shape", "dtype"} for a tensor, the value otherwise} — for reports."""
    def one(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if "tensor" in value:
            t = tensors[value["tensor"]]
            return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
        if "float" in value:
            return value["float"]
        for kind in ("tuple", "list"):
            if kind in value:
                return [one(v) for v in value[kind]]
        if "dict" in value:
            return {k: one(v) for k, v in value["dict"].items()}
        return f"unsupported: {value.get('unsupported')}"

    out = {f"args.{i}": one(v) for i, v in enumerate(spec.get("args", []))}
    out.update({k: one(v) for k, v in spec.get("kwargs", {}).items()})
    return out
