"""The numbers behind the feature-map view: a grid of colour-mapped channels, per-channel statistics and a
histogram. numpy only, no Qt."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ghostviewer.gui.data.step_data import GAP_RGBA, NON_FINITE_RGBA

FM_PREFIX = "fm/"
HIST_BINS = 64


@dataclass(frozen=True)
class ChannelGrid:
    image: np.ndarray  # (rows*(H+gap)-gap, cols*(W+gap)-gap, 4) uint8
    cols: int
    height: int
    width: int
    gap: int
    count: int

    def channel_at(self, x: float, y: float) -> int | None:
        """The channel under image pixel (x, y), or None over a gap or outside."""
        col, dx = divmod(int(math.floor(x)), self.width + self.gap)
        row, dy = divmod(int(math.floor(y)), self.height + self.gap)
        if x < 0 or y < 0 or dx >= self.width or dy >= self.height or col >= self.cols:
            return None
        channel = row * self.cols + col
        return channel if channel < self.count else None


def captured_modules(tensors: dict[str, np.ndarray]) -> list[str]:
    return [name[len(FM_PREFIX):] for name in tensors if name.startswith(FM_PREFIX)]


def _bounds(x: np.ndarray, axis: tuple[int, ...] | None) -> tuple[np.ndarray, np.ndarray]:
    masked = np.where(np.isfinite(x), x, np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN channels
        lo, hi = np.nanmin(masked, axis=axis, keepdims=True), np.nanmax(masked, axis=axis, keepdims=True)
    return np.nan_to_num(lo, nan=0.0), np.nan_to_num(hi, nan=1.0)


def channel_grid(fm: np.ndarray, lut: np.ndarray, per_channel: bool, gap: int = 1) -> ChannelGrid:
    """(C, H, W) → channels side by side, each mapped through lut on its own range (per_channel) or on the
    range of all channels; NaN/Inf magenta."""
    z = np.asarray(fm, np.float32)
    z = z[None] if z.ndim == 2 else z.reshape(-1, *z.shape[-2:])
    count, height, width = z.shape
    cols = math.ceil(math.sqrt(count))
    rows = math.ceil(count / cols)
    lo, hi = _bounds(z, (1, 2) if per_channel else None)
    scaled = (np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0) - lo) / np.maximum(hi - lo, 1e-12)
    index = (np.clip(scaled, 0, 1) * (len(lut) - 1)).round().astype(np.intp)
    table = lut if lut.shape[1] == 4 else np.concatenate([lut, np.full((len(lut), 1), 255, np.uint8)], axis=1)
    coloured = table[index]
    coloured[~np.isfinite(z)] = NON_FINITE_RGBA
    image = np.empty((rows * height + (rows - 1) * gap, cols * width + (cols - 1) * gap, 4), np.uint8)
    image[:] = GAP_RGBA
    for c in range(count):
        r, k = divmod(c, cols)
        image[r * (height + gap):r * (height + gap) + height, k * (width + gap):k * (width + gap) + width] = coloured[c]
    return ChannelGrid(image, cols, height, width, gap, count)


def channel_stats(fm: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel min, max, mean, std over finite values and the NaN/Inf counts."""
    z = np.asarray(fm, np.float64).reshape(-1, fm.shape[-2] * fm.shape[-1])
    finite = np.isfinite(z)
    masked = np.where(finite, z, np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN channels
        return {"min": np.nanmin(masked, axis=1), "max": np.nanmax(masked, axis=1),
                "mean": np.nanmean(masked, axis=1), "std": np.nanstd(masked, axis=1),
                "nan": np.isnan(z).sum(axis=1), "inf": np.isinf(z).sum(axis=1)}


def histogram(fm: np.ndarray, bins: int = HIST_BINS) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) of the finite values; empty arrays when there are none."""
    x = np.asarray(fm, np.float64).ravel()
    x = x[np.isfinite(x)]
    if not x.size:
        return np.zeros(0), np.zeros(0)
    counts, edges = np.histogram(x, bins=bins)
    return edges, counts
