"""A failed weight audit as a run's likely cause: NaN/Inf weights, dead layers and float16-overflow-prone weights
(`ghostviewer audit`'s rules, audit.py) found in the pipeline a run uses are named in its log, and when the run's
first anomaly lies in a traced module that holds such a weight (the weight's own layer or the block around it),
the anomaly gets `likely_cause` — in the run's JSON and its record.

The audit reads every weight once (~0.1 s for the demo's 29 MB, ~2 s a GB on two cores): it is cached per
component module, keyed by the identity of its tensors (each one's storage, shape and in-place version counter),
so it is paid once per load and again only for a component whose weights were replaced or edited in place (a
LoRA loaded, a user's fix).
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
WHY = {"nan": "NaN weights", "inf": "infinite weights", "zero": "a dead (all-zero) layer",
       "fp16_range": "weights that overflow in float16"}


def _version(tensor: torch.Tensor) -> int:
    try:
        return int(tensor._version)
    except RuntimeError:  # an inference tensor keeps no version counter
        return -1


def weights_identity(module: nn.Module) -> Identity:
    """What changes when a module's weights do: each tensor's holder, name, storage, shape and in-place version.
    Walked through the modules' own tensor dicts, not named_parameters (which builds every dotted name): this runs
    on every call, and the demo's three components cost 1.5 ms this way instead of 9."""
    out: list[tuple[int, str, int, tuple[int, ...], int]] = []
    stack, seen = [module], set()
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        for store in (sub._parameters, sub._buffers):
            for key, tensor in store.items():
                if tensor is not None:
                    out.append((id(sub), key, tensor.data_ptr(), tensor.shape, _version(tensor)))
        stack.extend(child for child in sub._modules.values() if child is not None)
    return tuple(out)


def bad_weights(pipe: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The audit's bad-weight findings for the pipeline's components (cached, module doc) and what it cost:
    (findings, {"elapsed_s", "audited": [components read now], "cached": [components from the cache]})."""
    started = time.perf_counter()
    findings: list[dict[str, Any]] = []
    audited: list[str] = []
    cached: list[str] = []
    components = getattr(pipe, "components", None) or {}
    for name, module in components.items():
        if not isinstance(module, nn.Module):
            continue
        identity = weights_identity(module)
        hit = _CACHE.get(module)
        if hit is not None and hit[0] == identity:
            findings.extend(hit[1])
            cached.append(name)
            continue
        report = audit_weights(SimpleNamespace(components={name: module}))
        bad = [f for f in report["findings"] if f["kind"] in BAD_KINDS]
        _CACHE[module] = (identity, bad)
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

    def __init__(self, pipe: Any, modules: Sequence[tuple[str, nn.Module]]) -> None:
        self.findings, self.cost = bad_weights(pipe)
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
