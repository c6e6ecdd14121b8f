"""The prompt as the pipeline sees it: its tokens and ids, and their embeddings before and after the text encoder.

Cross-attention maps have one channel per key position of the padded sequence (`padded_length`); the first
`len(ids)` are the prompt's own tokens (BOS ... EOS; T5 has no BOS), the rest are padding. A tokenizer saved
without `model_max_length` (some T5 ones: transformers then says 10^30) pads to the length the pipeline itself
uses (its `max_sequence_length` default, e.g. PixArt's 300), never to 10^30.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from ghostviewer.engine.errors import GhostError


def _tokenizer(pipe: Any) -> Any:
    tokenizer = getattr(pipe, "tokenizer", None)
    if tokenizer is None:
        raise GhostError("this pipeline has no tokenizer, so its prompt has no tokens to show")
    return tokenizer


SANE_MAX_LENGTH = 100_000  # above this, model_max_length is transformers' "not set" (10^30)
FALLBACK_MAX_LENGTH = 512


def max_length(tokenizer: Any, pipe: Any = None) -> int:
    """The padded length the pipeline encodes prompts to."""
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit <= SANE_MAX_LENGTH:
        return limit
    try:
        default = inspect.signature(type(pipe).__call__).parameters["max_sequence_length"].default
    except (KeyError, TypeError, ValueError):
        default = None
    return default if isinstance(default, int) and default > 0 else FALLBACK_MAX_LENGTH


def _padded_ids(tokenizer: Any, prompt: str, pipe: Any = None) -> tuple[list[int], int]:
    """The ids exactly as the pipeline encodes them (padded to max length), and the prompt's own length."""
    ids = tokenizer(prompt, padding="max_length", max_length=max_length(tokenizer, pipe), truncation=True).input_ids
    eos = tokenizer.eos_token_id
    length = ids.index(eos) + 1 if eos in ids else len(ids)  # padding starts after the first EOS
    return list(ids), length


def token_ids(pipe: Any, prompts: Any) -> list[int] | None:
    """Every token id the pipeline's (first) tokenizer makes of a prompt or a list of prompts, sorted, unpadded;
    None when there is no tokenizer or no prompt text (a call with prompt_embeds)."""
    texts = [prompts] if isinstance(prompts, str) else [p for p in prompts or () if isinstance(p, str)]
    tokenizer = getattr(pipe, "tokenizer", None)
    if not texts or tokenizer is None:
        return None
    try:
        return sorted({int(i) for text in texts for i in tokenizer(text, truncation=True).input_ids})
    except Exception:  # noqa: BLE001 - a user's tokenizer: no ids, then the baseline judges as it always did
        return None


def prompt_tokens(pipe: Any, prompt: str) -> dict[str, Any]:
    """`ids` and `tokens` from BOS to EOS (padding stripped), `labels` for display, `words` between them."""
    tokenizer = _tokenizer(pipe)
    padded, length = _padded_ids(tokenizer, prompt, pipe)
    ids = padded[:length]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    specials = int(bos is not None and ids[:1] == [bos]) + int(eos is not None and eos in ids)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    labels = [tokenizer.decode([i]).strip() or token for i, token in zip(ids, tokens)]  # "red</w>" -> "red"
    return {
        "ids": ids,
        "tokens": tokens,
        "labels": labels,
        "words": max(0, length - specials),
        "padded_length": len(padded),
    }


@torch.inference_mode()
def prompt_embeddings(pipe: Any, prompt: str) -> dict[str, np.ndarray]:
    """`input_embeddings` (the token table's rows) and `last_hidden_state` for the prompt's tokens, float32
    `(tokens, dim)`. The encoder runs on the padded sequence, as in the pipeline."""
    tokenizer = _tokenizer(pipe)
    encoder = getattr(pipe, "text_encoder", None)
    if encoder is None:
        raise GhostError("this pipeline has no text encoder, so its prompt has no embeddings to show")
    padded, length = _padded_ids(tokenizer, prompt, pipe)
    ids = torch.tensor([padded], device=encoder.device)
    table = encoder.get_input_embeddings()(ids)[0, :length]
    hidden = encoder(ids)[0][0, :length]
    return {
        "input_embeddings": table.float().cpu().numpy(),
        "last_hidden_state": hidden.float().cpu().numpy(),
    }
