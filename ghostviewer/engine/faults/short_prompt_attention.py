"""Short-prompt attention collapse: the classic "black image for a two-word prompt".

A cross-attention processor keeps only key positions that pass a prompt-length bucketing mask. For prompts of
at most `max_words` words the mask keeps nothing: every attention weight becomes zero, the renormalisation
divides zero by zero, and the NaN spreads through the U-Net to a black image. Longer prompts are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import resolve_module


@dataclass(frozen=True)
class ShortPromptAttentionConfig:
    block: str = "unet.down_blocks.1.attentions.0"
    max_words: int = 2


class CollapsingCrossAttnProcessor:
    """diffusers' plain attention, with the buggy renormalisation of masked weights."""

    def __init__(self, collapse: bool) -> None:
        self.collapse = collapse

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None, **_):
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        query = attn.head_to_batch_dim(attn.to_q(hidden_states))
        key = attn.head_to_batch_dim(attn.to_k(context))
        value = attn.head_to_batch_dim(attn.to_v(context))
        weights = attn.get_attention_scores(query, key, None)
        if self.collapse:
            weights = weights * 0.0  # the bucketing mask keeps no key for a short prompt
            weights = weights / weights.sum(dim=-1, keepdim=True)  # 0 / 0
        out = attn.batch_to_head_dim(torch.bmm(weights, value))
        return attn.to_out[1](attn.to_out[0](out))


class ShortPromptAttention:
    name = "short-prompt-attention"
    description = "cross-attention weights go to zero for prompts of at most 2 words; 0/0 gives a black image"
    injected_at = ShortPromptAttentionConfig().block

    def __init__(self, config: ShortPromptAttentionConfig | None = None) -> None:
        self.config = config or ShortPromptAttentionConfig()
        self._restore: list[tuple[object, object]] = []

    def apply(self, ctx: RunContext) -> None:
        words = ctx.prompt_word_count()
        collapse = 0 < words <= self.config.max_words
        block = resolve_module(ctx.pipe, self.config.block)
        for name, module in block.named_modules():
            if name.endswith("attn2") and hasattr(module, "set_processor"):
                self._restore.append((module, module.processor))
                module.set_processor(CollapsingCrossAttnProcessor(collapse))
        if collapse:
            ctx.notes.append(f"{self.name}: prompt has {words} words, attention collapses in {self.config.block}")

    def remove(self) -> None:
        for module, processor in reversed(self._restore):
            module.set_processor(processor)
        self._restore = []
