"""Colour statistics of a final image, the part of a baseline that says what a pipeline normally draws.

Computed on the image as it is stored (quantised to uint8, as the run's final.png), so a baseline built from
recorded images and a check made on a fresh run's float image read the same numbers. Values are in [0, 1]:
per channel, the mean, the spatial std and the 2 % / 98 % quantiles (a channel offset lifts the whole channel,
its dark end included; a gain stretches it).
"""

from __future__ import annotations

import numpy as np

CHANNELS = ("r", "g", "b")
QUANTILES = {"q02": 0.02, "q98": 0.98}
COLOUR_STATS: tuple[str, ...] = tuple(
    f"{kind}_{c}" for kind in ("mean", "std", *QUANTILES) for c in CHANNELS
)


def as_uint8(image: np.ndarray) -> np.ndarray:
    """An (H, W, 3) uint8 copy of a float image in [0, 1] (NaN as 0), or the uint8 image itself."""
    array = np.asarray(image)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 3 or array.shape[2] < 3:
        raise ValueError(f"expected an (H, W, 3) image, got shape {array.shape}")
    array = array[:, :, :3]
    if array.dtype == np.uint8:
        return array
    clean = np.nan_to_num(array.astype(np.float64), nan=0.0, posinf=1.0, neginf=0.0)
    return (np.clip(clean, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def colour_stats(image: np.ndarray) -> dict[str, float]:
    """COLOUR_STATS of an image (float in [0, 1] or uint8), each a plain float in [0, 1]."""
    pixels = as_uint8(image).reshape(-1, 3).astype(np.float64) / 255.0
    values: dict[str, np.ndarray] = {
        "mean": pixels.mean(axis=0),
        "std": pixels.std(axis=0),
        **{name: np.quantile(pixels, q, axis=0) for name, q in QUANTILES.items()},
    }
    return {f"{kind}_{c}": float(values[kind][i]) for kind in ("mean", "std", *QUANTILES) for i, c in
            enumerate(CHANNELS)}
