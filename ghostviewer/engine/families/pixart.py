"""PixArt-α/Σ: a single-stream DiT (blocks return one tensor) over SDXL-VAE latents, T5 text, learned sigma.

Its `__call__` has no `callback_on_step_end` (it swallows the keyword), so steps are observed from
`scheduler.step`; it lower-cases the negative prompt, so it needs "" rather than None; resolution binning would
silently render another size than asked (and refuses tiny sample sizes), so it is turned off.
"""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.families.base import FamilyAdapter, denoiser_of
from ghostviewer.engine.families.sdxl import SDXL_BIAS, SDXL_FACTORS


class PixArtAdapter(FamilyAdapter):
    name = "pixart"
    label = "PixArt-α/Σ"
    guidance = 4.5
    latent_rgb = SDXL_FACTORS  # PixArt-Σ uses the SDXL VAE (α: SD's; the preview is approximate there)
    latent_rgb_bias = SDXL_BIAS
    call_kwargs = {"use_resolution_binning": False, "clean_caption": False}

    def matches(self, pipe: Any) -> bool:
        return type(denoiser_of(pipe)).__name__ == "PixArtTransformer2DModel" or type(pipe).__name__.startswith(
            "PixArt"
        )

    def negative_prompt(self, text: str) -> str | None:
        return text
