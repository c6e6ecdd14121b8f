"""The finding "prompt truncated": a prompt (or negative prompt) longer than its tokenizer's limit.

diffusers encodes at most `model_max_length` tokens (77 for CLIP; BOS and EOS included) and only logs a warning for
the rest, so the end of a long prompt silently does nothing. Read with the tokenizer alone (no text encoder, well
under a millisecond), for GhostViewer's own calls and watched ones: how many tokens were dropped and which words
(the dropped ids decoded, as diffusers' own warning cuts them: the ids past the limit, the closing EOS aside).
Each tokenizer of the pipeline is read (SDXL's two; a T5 tokenizer by its pipeline's `max_sequence_length`).
"""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.tracing.prompt_tokens import max_length

KIND = "prompt_truncated"
TOKENIZERS = ("tokenizer", "tokenizer_2", "tokenizer_3")
SHOWN_CHARS = 300  # of the dropped words in the message (the event's data keeps them all)

Finding = tuple[str, str, str, dict[str, Any]]


def _ids(tokenizer: Any, text: str) -> list[int]:
    encoded = tokenizer(text, truncation=False, verbose=False)  # verbose=False: no "longer than" log line
    ids = encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "keys") else encoded.input_ids
    return list(ids)


def truncation_findings(pipe: Any, prompt: str, negative_prompt: str = "") -> list[Finding]:
    """One finding per tokenizer and prompt that its limit cuts; [] when every prompt fits (or none is text)."""
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for attribute in TOKENIZERS:
        tokenizer = getattr(pipe, attribute, None)
        if tokenizer is None or not callable(tokenizer):
            continue
        limit = max_length(tokenizer, pipe)
        for which, text in (("prompt", prompt), ("negative prompt", negative_prompt)):
            if not isinstance(text, str) or not text.strip():
                continue
            ids = _ids(tokenizer, text)
            if len(ids) <= limit:
                continue
            has_eos = tokenizer.eos_token_id is not None and ids[-1] == tokenizer.eos_token_id
            dropped = ids[limit - 1: -1] if has_eos else ids[limit:]
            words = " ".join(tokenizer.decode(dropped, skip_special_tokens=True).split())
            if (which, words) in seen:  # SDXL's second CLIP tokenizer cuts the same words
                continue
            seen.add((which, words))
            shown = words if len(words) <= SHOWN_CHARS else words[:SHOWN_CHARS] + "…"
            message = (f"prompt truncated: the {which} is {len(ids)} tokens, {attribute} keeps {limit}; "
                       f"{len(dropped)} tokens dropped, never seen by the text encoder: \"{shown}\"")
            findings.append((KIND, message, "warning", {
                "which": which.replace(" ", "_"), "tokenizer": attribute, "limit": limit, "tokens": len(ids),
                "dropped": len(dropped), "dropped_ids": [int(i) for i in dropped], "dropped_text": words}))
    return findings


def safe_truncation_findings(pipe: Any, prompt: str, negative_prompt: str = "") -> list[Finding]:
    """truncation_findings, or [] when the tokenizer cannot read the prompt: a finding never fails a run."""
    try:
        return truncation_findings(pipe, prompt, negative_prompt)
    except Exception:  # noqa: BLE001 - an odd tokenizer must not fail the run it only comments on
        return []
