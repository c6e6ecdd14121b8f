"""Cheap latent → RGB previews: a linear map per latent pixel, no VAE decode (free per step).

The demo pipeline ships its fitted map (`latent_preview.json`); SD 1.x/2.x, SDXL, SD3 and Flux latents use the
factors the community fitted for them (the family adapters hold them); anything else shows its first three
channels, normalised. Latents come in as (C, H, W): the runner unpacks Flux's packed tokens first.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.families.sd import SD15_FACTORS
from ghostviewer.engine.families.sdxl import SDXL_BIAS, SDXL_FACTORS

__all__ = ["SD15_FACTORS", "SDXL_BIAS", "SDXL_FACTORS", "LatentPreview"]


class LatentPreview:
    def __init__(self, weights: np.ndarray | None, bias: np.ndarray | None, source: str) -> None:
        self.weights, self.bias, self.source = weights, bias, source
        self._scaled_map: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def for_pipeline(cls, pipe: object, folder: Path | None = None) -> LatentPreview:
        if folder is not None and (folder / "latent_preview.json").is_file():
            data = json.loads((folder / "latent_preview.json").read_text(encoding="utf-8"))
            return cls(np.asarray(data["weights"], np.float32).T, np.asarray(data["bias"], np.float32), "fitted")
        channels = getattr(getattr(pipe, "vae", None), "config", {}).get("latent_channels", 4)
        adapter = adapter_for(pipe)
        if adapter.latent_rgb is not None and len(adapter.latent_rgb) == channels:
            weights, bias = np.asarray(adapter.latent_rgb, np.float32), np.asarray(adapter.latent_rgb_bias, np.float32)
            return cls(weights, bias, "sd15" if adapter.name == "sd" else adapter.name)
        if channels == 4:
            return cls(np.asarray(SD15_FACTORS, np.float32), np.zeros(3, np.float32), "sd15")
        return cls(None, None, "channels")

    def __call__(self, latents: np.ndarray) -> np.ndarray:
        """(C, H, W) latents → (H, W, 3) uint8 RGB. Non-finite values show as magenta, so NaN is visible."""
        z = np.asarray(latents, np.float32)
        finite = np.isfinite(z).all(axis=0)
        healthy = bool(finite.all())
        if not healthy:
            z = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
        if self.weights is not None and z.shape[0] == self.weights.shape[0]:
            channels, height, width = z.shape  # a matmul: einsum's setup costs ~10x the arithmetic here
            # ((z·W + b) + 1) / 2 · 255, with the scaling folded into the map (computed once)
            weights, bias = self._scaled()
            rgb = z.reshape(channels, -1).T @ weights
            rgb += bias
            rgb = rgb.reshape(height, width, 3)
        else:
            rgb = z[:3].transpose(1, 2, 0) if z.shape[0] >= 3 else np.repeat(z[:1], 3, 0).transpose(1, 2, 0)
            lo, hi = np.percentile(rgb, 1), np.percentile(rgb, 99)
            rgb = (rgb - lo) / max(hi - lo, 1e-6) * 255.0
        image = np.rint(np.clip(rgb, 0.0, 255.0)).astype(np.uint8)
        if not healthy:
            image[~finite] = (255, 0, 255)
        return image

    def _scaled(self) -> tuple[np.ndarray, np.ndarray]:
        if self._scaled_map is None:
            assert self.weights is not None and self.bias is not None
            self._scaled_map = (self.weights * np.float32(127.5), (self.bias + np.float32(1.0)) * np.float32(127.5))
        return self._scaled_map
