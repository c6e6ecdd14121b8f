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


# Packages whose hooks are the libraries' own (transformers' output capture, accelerate's and diffusers' offloading,
# PEFT, GhostViewer): everything else hooked on a pipeline's module is the user's code.
LIBRARY_PACKAGES = frozenset({"ghostviewer", "torch", "transformers", "diffusers", "accelerate", "peft"})


def users_code(fn: Any) -> bool:
    """Whether a hook is the user's own (a function of theirs, not a library's)."""
    home = getattr(fn, "__module__", None) or type(fn).__module__ or ""
    return home.split(".", 1)[0] not in LIBRARY_PACKAGES


@contextmanager
def users_hooks_set_aside(root: Any) -> Iterator[None]:
    """`root`'s modules without the user's forward hooks and pre-hooks, for GhostViewer's own call of them (the
    prompt's embeddings): the user's code sees the pipeline's calls only — a hook that counts calls, the kind of
    state an intermittent fault lives in, would otherwise be one call ahead in a watched call. The libraries'
    hooks stay; the same dicts are put back, so the user's handles still remove their hooks."""
    saved: list[tuple[Any, Any, Any]] = []
    for module in root.modules():
        forward, pre = module._forward_hooks, module._forward_pre_hooks
        if any(users_code(fn) for fn in (*forward.values(), *pre.values())):
            saved.append((module, forward, pre))
            module._forward_hooks = type(forward)((k, fn) for k, fn in forward.items() if not users_code(fn))
            module._forward_pre_hooks = type(pre)((k, fn) for k, fn in pre.items() if not users_code(fn))
    try:
        yield
    finally:
        for module, forward, pre in saved:
            module._forward_hooks, module._forward_pre_hooks = forward, pre
