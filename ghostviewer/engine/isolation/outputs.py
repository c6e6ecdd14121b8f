"""Statistics of a module output, JSON-safe: min/max/mean/std over the finite values, NaN and Inf counted."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ghostviewer.engine.families import ADAPTERS, FamilyAdapter


def stream_adapter(module: nn.Module | None) -> FamilyAdapter | None:
    """The family adapter that knows `module` as a dual-stream block (SD3, Flux), else None."""
    if module is None:
        return None
    return next((adapter for adapter in ADAPTERS if adapter.is_dual_stream(module)), None)


def output_stats(tensor: torch.Tensor | None) -> dict[str, Any]:
    if tensor is None:
        return {"shape": None, "dtype": None, "min": None, "max": None, "mean": None, "std": None,
                "nan": 0, "inf": 0, "numel": 0}
    x = tensor.detach().float().reshape(-1).cpu()
    finite = x[torch.isfinite(x)]
    count = int(finite.numel())
    return {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "min": float(finite.min()) if count else None,
        "max": float(finite.max()) if count else None,
        "mean": float(finite.mean()) if count else None,
        "std": float(finite.std()) if count > 1 else (0.0 if count else None),
        "nan": int(torch.isnan(x).sum()),
        "inf": int(torch.isinf(x).sum()),
        "numel": int(x.numel()),
    }


def broken_by(stats: dict[str, Any], judge_collapse: bool = True) -> str | None:
    """'nan', 'inf' or 'collapse' (every value the same, std 0), else None."""
    if stats["nan"]:
        return "nan"
    if stats["inf"]:
        return "inf"
    if judge_collapse and stats["numel"] > 1 and stats["std"] == 0.0:
        return "collapse"
    return None
