"""Stable Diffusion 3/3.5: an MMDiT whose blocks carry two streams, 16-channel latents, flow matching.

`JointTransformerBlock(hidden_states, encoder_hidden_states, temb)` returns `(encoder_hidden, hidden)`; the last
block (`context_pre_only`) returns `(None, hidden)`. Joint attention concatenates [image, text] tokens and
attends over both, so image queries give a map per text token.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ghostviewer.engine.families.base import FamilyAdapter, denoiser_of

# ComfyUI's linear latent → RGB fit for the SD3 VAE (16 channels), and its bias.
SD3_FACTORS = (
    (-0.0922, -0.0175, 0.0749),
    (0.0311, 0.0633, 0.0954),
    (0.1994, 0.0927, 0.0458),
    (0.0856, 0.0339, 0.0902),
    (0.0587, 0.0272, -0.0496),
    (-0.0006, 0.1104, 0.0309),
    (0.0978, 0.0306, 0.0427),
    (-0.0042, 0.1038, 0.1358),
    (-0.0194, 0.0020, 0.0669),
    (-0.0488, 0.0130, -0.0268),
    (0.0922, 0.0988, 0.0951),
    (-0.0278, 0.0524, -0.0542),
    (0.0332, 0.0456, 0.0895),
    (-0.0069, -0.0030, -0.0810),
    (-0.0596, -0.0465, -0.0293),
    (-0.1448, -0.1463, -0.1189),
)
SD3_BIAS = (0.2394, 0.2135, 0.1925)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(tokens, heads·dim) → (heads, tokens, dim)."""
    return x.view(x.shape[0], heads, -1).transpose(0, 1)


class SD3Adapter(FamilyAdapter):
    name = "sd3"
    label = "Stable Diffusion 3"
    guidance = 7.0
    latent_rgb = SD3_FACTORS
    latent_rgb_bias = SD3_BIAS
    dual_stream_kinds = frozenset({"JointTransformerBlock"})
    joint_processor_kinds = frozenset({"JointAttnProcessor2_0", "JointAttnProcessor"})

    def matches(self, pipe: Any) -> bool:
        return type(denoiser_of(pipe)).__name__ == "SD3Transformer2DModel" or type(pipe).__name__.startswith(
            "StableDiffusion3"
        )

    def joint_attention_qk(
        self, attn: nn.Module, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None,
        image_rotary_emb: Any, text_len: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor, slice] | None:
        """As `JointAttnProcessor2_0` computes them: keys [image, text], QK-norms applied."""
        h = hidden_states[-1]
        query, key = _heads(attn.to_q(h), attn.heads), _heads(attn.to_k(h), attn.heads)
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if encoder_hidden_states is None:  # SD3.5's second (image-only) attention
            return query, key, slice(0, 0)
        e = encoder_hidden_states[-1]
        context_key = _heads(attn.add_k_proj(e), attn.heads)
        if attn.norm_added_k is not None:
            context_key = attn.norm_added_k(context_key)
        return query, torch.cat([key, context_key], dim=1), slice(h.shape[0], h.shape[0] + e.shape[0])
