"""SDXL: a U-Net with two CLIP text encoders and size/crop conditioning ("text_time"); its own VAE."""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.families.base import FamilyAdapter, denoiser_of

# The community's linear latent → RGB fit for the SDXL VAE, and its bias.
SDXL_FACTORS = (
    (0.3651, 0.4232, 0.4341),
    (-0.2533, -0.0042, 0.1068),
    (0.1076, 0.1111, -0.0362),
    (-0.3165, -0.2492, -0.2188),
)
SDXL_BIAS = (0.1084, -0.0175, -0.0011)


class SDXLAdapter(FamilyAdapter):
    name = "sdxl"
    label = "Stable Diffusion XL"
    guidance = 5.0
    latent_rgb = SDXL_FACTORS
    latent_rgb_bias = SDXL_BIAS

    def matches(self, pipe: Any) -> bool:
        denoiser = denoiser_of(pipe)
        if type(denoiser).__name__ == "UNet2DConditionModel":
            return denoiser.config.get("addition_embed_type") == "text_time"
        return type(pipe).__name__.startswith("StableDiffusionXL")
