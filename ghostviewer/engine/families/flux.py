"""Flux.1: an MMDiT with dual-stream and single-stream blocks, packed latents, flow matching, distilled guidance.

Both `FluxTransformerBlock` and `FluxSingleTransformerBlock` take `(hidden_states, encoder_hidden_states)` and
return `(encoder_hidden, hidden)`. Latents travel packed: (tokens, 4·C), 2×2 latent pixels per token. Attention
(`FluxAttention`, not a diffusers `Attention`) runs over [text, image] tokens with rotary embeddings; single
blocks attend over the concatenation without knowing where the text ends, so the capture tells them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ghostviewer.engine.families.base import FamilyAdapter, denoiser_of

# ComfyUI's linear latent → RGB fit for the Flux VAE (16 channels), and its bias.
FLUX_FACTORS = (
    (-0.0346, 0.0244, 0.0681),
    (0.0034, 0.0210, 0.0687),
    (0.0275, -0.0668, -0.0433),
    (-0.0174, 0.0160, 0.0617),
    (0.0859, 0.0721, 0.0329),
    (0.0004, 0.0383, 0.0115),
    (0.0405, 0.0861, 0.0915),
    (-0.0236, -0.0185, -0.0259),
    (-0.0245, 0.0250, 0.1180),
    (0.1008, 0.0755, -0.0421),
    (-0.0515, 0.0201, 0.0011),
    (0.0428, -0.0012, -0.0036),
    (0.0817, 0.0765, 0.0749),
    (-0.1264, -0.0522, -0.1103),
    (-0.0280, -0.0881, -0.0499),
    (-0.1262, -0.0982, -0.0778),
)
FLUX_BIAS = (-0.0329, -0.0718, -0.0851)
DEFAULT_SAMPLE_SIZE = 128  # FluxPipeline's default_sample_size: 1024 px with the 8× VAE


def unpack(latents: torch.Tensor, height: int, width: int, vae_scale: int) -> torch.Tensor:
    """(B, tokens, 4·C) → (B, C, H, W), as `FluxPipeline._unpack_latents` does. (B, C, H, W) passes through."""
    if latents.ndim != 3:
        return latents
    batch, _tokens, channels = latents.shape
    h, w = 2 * (int(height) // (vae_scale * 2)), 2 * (int(width) // (vae_scale * 2))
    x = latents.view(batch, h // 2, w // 2, channels // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(batch, channels // 4, h, w)


class FluxAdapter(FamilyAdapter):
    name = "flux"
    label = "Flux.1"
    guidance = 3.5
    latent_rgb = FLUX_FACTORS
    latent_rgb_bias = FLUX_BIAS
    dual_stream_kinds = frozenset({"FluxTransformerBlock", "FluxSingleTransformerBlock"})
    joint_processor_kinds = frozenset({"FluxAttnProcessor", "FluxAttnProcessor2_0"})

    def matches(self, pipe: Any) -> bool:
        return type(denoiser_of(pipe)).__name__ == "FluxTransformer2DModel" or type(pipe).__name__.startswith("Flux")

    def native_size(self, pipe: Any) -> int:
        return int(getattr(pipe, "default_sample_size", DEFAULT_SAMPLE_SIZE)) * self.vae_scale(pipe)

    def unpack_latents(self, pipe: Any, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        return unpack(latents, height, width, self.vae_scale(pipe))

    def joint_attention_qk(
        self, attn: nn.Module, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None,
        image_rotary_emb: Any, text_len: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor, slice] | None:
        """As `FluxAttnProcessor` computes them: [text, image] tokens, QK-norms, then rotary embeddings."""
        from diffusers.models.embeddings import apply_rotary_emb
        from diffusers.models.transformers.transformer_flux import _get_qkv_projections

        h = hidden_states[-1:]
        e = encoder_hidden_states[-1:] if encoder_hidden_states is not None else None
        query, key, _value, e_query, e_key, _e_value = _get_qkv_projections(attn, h, e)
        query = attn.norm_q(query.unflatten(-1, (-1, attn.head_dim)))
        key = attn.norm_k(key.unflatten(-1, (-1, attn.head_dim)))
        if e is not None and attn.added_kv_proj_dim is not None:
            e_query = attn.norm_added_q(e_query.unflatten(-1, (-1, attn.head_dim)))
            e_key = attn.norm_added_k(e_key.unflatten(-1, (-1, attn.head_dim)))
            query, key = torch.cat([e_query, query], dim=1), torch.cat([e_key, key], dim=1)
            text_len = e.shape[1]
        if image_rotary_emb is not None:
            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)
        text = int(text_len or 0)
        return query[0, text:].transpose(0, 1), key[0].transpose(0, 1), slice(0, text)
