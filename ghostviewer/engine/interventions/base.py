"""The shape every intervention shares, and the scope that guarantees removal.

TransformerLens' lesson: hooks are global state. `applied()` removes whatever was applied, in reverse order,
even when the run fails half-way, so nothing survives into the next run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

_MISSING = object()


@dataclass
class RunContext:
    """What an intervention may know about the run it is applied to."""

    pipe: Any
    prompt: str
    negative_prompt: str
    seed: int
    current_step: Callable[[], int | None]
    record_tensor: Callable[..., None] = lambda *args, **kwargs: None
    notes: list[str] = field(default_factory=list)

    def prompt_word_count(self, text: str | None = None) -> int:
        """The prompt's own tokens for `text` (the prompt by default), by the pipeline's own tokenizer: the special
        tokens it adds are not counted (CLIP adds BOS and EOS, T5 only EOS). An unknown word's token counts,
        unless the tokenizer's unknown token is also its BOS, EOS or padding (CLIP's is its EOS)."""
        tokenizer = getattr(self.pipe, "tokenizer", None)
        text = self.prompt if text is None else text
        if tokenizer is None:
            return len(text.split())
        ids = tokenizer(text, truncation=True).input_ids
        special = set(getattr(tokenizer, "all_special_ids", ()))
        framing = {getattr(tokenizer, f"{name}_token_id", None) for name in ("bos", "eos", "pad", "cls", "sep")}
        if getattr(tokenizer, "unk_token_id", None) not in framing:
            special.discard(tokenizer.unk_token_id)
        return sum(1 for i in ids if i not in special)


class Intervention(Protocol):
    name: str

    def apply(self, ctx: RunContext) -> None: ...

    def remove(self) -> None: ...


@contextmanager
def applied(interventions: Sequence[Intervention], ctx: RunContext) -> Iterator[None]:
    done: list[Intervention] = []
    try:
        for intervention in interventions:
            intervention.apply(ctx)
            done.append(intervention)
        yield
    finally:
        for intervention in reversed(done):
            intervention.remove()


class AttributePatch:
    """Shadow `obj.name` with `value` on the instance; `restore()` puts back exactly what was there."""

    def __init__(self, obj: object, name: str, value: object) -> None:
        self.obj, self.name = obj, name
        self._previous = obj.__dict__.get(name, _MISSING)
        setattr(obj, name, value)

    def restore(self) -> None:
        if self._previous is _MISSING:
            self.obj.__dict__.pop(self.name, None)
        else:
            setattr(self.obj, self.name, self._previous)


_OWN = threading.local()


@contextmanager
def own_call() -> Iterator[None]:
    """GhostViewer's own call of a pipeline's module, outside the pipeline's call (the prompt's embeddings recorded
    before it): a capture counting the module's calls skips it, so its numbering is the record's."""
    before = getattr(_OWN, "depth", 0)
    _OWN.depth = before + 1
    try:
        yield
    finally:
        _OWN.depth = before


def in_own_call() -> bool:
    return getattr(_OWN, "depth", 0) > 0
