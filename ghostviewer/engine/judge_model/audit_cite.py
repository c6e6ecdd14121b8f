"""A failed weight audit as a run's likely cause: NaN/Inf weights, dead layers and float16-overflow-prone weights
(`ghostviewer audit`'s rules, audit.py) found in the pipeline a run uses are named in its log, and when the run's
first anomaly lies in a traced module that holds such a weight (the weight's own layer or the block around it),
the anomaly gets `likely_cause` — in the run's JSON and its record.

The audit reads every weight once (~0.1 s for the demo's 29 MB, ~2 s a GB on two cores): it is cached per
component module, keyed by the identity of its tensors (each one's storage, shape and in-place version counter),
so it is paid once per load and again only for a component whose weights were replaced or edited in place (a
LoRA loaded, a user's fix).

A caller that has just taken the pipeline's module tree signature (tracer._tree_signature: the identity of every
module object) passes it, and the identity is then checked without walking the tree again: the tensor dicts of the
same modules, kept from the last walk, read in one pass (~0.35 ms a call on the demo's 499 tensors instead of
~1.3 ms). It sees what the walk sees: a tensor edited in place, replaced, added, removed or renamed; a module added,
replaced or removed changes the signature, and the walk is made again.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from ghostviewer.analysis.weight_audit import BAD_KINDS
from ghostviewer.engine.judge_model.audit import audit_weights

Identity = tuple[tuple[int, str, int, tuple[int, ...], int], ...]
_CACHE: weakref.WeakKeyDictionary[nn.Module, tuple[Identity, list[dict[str, Any]]]] = weakref.WeakKeyDictionary()
# Per component, by the tree signature of a pipeline holding it (a component may be shared by a few): every module's
# _parameters and _buffers dicts in walk order, and what their tensors were when last audited or walked.
_STORES: weakref.WeakKeyDictionary[nn.Module, dict[int, tuple[list[dict[str, Any]], list[Any]]]] = (
    weakref.WeakKeyDictionary())
_SIGNATURES = 4  # trees kept per component
WHY = {"nan": "NaN weights", "inf": "infinite weights", "zero": "a dead (all-zero) layer",
       "fp16_range": "weights that overflow in float16"}


def _version(tensor: torch.Tensor) -> int:
    try:
        return int(tensor._version)
    except RuntimeError:  # an inference tensor keeps no version counter
        return -1


def _submodules(module: nn.Module) -> list[nn.Module]:
    """Each module of the tree once, walked through `_modules` directly (not modules()' generators)."""
    out: list[nn.Module] = []
    stack, seen = [module], set()
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        out.append(sub)
        stack.extend(child for child in sub._modules.values() if child is not None)
    return out


def weights_identity(module: nn.Module) -> Identity:
    """What changes when a module's weights do: each tensor's holder, name, storage, shape and in-place version.
    Walked through the modules' own tensor dicts, not named_parameters (which builds every dotted name): this runs
    on every call, and the demo's three components cost 1.5 ms this way instead of 9."""
    out: list[tuple[int, str, int, tuple[int, ...], int]] = []
    append = out.append
    for sub in _submodules(module):
        for store in (sub._parameters, sub._buffers):
            for key, tensor in store.items():
                if tensor is not None:
                    append((id(sub), key, tensor.data_ptr(), tensor.shape, _version(tensor)))
    return tuple(out)


def _tensor_stores(module: nn.Module) -> list[dict[str, Any]]:
    """Every module's _parameters and _buffers dict, in weights_identity's walk order (empty ones too: a tensor
    registered later lands in one of them)."""
    return [store for sub in _submodules(module) for store in (sub._parameters, sub._buffers)]


def _stored_tensors(stores: list[dict[str, Any]]) -> list[Any]:
    """What identifies the tensors in `stores` now: (name, storage, shape, in-place version) each."""
    try:
        return [(key, t.data_ptr(), t.shape, t._version) for store in stores if store
                for key, t in store.items() if t is not None]
    except RuntimeError:  # an inference tensor keeps no version counter
        return [(key, t.data_ptr(), t.shape, _version(t)) for store in stores if store
                for key, t in store.items() if t is not None]


def _unchanged(module: nn.Module, signature: int | None) -> bool:
    """Whether the module's tensors are those it had when last seen, its tree being the same module objects."""
    kept = _STORES.get(module, {}).get(signature) if signature is not None else None
    return kept is not None and _stored_tensors(kept[0]) == kept[1]


def _remember(module: nn.Module, signature: int | None) -> None:
    if signature is not None:
        stores = _tensor_stores(module)
        trees = _STORES.setdefault(module, {})
        if len(trees) >= _SIGNATURES and signature not in trees:
            trees.clear()
        trees[signature] = (stores, _stored_tensors(stores))


def bad_weights(pipe: Any, signature: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The audit's bad-weight findings for the pipeline's components (cached, module doc) and what it cost:
    (findings, {"elapsed_s", "audited": [components read now], "cached": [components from the cache]}).
    `signature`: the pipeline's tracer._tree_signature, when the caller has just taken it."""
    started = time.perf_counter()
    findings: list[dict[str, Any]] = []
    audited: list[str] = []
    cached: list[str] = []
    components = getattr(pipe, "components", None) or {}
    for name, module in components.items():
        if not isinstance(module, nn.Module):
            continue
        hit = _CACHE.get(module)
        if hit is not None and _unchanged(module, signature):
            findings.extend(hit[1])
            cached.append(name)
            continue
        identity = weights_identity(module)
        if hit is not None and hit[0] == identity:
            findings.extend(hit[1])
            cached.append(name)
            _remember(module, signature)
            continue
        report = audit_weights(SimpleNamespace(components={name: module}))
        bad = [f for f in report["findings"] if f["kind"] in BAD_KINDS]
        _CACHE[module] = (identity, bad)
        _remember(module, signature)
        findings.extend(bad)
        audited.append(name)
    return findings, {"elapsed_s": round(time.perf_counter() - started, 4), "audited": audited, "cached": cached}


def _holder(pipe: Any, finding: dict[str, Any]) -> nn.Module | None:
    """The module object that holds a finding's tensor."""
    component = (getattr(pipe, "components", None) or {}).get(finding["component"])
    path = finding["tensor"].rpartition(".")[0]
    try:
        return component.get_submodule(path) if isinstance(component, nn.Module) else None
    except AttributeError:
        return None


def describe(finding: dict[str, Any]) -> str:
    return f"{WHY.get(finding['kind'], finding['kind'])} in {finding['component']}.{finding['tensor']}"


class AuditCitation:
    """The audit of one run's pipeline; `cite` names a finding as the first anomaly's likely cause."""

    def __init__(self, pipe: Any, modules: Sequence[tuple[str, nn.Module]], signature: int | None = None) -> None:
        self.findings, self.cost = bad_weights(pipe, signature)
        self.modules = dict(modules)
        self._holders = [(f, _holder(pipe, f)) for f in self.findings]

    def note(self) -> str | None:
        if not self.findings:
            return None
        more = f" (+{len(self.findings) - 3} more)" if len(self.findings) > 3 else ""
        return (f"weight audit failed: {'; '.join(describe(f) for f in self.findings[:3])}{more} — "
                f"see `ghostviewer audit`")

    def cause_of(self, anomaly: dict[str, Any] | None) -> dict[str, Any] | None:
        """The finding whose tensor lies in the anomaly's module (itself or a block around it), most serious first
        (the audit's order); None when none does."""
        traced = self.modules.get(str((anomaly or {}).get("module")))
        if traced is None:
            return None
        inside = {id(m) for m in traced.modules()}
        for finding, holder in self._holders:
            if holder is not None and id(holder) in inside:
                return {"source": "weight audit", "kind": finding["kind"], "component": finding["component"],
                        "tensor": finding["tensor"], "detail": finding["detail"],
                        "summary": f"{describe(finding)} (weight audit)"}
        return None

    def cite(self, anomaly: dict[str, Any] | None, writer: Any) -> None:
        """Log a failed audit, and set `likely_cause` on the anomaly (in place: the record's and the JSON's)."""
        note = self.note()
        if note is None:
            return
        writer.event("audit", note, level="warning", findings=self.findings[:20], cost=self.cost)
        cause = self.cause_of(anomaly)
        if cause is not None and anomaly is not None:
            anomaly["likely_cause"] = cause
            writer.event("audit", f"likely cause of the first anomaly at {anomaly['module']}: {cause['summary']}",
                         level="warning", likely_cause=cause)
