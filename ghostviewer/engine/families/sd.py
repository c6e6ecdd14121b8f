"""Stable Diffusion 1.x/2.x: a U-Net over 4-channel latents, ε- or v-prediction, guidance 7.5 — the defaults."""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.families.base import FamilyAdapter, denoiser_of

# The community's linear latent → RGB fit for the SD 1.x/2.x VAE (rows: latent channels; columns: R, G, B).
SD15_FACTORS = (
    (0.3512, 0.2297, 0.3227),
    (0.3250, 0.4974, 0.2350),
    (-0.2829, 0.1762, 0.2721),
    (-0.2120, -0.2616, -0.7177),
)


class SDAdapter(FamilyAdapter):
    name = "sd"
    label = "Stable Diffusion 1.x/2.x"
    guidance = 7.5
    latent_rgb = SD15_FACTORS

    def matches(self, pipe: Any) -> bool:
        denoiser = denoiser_of(pipe)
        return type(denoiser).__name__ == "UNet2DConditionModel" and not _is_sdxl_unet(denoiser)


def _is_sdxl_unet(unet: Any) -> bool:
    return unet.config.get("addition_embed_type") == "text_time"
