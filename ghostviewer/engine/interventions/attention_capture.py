"""Attention capture: cross-attention maps per prompt token and self-attention entropy, step by step.

Every diffusers `Attention` module under a matching path gets a recording processor that computes attention
as diffusers' `AttnProcessor` does (explicit probabilities instead of fused SDPA, same output) and keeps, for
the last batch item (the prompt-conditioned half under classifier-free guidance):

- `attn/<path>`: cross-attention probabilities averaged over heads, `(tokens, h, w)` float16;
- `attn_entropy/<path>`: self-attention entropy in nats, averaged over heads and queries, `(1,)` float32
  (uniform attention over n keys gives log n).

Joint attention (SD3's `JointAttnProcessor2_0`, Flux's `FluxAttnProcessor`, also on Flux's own `FluxAttention`
modules) is observed instead: the original processor still computes the output, and the family adapter
recomputes the image queries' scores over [image, text] keys, head by head, for `attn/<path>` (image queries →
text keys) and `attn_entropy/<path>` (over all keys).

Only modules running a plain or joint processor are swapped; a custom one (a fault preset, IP-Adapter, LoRA...)
is left in place and noted, so capturing never changes what a run computes.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from diffusers.models import attention_processor as ap
from torch import nn

from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.families.base import FamilyAdapter
from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.tracing.blocks import pipeline_components

DENOISER_PATTERNS = ("unet.*", "transformer.*", "prior.*")

# Processors that compute plain scaled dot-product attention; anything else is left alone.
_PLAIN = tuple(
    cls
    for cls in (getattr(ap, n, None) for n in ("AttnProcessor", "AttnProcessor2_0", "XFormersAttnProcessor"))
    if cls is not None
)


@dataclass(frozen=True)
class AttentionCaptureConfig:
    patterns: tuple[str, ...]  # fnmatch globs on module paths; an Attention module matches through any ancestor
    max_tokens: int = 77  # key positions kept in cross-attention maps

    def __post_init__(self) -> None:
        if isinstance(self.patterns, str):
            raise TypeError("patterns is a tuple of globs, not a single string")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    parts = path.split(".")
    prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes for pattern in patterns)


def _grid(queries: int, latent_hw: tuple[int, int] | None) -> tuple[int, int]:
    """(h, w) of a query sequence: the latent's aspect at some integer downscale, else square, else a row."""
    if latent_hw is not None:
        height, width = latent_hw
        factor = round(math.sqrt(height * width / queries))
        if factor >= 1 and height % factor == 0 and width % factor == 0:
            if (height // factor) * (width // factor) == queries:
                return height // factor, width // factor
    side = math.isqrt(queries)
    return (side, side) if side * side == queries else (1, queries)


class RecordingAttnProcessor:
    """diffusers' `AttnProcessor`, step for step, plus a host copy of what the capture keeps."""

    def __init__(self, capture: AttentionCapture, path: str, component: str, like_sdpa: bool) -> None:
        self.capture, self.path, self.component = capture, path, component
        # Replacing AttnProcessor2_0: apply QK-norm, and scale by 1/sqrt(head_dim) as SDPA does (it ignores
        # attn.scale and the upcast flags). Otherwise AttnProcessor's semantics exactly.
        self.like_sdpa = like_sdpa

    def __call__(
        self,
        attn: ap.Attention,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        temb: torch.Tensor | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> torch.Tensor:
        is_cross = encoder_hidden_states is not None
        residual = hidden_states
        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)
        input_ndim = hidden_states.ndim
        if input_ndim == 4:
            batch_size, channel, height, width = hidden_states.shape
            hidden_states = hidden_states.view(batch_size, channel, height * width).transpose(1, 2)
        batch_size, sequence_length, _ = (
            hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        )
        attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)

        query = attn.to_q(hidden_states)
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        elif attn.norm_cross:
            encoder_hidden_states = attn.norm_encoder_hidden_states(encoder_hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        query = attn.head_to_batch_dim(query)
        key = attn.head_to_batch_dim(key)
        value = attn.head_to_batch_dim(value)
        if self.like_sdpa and attn.norm_q is not None:
            query = attn.norm_q(query)
        if self.like_sdpa and attn.norm_k is not None:
            key = attn.norm_k(key)

        probs = self._probs(attn, query, key, attention_mask)
        self._record(probs, attn.heads, is_cross)
        hidden_states = attn.batch_to_head_dim(torch.bmm(probs, value))
        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        if input_ndim == 4:
            hidden_states = hidden_states.transpose(-1, -2).reshape(batch_size, channel, height, width)
        if attn.residual_connection:
            hidden_states = hidden_states + residual
        return hidden_states / attn.rescale_output_factor

    def _probs(
        self, attn: ap.Attention, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        if not self.like_sdpa:
            return attn.get_attention_scores(query, key, mask)
        shape = (query.shape[0], query.shape[1], key.shape[1])
        base = mask if mask is not None else torch.empty(shape, dtype=query.dtype, device=query.device)
        scores = torch.baddbmm(
            base, query, key.transpose(-1, -2), beta=0 if mask is None else 1, alpha=query.shape[-1] ** -0.5
        )
        return scores.softmax(dim=-1)

    @torch.no_grad()
    def _record(self, probs: torch.Tensor, heads: int, is_cross: bool) -> None:
        last = probs.detach().view(-1, heads, *probs.shape[1:])[-1].float()  # (heads, queries, keys)
        if is_cross:
            mean = last.mean(0)[:, : self.capture.config.max_tokens]  # (queries, tokens)
            self.capture.store_map(self.path, self.component, mean)
        else:
            entropy = torch.special.entr(last).sum(-1).mean()
            self.capture.store(f"attn_entropy/{self.path}", entropy.reshape(1).cpu())


class JointRecordingProcessor:
    """Observes joint attention (SD3, Flux); the original processor still computes the output, unchanged."""

    def __init__(
        self, capture: AttentionCapture, path: str, component: str, original: Any, adapter: FamilyAdapter
    ) -> None:
        self.capture, self.path, self.component = capture, path, component
        self.original, self.adapter = original, adapter

    def __call__(
        self,
        attn: nn.Module,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: Any = None,
        **kwargs: Any,
    ) -> Any:
        rope = {"image_rotary_emb": image_rotary_emb} if image_rotary_emb is not None else {}
        out = self.original(
            attn, hidden_states, encoder_hidden_states=encoder_hidden_states, attention_mask=attention_mask,
            **rope, **kwargs,
        )
        self._observe(attn, hidden_states, encoder_hidden_states, image_rotary_emb)
        return out

    @torch.no_grad()
    def _observe(self, attn: nn.Module, hidden: torch.Tensor, encoder: torch.Tensor | None, rope: Any) -> None:
        text_len = self.capture.text_len.get(self.component)
        qk = self.adapter.joint_attention_qk(attn, hidden, encoder, rope, text_len)
        if qk is None:
            return
        query, key, text = qk
        scale = query.shape[-1] ** -0.5
        heads = query.shape[0]
        maps, entropy = None, torch.zeros((), device=query.device)
        for head in range(heads):  # one head at a time: a Flux head's probabilities are ~75 MB at 1024 px
            probs = (query[head].float() @ key[head].float().T * scale).softmax(-1)  # (image queries, keys)
            entropy += torch.special.entr(probs).sum(-1).mean() / heads
            if text.stop > text.start:
                part = probs[:, text][:, : self.capture.config.max_tokens] / heads
                maps = part if maps is None else maps + part
        self.capture.store(f"attn_entropy/{self.path}", entropy.reshape(1).cpu())
        if maps is not None:
            self.capture.store_map(self.path, self.component, maps)


class AttentionCapture:
    name = "attention-capture"

    def __init__(self, config: AttentionCaptureConfig) -> None:
        self.config = config
        self.latent_hw: dict[str, tuple[int, int]] = {}  # component -> spatial size of its latest input
        self.fallback_hw: tuple[int, int] | None = None  # the run's latent grid, for packed inputs (Flux)
        self.text_len: dict[str, int] = {}  # component -> text tokens of its latest input (Flux single blocks)
        self._restore: list[tuple[ap.Attention, Any]] = []  # (module, its original processor)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._captured: dict[str, list[torch.Tensor]] = {}

    @property
    def paths(self) -> list[str]:
        """Module paths whose processor this capture swapped."""
        return [
            module.processor.path
            for module, _ in self._restore
            if isinstance(module.processor, (RecordingAttnProcessor, JointRecordingProcessor))
        ]

    def apply(self, ctx: RunContext) -> None:
        skipped: list[str] = []
        adapter = adapter_for(ctx.pipe)
        try:
            for component, root in pipeline_components(ctx.pipe).items():
                swapped = 0
                for relative, module in root.named_modules():
                    path = f"{component}.{relative}"
                    original = getattr(module, "processor", None)
                    if original is None or not _matches(path, self.config.patterns):
                        continue
                    if type(original).__name__ in adapter.joint_processor_kinds and hasattr(module, "set_processor"):
                        self._restore.append((module, original))
                        module.set_processor(JointRecordingProcessor(self, path, component, original, adapter))
                        swapped += 1
                        continue
                    if not isinstance(module, ap.Attention):
                        continue
                    if type(original) not in _PLAIN:  # exact types: a subclass may compute something else
                        skipped.append(f"{path} ({type(original).__name__})")
                        continue
                    like_sdpa = type(original) is ap.AttnProcessor2_0
                    self._restore.append((module, original))
                    module.set_processor(RecordingAttnProcessor(self, path, component, like_sdpa))
                    swapped += 1
                if swapped:
                    self._handles.append(root.register_forward_pre_hook(self._pre_hook(component), with_kwargs=True))
        except BaseException:
            self.remove()
            raise
        if skipped:
            ctx.notes.append(f"{self.name}: left custom processors in place: {', '.join(skipped)}")

    def _pre_hook(self, component: str) -> Any:
        def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            text = kwargs.get("encoder_hidden_states")
            if isinstance(text, torch.Tensor) and text.ndim == 3:
                self.text_len[component] = int(text.shape[1])
            for value in (*args, *kwargs.values()):
                if isinstance(value, torch.Tensor) and value.ndim == 4:
                    self.latent_hw[component] = (int(value.shape[-2]), int(value.shape[-1]))
                    return

        return hook

    def store(self, key: str, value: torch.Tensor) -> None:
        self._captured.setdefault(key, []).append(value)

    def store_map(self, path: str, component: str, mean: torch.Tensor) -> None:
        """(queries, tokens) probabilities → `attn/<path>`: one (h, w) map per token over the latent grid."""
        h, w = _grid(mean.shape[0], self.latent_hw.get(component, self.fallback_hw))
        self.store(f"attn/{path}", mean.T.reshape(-1, h, w).to(torch.float16).cpu())

    def harvest(self) -> dict[str, np.ndarray]:
        """What was captured since the last harvest, averaged over calls; clears it. Call once per step."""
        out: dict[str, np.ndarray] = {}
        for key, values in self._captured.items():
            mean = torch.stack([v.float() for v in values]).mean(0)
            out[key] = mean.numpy().astype(np.float16 if key.startswith("attn/") else np.float32)
        self._captured = {}
        return out

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        for module, processor in reversed(self._restore):
            module.set_processor(processor)
        self._handles, self._restore, self._captured = [], [], {}
