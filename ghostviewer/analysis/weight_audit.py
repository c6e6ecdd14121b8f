"""Rules of the weight audit (`ghostviewer audit`), on per-tensor summaries: which weights are bad, and how a
tensor's change against a reference is sized and grouped by block. Numbers only; the engine reads the tensors
(engine/judge_model/audit.py).

float16 overflow. A weight beyond float16's largest finite value (65504) becomes inf when the model is cast to
float16. Below that, a layer can still overflow: a linear or convolution output is y_j = Σ_i W_ji x_i, so
|y_j| ≤ Σ_i |W_ji| · max|x| — the largest row L1 norm (over the fan-in: input channels × kernel) times the size of
the activations it multiplies. Inputs of these layers are mostly normalised (GroupNorm, LayerNorm, a softmax'd
attention), so TYPICAL_ACTIVATION = 4 (four standard deviations of a normalised input) stands for max|x|. A tensor
whose row-L1 × 4 exceeds 65504 is flagged `fp16_range` ("a matmul may overflow in float16"). The bound is computed
only where the cheap one, absmax × fan-in × 4, already exceeds the limit (rare in a healthy model), so the audit
stays one pass over the weights. Lookup tables (token and position embeddings) are not multiplied: their bound is
their absmax. A 1-D tensor (a norm's scale, a bias) is held to absmax × 4.

Dead layers: a weight (not a bias: biases start at zero) whose values are all 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

FP16_MAX = 65504.0
TYPICAL_ACTIVATION = 4.0
BAD_KINDS = ("nan", "inf", "fp16_range", "zero")
_LOOKUP = re.compile(r"(^|\.)(\w*_embedding|\w*embeddings|embed_tokens|wte|wpe|shared)\.weight$")
_BLOCK_LISTS = ("resnets", "attentions", "downsamplers", "upsamplers", "transformer_blocks", "motion_modules")


@dataclass(frozen=True)
class TensorSummary:
    """What one pass over a tensor tells: counts of non-finite values, the largest finite magnitude, and (only when
    asked for, see module doc) the largest row L1 norm."""

    component: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    nan_count: int
    inf_count: int
    absmax: float  # over the finite values; 0.0 for an all-zero (or all non-finite) tensor
    row_l1: float | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def fan_in(name: str, shape: tuple[int, ...]) -> int:
    """How many inputs one output of this weight sums: 1 for a lookup table or a 1-D tensor."""
    if len(shape) < 2 or _LOOKUP.search(name):
        return 1
    return math.prod(shape[1:])


def cheap_bound(name: str, shape: tuple[int, ...], absmax: float) -> float:
    """absmax × fan-in × typical activation: an upper bound of the output; above FP16_MAX, compute row L1."""
    return absmax * fan_in(name, shape) * TYPICAL_ACTIVATION


def needs_row_l1(name: str, shape: tuple[int, ...], absmax: float) -> bool:
    return fan_in(name, shape) > 1 and cheap_bound(name, shape, absmax) > FP16_MAX


def is_bias(name: str) -> bool:
    return name.rsplit(".", 1)[-1].endswith("bias")


def bad_weight_findings(summary: TensorSummary) -> list[dict[str, Any]]:
    """The CONTRACT `audit` findings of one tensor (nan, inf, fp16_range, zero), most serious first."""
    out: list[dict[str, Any]] = []

    def add(kind: str, **detail: Any) -> None:
        out.append({"component": summary.component, "tensor": summary.name, "kind": kind,
                    "detail": {"shape": list(summary.shape), "dtype": summary.dtype, **detail}})

    if summary.nan_count:
        add("nan", count=summary.nan_count, numel=summary.numel)
    if summary.inf_count:
        add("inf", count=summary.inf_count, numel=summary.numel)
    if summary.absmax > FP16_MAX:
        add("fp16_range", absmax=summary.absmax, limit=FP16_MAX,
            why="beyond float16's range: cast to float16 it becomes inf")
    else:
        width = fan_in(summary.name, summary.shape)
        rows = summary.row_l1 if width > 1 else summary.absmax
        bound = (rows or 0.0) * TYPICAL_ACTIVATION
        if bound > FP16_MAX:
            add("fp16_range", absmax=summary.absmax, fan_in=width, row_l1=rows, activation=TYPICAL_ACTIVATION,
                bound=bound, limit=FP16_MAX,
                why=f"a matmul may overflow in float16: largest row L1 {rows:.4g} × activation "
                    f"{TYPICAL_ACTIVATION:g} = {bound:.4g} > {FP16_MAX:g}")
    if summary.absmax == 0.0 and not summary.nan_count and not summary.inf_count and summary.numel \
            and not is_bias(summary.name):
        add("zero", numel=summary.numel, why="every value is 0: the layer is dead")
    return out


def block_of(name: str) -> str:
    """The block a tensor belongs to, as the tracer names blocks: 'down_blocks.1.attentions.0' for
    'down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight', 'text_model.encoder.layers.3' for
    its layers' tensors, the module itself ('conv_in', 'time_embedding.linear_1') outside block lists."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.isdigit():
            end = i + 1
            if end + 1 < len(parts) and parts[end] in _BLOCK_LISTS and parts[end + 1].isdigit():
                end += 2
            return ".".join(parts[:end])
    return ".".join(parts[:-1]) or name


def relative_change(diff_norm: float, reference_norm: float) -> float:
    """‖a − b‖ / ‖b‖ (b the reference); inf when the reference is all zero and the tensor is not."""
    if diff_norm == 0.0:
        return 0.0
    return diff_norm / reference_norm if reference_norm > 0 else math.inf


def differs_finding(component: str, name: str, detail: dict[str, Any]) -> dict[str, Any]:
    return {"component": component, "tensor": name, "kind": "differs", "detail": {"block": block_of(name), **detail}}


def group_differences(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`differs` findings grouped by (component, block), in the order first seen: how many tensors changed, the
    largest relative change among those that have one, and why the others have none (missing, reshaped)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for finding in findings:
        if finding["kind"] != "differs":
            continue
        detail = finding["detail"]
        key = (finding["component"], detail["block"])
        group = groups.setdefault(key, {"component": key[0], "block": key[1], "tensors": 0, "max_relative": None,
                                        "reasons": []})
        group["tensors"] += 1
        relative = detail.get("relative")
        if relative is not None:
            group["max_relative"] = max(group["max_relative"] or 0.0, float(relative))
        reason = detail.get("reason")
        if reason and reason not in group["reasons"]:
            group["reasons"].append(reason)
    return list(groups.values())
