"""The numbers behind the stats heat map and the one-line tensor summaries: numpy only, no Qt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ghostviewer.record import StatRow
from ghostviewer.record.types import PHASE_ORDER

HEATMAP_STATS = ("absmax", "std", "nan_count", "fp16_headroom")
LOG_STATS = {"absmax", "std", "fp16_headroom"}  # spans decades: shown as log10
Column = tuple[str, int | None]  # (phase, step): ("encode", None), ("denoise", 3), ("decode", None)
PHASE_LABELS = {"encode": "enc", "decode": "dec"}


@dataclass(frozen=True)
class StatGrid:
    """Modules (rows, execution order) × columns: an `encode` column when text encoders were traced, one column
    per denoising step, a `decode` column when the VAE was traced. A module fills only its phase's columns."""

    modules: list[str]  # rows, in execution order
    columns: list[Column]
    bad: np.ndarray  # (modules, columns) bool: NaN or Inf in that output
    rows: dict[tuple[int, int], StatRow]  # (row, column) → the stat row shown (a bad call first, else call 0)

    @property
    def steps(self) -> list[int]:
        """The denoising steps, in column order."""
        return [int(step) for phase, step in self.columns if phase == "denoise" and step is not None]

    def column(self, phase: str, step: int | None) -> int | None:
        key: Column = (phase, None if phase != "denoise" or step is None else int(step))
        return self.columns.index(key) if key in self.columns else None

    def step_column(self, step: int) -> int | None:
        return self.column("denoise", step)

    def cell(self, module: str, step: int | None, phase: str = "denoise") -> tuple[int, int] | None:
        """(row, column) of a module's output at a denoising step (or in the encode/decode phase)."""
        col = self.column(phase, step)
        if module not in self.modules or col is None:
            return None
        row = self.modules.index(module)
        return (row, col) if (row, col) in self.rows else None

    def home_column(self, module: str) -> int | None:
        """The column of a module that has exactly one (a text-encoder or VAE module), else None."""
        if module not in self.modules:
            return None
        row = self.modules.index(module)
        cols = [j for (i, j) in self.rows if i == row]
        return cols[0] if len(cols) == 1 else None

    def anomaly_cell(self, anomaly: dict | None) -> tuple[int, int] | None:
        """The cell of a run's first anomaly (CONTRACT's first_anomaly: phase, step, module)."""
        if not anomaly or not anomaly.get("module"):
            return None
        step = anomaly.get("step")
        return self.cell(str(anomaly["module"]), None if step is None else int(step),
                         str(anomaly.get("phase") or "denoise"))

    def label(self, col: int) -> str:
        phase, step = self.columns[col]
        return PHASE_LABELS.get(phase, str(step))

    def phase_spans(self) -> list[tuple[str, int, int]]:
        """(phase, first column, last column) for each phase present, in order."""
        spans: list[tuple[str, int, int]] = []
        for j, (phase, _step) in enumerate(self.columns):
            if spans and spans[-1][0] == phase:
                spans[-1] = (phase, spans[-1][1], j)
            else:
                spans.append((phase, j, j))
        return spans


def stat_value(row: StatRow, stat: str) -> float:
    return float(row.fp16_headroom if stat == "fp16_headroom" else getattr(row, stat))


def _column(row: StatRow) -> Column:
    return (row.phase, None if row.phase != "denoise" or row.step is None else int(row.step))


def _preference(row: StatRow) -> tuple[bool, int, int]:
    return (not (row.nan_count or row.inf_count), row.call, row.seq)  # a bad call first, then the first call


def stat_grid(rows: Sequence[StatRow]) -> StatGrid:
    """Stat rows of every phase → a module × column grid (rows in execution order, columns encode | steps |
    decode). A cell shows the module's first call, unless a later call of it (e.g. the text encoder's
    unconditional pass) has NaN/Inf: then that one, so a bad output is never hidden behind a healthy call."""
    shown: dict[tuple[str, Column], StatRow] = {}
    first_seq: dict[str, int] = {}
    for r in rows:
        if r.phase == "denoise" and r.step is None:
            continue
        first_seq[r.module] = min(first_seq.get(r.module, r.seq), r.seq)
        key = (r.module, _column(r))
        current = shown.get(key)
        if current is None or _preference(r) < _preference(current):
            shown[key] = r
    modules = sorted(first_seq, key=lambda m: first_seq[m])
    columns = sorted({col for _m, col in shown}, key=lambda c: (PHASE_ORDER.get(c[0], 1), c[1] or 0))
    row_of = {m: i for i, m in enumerate(modules)}
    col_of = {c: j for j, c in enumerate(columns)}
    bad_grid = np.zeros((len(modules), len(columns)), bool)
    cells: dict[tuple[int, int], StatRow] = {}
    for (module, col), r in shown.items():
        i, j = row_of[module], col_of[col]
        bad_grid[i, j] = bool(r.nan_count or r.inf_count)
        cells[(i, j)] = r
    return StatGrid(modules, columns, bad_grid, cells)


def grid_values(grid: StatGrid, stat: str) -> np.ndarray:
    """(modules, columns) float64 of one statistic, NaN where nothing was recorded."""
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
