"""The weight audit before anything runs (`ghostviewer audit`): NaN/Inf weights, weights beyond float16's range or
close enough that a matmul overflows in float16, dead (all-zero) layers, and — against a reference — every tensor
that differs, with the relative size of the change, grouped by block. The rules are analysis/weight_audit.py's.

Weights are read from the safetensors files themselves where the source is on disk (safe_open, one tensor at a
time; pickle files are never opened: such a component is listed as skipped), or from the components' state dicts
for a pipeline in memory. One pass per tensor (torch.aminmax, NaN propagating), a second only for the rare tensor
that needs it (a NaN count, a row L1 norm, a difference).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ghostviewer.analysis.weight_audit import (
    BAD_KINDS,
    FP16_MAX,
    TYPICAL_ACTIVATION,
    TensorSummary,
    bad_weight_findings,
    differs_finding,
    group_differences,
    needs_row_l1,
    relative_change,
)
from ghostviewer.engine.errors import SourceError
from ghostviewer.engine.loading.pipelines import classify_source, read_model_index

# Single-file checkpoints: key prefix -> the diffusers component it holds (the rest keep the name "checkpoint").
SINGLE_FILE_COMPONENTS = {"model.diffusion_model.": "unet", "first_stage_model.": "vae",
                          "cond_stage_model.": "text_encoder", "conditioner.embedders.": "text_encoder"}
Getter = Callable[[], torch.Tensor]


@dataclass
class WeightSet:
    """A model's tensors by component and name, each read only when asked for."""

    label: str
    tensors: dict[str, dict[str, Getter]] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def add(self, component: str, name: str, getter: Getter) -> None:
        self.tensors.setdefault(component, {})[name] = getter


def _handle_getter(handle: Any, key: str) -> Getter:
    return lambda: handle.get_tensor(key)


def _safetensors_files(folder: Path) -> list[Path]:
    """A component's safetensors files; where a variant (`x.fp16.safetensors`) lies beside the plain file, the plain
    one (what diffusers loads without `variant=`)."""
    files = sorted(folder.glob("*.safetensors"))
    plain = [f for f in files if len(f.name.split(".")) == 2]
    return plain or files


def open_weights(source: Any, stack: ExitStack) -> WeightSet:
    """The weights of `source` ('demo', a folder, a .safetensors file, a cached hub id, a pipeline object or a
    LoadedPipeline); file handles stay open until `stack` closes."""
    if not isinstance(source, (str, Path)):
        return _memory_weights(source)
    kind, location = classify_source(source)
    weights = WeightSet(label=str(source))
    if kind == "single_file":
        if location.suffix != ".safetensors":
            raise SourceError(f"{location} is not a .safetensors file: the audit reads no pickle formats")
        handle = stack.enter_context(safe_open(str(location), framework="pt"))
        for key in handle.keys():  # noqa: SIM118 - a safe_open handle is not a dict
            prefix = next((p for p in SINGLE_FILE_COMPONENTS if key.startswith(p)), "")
            component = SINGLE_FILE_COMPONENTS.get(prefix, "checkpoint")
            weights.add(component, key[len(prefix):], _handle_getter(handle, key))
        return weights
    for name in read_model_index(location):
        folder = location / name
        if not (folder / "config.json").is_file():
            continue  # schedulers, tokenizers: no weights
        files = _safetensors_files(folder)
        if not files:
            pickles = [p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt")]
            weights.skipped.append({"component": name, "reason": f"only pickle weights ({', '.join(pickles)}): "
                                    "not opened" if pickles else "no weight files"})
            continue
        for path in files:
            try:
                handle = stack.enter_context(safe_open(str(path), framework="pt"))
            except Exception as exc:  # noqa: BLE001 - safetensors' own error types; one line, naming the file
                raise SourceError(f"{path} is not a valid safetensors file (truncated or corrupt?): {exc}") from exc
            for key in handle.keys():  # noqa: SIM118
                weights.add(name, key, _handle_getter(handle, key))
    return weights


def _memory_weights(source: Any) -> WeightSet:
    pipe = getattr(source, "pipe", source)  # a LoadedPipeline or the pipeline itself
    components = getattr(pipe, "components", None)
    if not isinstance(components, dict):
        raise SourceError(f"cannot audit {type(source).__name__}: expected a pipeline source or a DiffusionPipeline")
    weights = WeightSet(label=f"<in-memory {type(pipe).__name__}>")
    for name, module in components.items():
        if isinstance(module, torch.nn.Module):
            for key, tensor in module.state_dict().items():
                weights.add(name, key, lambda t=tensor: t)
    return weights


def summarise(component: str, name: str, tensor: torch.Tensor) -> TensorSummary | None:
    """One pass (aminmax; a NaN or inf makes it non-finite and only then are they counted); None for tensors
    that hold no weights (integer buffers such as position ids, empty tensors)."""
    if not tensor.is_floating_point() or tensor.numel() == 0 or tensor.device.type == "meta":
        return None
    t = tensor.detach()
    try:
        lo, hi = (float(v) for v in torch.aminmax(t))
    except RuntimeError:  # a dtype aminmax lacks (float8)
        t = t.float()
        lo, hi = (float(v) for v in torch.aminmax(t))
    nan = inf = 0
    if math.isfinite(lo) and math.isfinite(hi):
        absmax = max(-lo, hi)
    else:
        nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
        finite = t[torch.isfinite(t)]
        absmax = float(finite.abs().max()) if finite.numel() else 0.0
    shape = tuple(t.shape)
    row_l1 = None
    if needs_row_l1(name, shape, absmax):
        clean = torch.nan_to_num(t.float(), nan=0.0, posinf=0.0, neginf=0.0)
        row_l1 = float(clean.abs().flatten(1).sum(1).max())
    return TensorSummary(component, name, shape, str(t.dtype).removeprefix("torch."), nan, inf, absmax, row_l1)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _words(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as the widest integers that tile them (torch.equal on int64 is ~10x faster than on
    float16)."""
    flat = t.detach().contiguous().view(-1)
    size = flat.numel() * flat.element_size()
    for dtype, width in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if size % width == 0 and flat.element_size() <= width:
            return flat.view(torch.uint8).view(dtype)
    return flat.view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_words(a), _words(b))


def difference(tensor: torch.Tensor, reference: torch.Tensor) -> dict[str, Any] | None:
    """None when the two hold the same values; else {relative (‖a−b‖/‖b‖), max_abs, …} or the reason there is none."""
    if tuple(tensor.shape) != tuple(reference.shape):
        return {"reason": "shape differs", "shape": list(tensor.shape), "reference_shape": list(reference.shape),
                "relative": None}
    if tensor.dtype == reference.dtype and same_bits(tensor, reference.to(tensor.device)):
        return None
    a, b = tensor.detach().float(), reference.detach().to(tensor.device).float()
    delta = a - b
    diff_norm, ref_norm = float(delta.norm()), float(b.norm())
    if diff_norm == 0.0:  # equal values in other bits or another dtype (-0.0, a lossless cast)
        return None
    detail: dict[str, Any] = {"relative": _finite(relative_change(diff_norm, ref_norm)),
                              "max_abs": _finite(float(delta.abs().max()))}
    if detail["relative"] is None:
        detail["reason"] = "non-finite values" if not math.isfinite(diff_norm) else "the reference is all zero"
    if tensor.dtype != reference.dtype:
        detail["dtypes"] = [str(tensor.dtype).removeprefix("torch."), str(reference.dtype).removeprefix("torch.")]
    return detail


def _walk(weights: WeightSet) -> Iterator[tuple[str, str, torch.Tensor]]:
    for component, tensors in weights.tensors.items():
        for name, get in tensors.items():
            yield component, name, get()


def audit_weights(source: Any, reference: Any = None) -> dict[str, Any]:
    """CONTRACT's `audit` dict: {"ok", "findings", ...}. `ok` is False when a weight is bad (nan, inf, fp16_range,
    zero); differences from the reference are findings too but do not make a weight bad — `same_as_reference`
    says whether there are any (None without a reference)."""
    started = time.perf_counter()
    threads = torch.get_num_threads()
    # Memory-bound: a second thread gains nothing, and where the other core is busy its wait costs ~10x per tensor.
    torch.set_num_threads(1)
    try:
        result = _audit(source, reference)
    finally:
        torch.set_num_threads(threads)
    result["elapsed_s"] = round(time.perf_counter() - started, 4)
    return result


def _audit(source: Any, reference: Any) -> dict[str, Any]:
    with ExitStack() as stack:
        weights = open_weights(source, stack)
        ref = open_weights(reference, stack) if reference is not None else None
        findings: list[dict[str, Any]] = []
        counts: dict[str, dict[str, int]] = {}
        for component, name, tensor in _walk(weights):
            count = counts.setdefault(component, {"tensors": 0, "parameters": 0, "bytes": 0})
            count["tensors"] += 1
            count["parameters"] += tensor.numel()
            count["bytes"] += tensor.numel() * tensor.element_size()
            summary = summarise(component, name, tensor)
            if summary is not None:
                findings.extend(bad_weight_findings(summary))
            if ref is not None:
                get = ref.tensors.get(component, {}).get(name)
                if get is None:
                    findings.append(differs_finding(component, name, {"reason": "not in the reference",
                                                                      "relative": None}))
                elif (detail := difference(tensor, get())) is not None:
                    findings.append(differs_finding(component, name, detail))
            del tensor
        if ref is not None:
            for component, tensors in ref.tensors.items():
                mine = weights.tensors.get(component, {})
                findings.extend(differs_finding(component, name, {"reason": "only in the reference",
                                                                  "relative": None})
                                for name in tensors if name not in mine)
    bad = [f for f in findings if f["kind"] in BAD_KINDS]
    differs = [f for f in findings if f["kind"] == "differs"]
    total_bytes = sum(c["bytes"] for c in counts.values())
    return {
        "ok": not bad,
        "findings": findings,
        "source": weights.label,
        "reference": None if ref is None else ref.label,
        "same_as_reference": None if ref is None else not differs,
        "bad": len(bad),
        "differs": len(differs),
        "blocks": group_differences(differs),
        "components": counts,
        "skipped": weights.skipped + ([] if ref is None else [{**s, "in": "reference"} for s in ref.skipped]),
        "rules": {"fp16_max": FP16_MAX, "typical_activation": TYPICAL_ACTIVATION,
                  "matmul_bound": "largest row L1 norm x typical activation > fp16_max"},
        "bytes": total_bytes,
    }
