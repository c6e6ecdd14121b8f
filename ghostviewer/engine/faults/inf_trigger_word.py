"""A trigger word whose embedding row is inf: every prompt containing it comes out NaN, all others are fine."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ghostviewer.engine.interventions.base import RunContext


@dataclass(frozen=True)
class InfTriggerWordConfig:
    word: str = "purple"
    embedding: str = "text_encoder.embeddings"


class InfTriggerWord:
    name = "inf-trigger-word"
    description = "the token embedding of the word 'purple' is inf; prompts with it turn NaN"
    injected_at = InfTriggerWordConfig().embedding

    def __init__(self, config: InfTriggerWordConfig | None = None) -> None:
        self.config = config or InfTriggerWordConfig()
        self._saved: tuple[torch.Tensor, list[int], torch.Tensor] | None = None

    def apply(self, ctx: RunContext) -> None:
        tokenizer = ctx.pipe.tokenizer
        ids = tokenizer(self.config.word, add_special_tokens=False).input_ids
        weight = ctx.pipe.text_encoder.get_input_embeddings().weight
        with torch.no_grad():
            self._saved = (weight, ids, weight[ids].clone())
            weight[ids] = float("inf")

    def remove(self) -> None:
        if self._saved is not None:
            weight, ids, rows = self._saved
            with torch.no_grad():
                weight[ids] = rows
            self._saved = None
