"""Tensor statistics computed on the tensor's own device, gathered to the host once per step.

`tensor_stats` launches a handful of reductions and returns a 7-vector that stays on the device; the tracer
stacks a step's vectors and moves them in one transfer (one device sync per step matters on a GPU).
Values are over all elements: a tensor with a NaN has NaN min/max/mean/std, as torch itself would show.
"""

from __future__ import annotations

import math

import torch

FP16_MAX = 65504.0
FIELDS = ("min", "max", "mean", "std", "nan_count", "inf_count", "numel")


def first_tensor(value: object) -> torch.Tensor | None:
    """The main tensor of a module output: a tensor, the first tensor of a tuple/list, or `.sample`-like fields."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            if isinstance(item, torch.Tensor):
                return item
        return None
    for name in ("sample", "last_hidden_state", "hidden_states"):
        candidate = getattr(value, name, None)
        if isinstance(candidate, torch.Tensor):
            return candidate
    if hasattr(value, "to_tuple"):
        return first_tensor(value.to_tuple())
    return None


@torch.no_grad()
def tensor_stats(x: torch.Tensor) -> torch.Tensor:
    """(7,) float32 on x's device: min, max, mean, std, NaN count, Inf count, element count."""
    xf = x.detach()
    if not xf.is_floating_point():
        xf = xf.float()
    elif xf.dtype != torch.float32:
        xf = xf.float()
    if xf.numel() == 0:
        return torch.zeros(7, device=x.device)
    lo, hi = torch.aminmax(xf)
    std, mean = torch.std_mean(xf) if xf.numel() > 1 else (torch.zeros((), device=xf.device), xf.mean())
    return torch.stack(
        [
            lo,
            hi,
            mean,
            std,
            torch.isnan(xf).sum().float(),
            torch.isinf(xf).sum().float(),
            torch.tensor(float(xf.numel()), device=xf.device),
        ]
    )


def absmax(lo: float, hi: float) -> float:
    if math.isnan(lo) or math.isnan(hi):
        return math.nan
    return max(abs(lo), abs(hi))
