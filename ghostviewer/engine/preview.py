"""Cheap latent → RGB previews: a linear map per latent pixel, no VAE decode (free per step).

The demo pipeline ships its fitted map (`latent_preview.json`); SD 1.x/2.x and SDXL latents use the factors
the community fitted for them; anything else shows its first three channels, normalised.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# Rows: latent channels; columns: R, G, B. Applied to VAE-scaled latents.
SD15_FACTORS = [
    [0.3512, 0.2297, 0.3227],
    [0.3250, 0.4974, 0.2350],
    [-0.2829, 0.1762, 0.2721],
    [-0.2120, -0.2616, -0.7177],
]
SDXL_FACTORS = [
    [0.3651, 0.4232, 0.4341],
    [-0.2533, -0.0042, 0.1068],
    [0.1076, 0.1111, -0.0362],
    [-0.3165, -0.2492, -0.2188],
]
SDXL_BIAS = [0.1084, -0.0175, -0.0011]


class LatentPreview:
    def __init__(self, weights: np.ndarray | None, bias: np.ndarray | None, source: str) -> None:
        self.weights, self.bias, self.source = weights, bias, source

    @classmethod
    def for_pipeline(cls, pipe: object, folder: Path | None = None) -> LatentPreview:
        if folder is not None and (folder / "latent_preview.json").is_file():
            data = json.loads((folder / "latent_preview.json").read_text(encoding="utf-8"))
            return cls(np.asarray(data["weights"], np.float32).T, np.asarray(data["bias"], np.float32), "fitted")
        channels = getattr(getattr(pipe, "vae", None), "config", {}).get("latent_channels", 4)
        if channels == 4 and type(pipe).__name__.startswith("StableDiffusionXL"):
            return cls(np.asarray(SDXL_FACTORS, np.float32), np.asarray(SDXL_BIAS, np.float32), "sdxl")
        if channels == 4:
            return cls(np.asarray(SD15_FACTORS, np.float32), np.zeros(3, np.float32), "sd15")
        return cls(None, None, "channels")

    def __call__(self, latents: np.ndarray) -> np.ndarray:
        """(C, H, W) latents → (H, W, 3) uint8 RGB. Non-finite values show as magenta, so NaN is visible."""
        z = np.asarray(latents, np.float32)
        bad = ~np.isfinite(z).all(axis=0)
        z = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
        if self.weights is not None and z.shape[0] == self.weights.shape[0]:
            rgb = np.einsum("chw,ck->hwk", z, self.weights) + self.bias
            rgb = (rgb + 1.0) / 2.0
        else:
            rgb = z[:3].transpose(1, 2, 0) if z.shape[0] >= 3 else np.repeat(z[:1], 3, 0).transpose(1, 2, 0)
            lo, hi = np.percentile(rgb, 1), np.percentile(rgb, 99)
            rgb = (rgb - lo) / max(hi - lo, 1e-6)
        image = (np.clip(rgb, 0, 1) * 255).round().astype(np.uint8)
        image[bad] = (255, 0, 255)
        return image
