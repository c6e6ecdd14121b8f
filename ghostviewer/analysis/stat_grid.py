"""The numbers behind the stats heat map and the one-line tensor summaries: numpy only, no Qt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ghostviewer.record import StatRow

HEATMAP_STATS = ("absmax", "std", "nan_count", "fp16_headroom")
LOG_STATS = {"absmax", "std", "fp16_headroom"}  # spans decades: shown as log10


@dataclass(frozen=True)
class StatGrid:
    modules: list[str]  # rows, in execution order
    steps: list[int]  # columns
    bad: np.ndarray  # (modules, steps) bool: NaN or Inf in that output
    rows: dict[tuple[int, int], StatRow]  # (row, column) → the call-0 stat row

    def cell(self, module: str, step: int) -> tuple[int, int] | None:
        if module in self.modules and step in self.steps:
            return self.modules.index(module), self.steps.index(step)
        return None


def stat_value(row: StatRow, stat: str) -> float:
    return float(row.fp16_headroom if stat == "fp16_headroom" else getattr(row, stat))


def stat_grid(rows: Sequence[StatRow]) -> StatGrid:
    """Call-0 denoise rows → a module × step grid (rows in execution order)."""
    first = [r for r in rows if r.call == 0 and r.step is not None]
    modules = list(dict.fromkeys(r.module for r in first))
    steps = sorted({int(r.step) for r in first})  # type: ignore[arg-type]
    row_of = {m: i for i, m in enumerate(modules)}
    col_of = {s: j for j, s in enumerate(steps)}
    bad = np.zeros((len(modules), len(steps)), bool)
    cells: dict[tuple[int, int], StatRow] = {}
    for r in first:
        i, j = row_of[r.module], col_of[int(r.step)]  # type: ignore[arg-type]
        bad[i, j] = bool(r.nan_count or r.inf_count)
        cells[(i, j)] = r
    return StatGrid(modules, steps, bad, cells)


def grid_values(grid: StatGrid, stat: str) -> np.ndarray:
    """(modules, steps) float64 of one statistic, NaN where nothing was recorded."""
    values = np.full(grid.bad.shape, np.nan)
    for (i, j), row in grid.rows.items():
        values[i, j] = stat_value(row, stat)
    return values


def display_values(values: np.ndarray, stat: str, log: bool) -> np.ndarray:
    """What gets coloured: log10 for the statistics that span decades (when asked), NaN kept as NaN."""
    if not (log and stat in LOG_STATS):
        return values.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(np.where(values > 0, values, np.nan))


def fmt(value: float) -> str:
    if not np.isfinite(value):
        return str(value)
    return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.2e}"


def summary_line(shape: Sequence[int], dtype: str, lo: float, hi: float, mean: float, std: float,
                 nan: int = 0, inf: int = 0) -> str:
    """lovely-tensors style: `tensor[2,96,8,8] f16 x∈[-3.1, 4.2] μ=0.01 σ=0.9 NaN!`."""
    dims = ",".join(str(int(d)) for d in shape)
    flags = (" NaN!" if nan else "") + (" Inf!" if inf else "")
    return f"tensor[{dims}] {dtype} x∈[{fmt(lo)}, {fmt(hi)}] μ={fmt(mean)} σ={fmt(std)}{flags}"


def row_summary(row: StatRow) -> str:
    return summary_line(row.shape, row.dtype, row.min, row.max, row.mean, row.std, row.nan_count, row.inf_count)


def array_summary(a: np.ndarray) -> str:
    x = np.asarray(a, np.float64)
    finite = x[np.isfinite(x)]
    lo, hi, mean, std = ((float(finite.min()), float(finite.max()), float(finite.mean()), float(finite.std()))
                         if finite.size else (np.nan,) * 4)
    return summary_line(a.shape, str(a.dtype), lo, hi, mean, std, int(np.isnan(x).sum()), int(np.isinf(x).sum()))


MISSING_RGBA = (48, 48, 48, 255)
BAD_RGBA = (230, 30, 30, 255)  # NaN or Inf in that output: red


def grid_rgba(shown: np.ndarray, bad: np.ndarray, lut: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """Colour a (rows, cols) grid with a (N, 3) uint8 lut on its finite range; NaN grey, bad cells red.
    Returns the RGBA image and the (low, high) levels used."""
    finite = shown[np.isfinite(shown)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0
    index = np.clip((np.nan_to_num(shown, nan=lo, posinf=hi, neginf=lo) - lo) / span, 0, 1) * (len(lut) - 1)
    out = np.empty(shown.shape + (4,), np.uint8)
    out[..., :3] = lut[index.round().astype(np.intp)][..., :3]
    out[..., 3] = 255
    out[~np.isfinite(shown)] = MISSING_RGBA
    out[bad] = BAD_RGBA
    return out, (lo, hi)
