"""Ghost-lab faults carried into an isolated module, in process (fuzzing) and as repro code.

A ghost-lab fault is a hook GhostViewer adds to a run; a module rebuilt from diffusers alone does not have it,
so a repro without it would not reproduce. Faults that live inside the isolated module get an "injected
fault" form here: `apply` puts the fault's own code on the rebuilt module, `source` writes that code into
repro.py as a clearly marked section. Faults acting elsewhere reach the module through its saved inputs
(nan-latents) or saved weights (inf-trigger-word) and need nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

from torch import nn

from ghostviewer.engine.faults import FAULTS
from ghostviewer.engine.faults.fp16_vae_overflow import Fp16VaeOverflowConfig
from ghostviewer.engine.faults.short_prompt_attention import CollapsingCrossAttnProcessor, ShortPromptAttentionConfig

Restore = Callable[[], None]


def overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _inside(module: nn.Module, module_path: str) -> list[tuple[str, nn.Module]]:
    """(full path, submodule) for the module and everything in it."""
    return [(f"{module_path}.{name}" if name else module_path, sub) for name, sub in module.named_modules()]


def _undo(steps: list[Callable[[], object]]) -> Restore:
    def restore() -> None:
        for step in reversed(steps):
            step()

    return restore


def _under(path: str, block: str) -> bool:
    return path == block or path.startswith(block + ".")


class ShortPromptForm:
    name = "short-prompt-attention"

    def paths(self) -> list[str]:
        return [ShortPromptAttentionConfig().block]

    def params(self, prompt_words: int) -> dict[str, Any]:
        config = ShortPromptAttentionConfig()
        return {"block": config.block, "max_words": config.max_words, "prompt_words": prompt_words}

    @staticmethod
    def words(params: dict[str, Any], seq_len: int | None) -> int:
        """The prompt's words as the fault counts them. A fuzzed context of L tokens is read as an unpadded
        tokenization (BOS, L-2 words, EOS); None: the recorded prompt."""
        return int(params["prompt_words"]) if seq_len is None else max(0, seq_len - 2)

    def apply(self, module: nn.Module, module_path: str, params: dict[str, Any], seq_len: int | None = None) -> Restore:
        words = self.words(params, seq_len)
        collapse = 0 < words <= int(params["max_words"])
        undo: list[Callable[[], object]] = []
        for path, sub in _inside(module, module_path):
            if _under(path, params["block"]) and path.endswith("attn2") and hasattr(sub, "set_processor"):
                undo.append(partial(sub.set_processor, sub.processor))
                sub.set_processor(CollapsingCrossAttnProcessor(collapse))
        return _undo(undo)

    def source(self, params: dict[str, Any]) -> str:
        code = inspect.getsource(CollapsingCrossAttnProcessor)
        return f'''{code}

FAULT_BLOCK = {params["block"]!r}
PROMPT_WORDS = {int(params["prompt_words"])}  # the recorded prompt's words between BOS and EOS, by its tokenizer
MAX_WORDS = {int(params["max_words"])}  # prompts of at most this many words collapse


def inject_fault(module):
    """Swap the fault's processor into every cross-attention (attn2) of FAULT_BLOCK inside the module."""
    collapse = 0 < PROMPT_WORDS <= MAX_WORDS
    for name, sub in module.named_modules():
        path = f"{{MODULE_PATH}}.{{name}}" if name else MODULE_PATH
        if (path == FAULT_BLOCK or path.startswith(FAULT_BLOCK + ".")) and path.endswith("attn2"):
            sub.set_processor(CollapsingCrossAttnProcessor(collapse))
'''


class Fp16OverflowForm:
    name = "fp16-vae-overflow"

    def paths(self) -> list[str]:
        config = Fp16VaeOverflowConfig()
        return [config.block, config.then]

    def params(self, prompt_words: int) -> dict[str, Any]:
        config = Fp16VaeOverflowConfig()
        return {"block": config.block, "then": config.then, "gain": config.gain}

    def apply(self, module: nn.Module, module_path: str, params: dict[str, Any], seq_len: int | None = None) -> Restore:
        gain = float(params["gain"])
        undo: list[Callable[[], object]] = []
        for path, sub in _inside(module, module_path):
            if path == params["block"]:
                undo.append(sub.register_forward_hook(lambda _m, _a, out: out * gain, prepend=True).remove)
            if path == params["then"]:
                undo.append(sub.register_forward_pre_hook(lambda _m, args: (args[0] / gain, *args[1:])).remove)
        return _undo(undo)

    def source(self, params: dict[str, Any]) -> str:
        return f'''FAULT_BLOCK = {params["block"]!r}  # its output is multiplied by GAIN ...
FAULT_THEN = {params["then"]!r}  # ... and this block's input divided by it again
GAIN = {float(params["gain"])!r}  # beyond float16's 65504 for ordinary activations


def inject_fault(module):
    for name, sub in module.named_modules():
        path = f"{{MODULE_PATH}}.{{name}}" if name else MODULE_PATH
        if path == FAULT_BLOCK:
            sub.register_forward_hook(lambda _m, _a, out: out * GAIN, prepend=True)
        if path == FAULT_THEN:
            sub.register_forward_pre_hook(lambda _m, args: (args[0] / GAIN, *args[1:]))
'''


FORMS: dict[str, Any] = {form.name: form for form in (ShortPromptForm(), Fp16OverflowForm())}


def injected_faults(faults: list[str], module_path: str, prompt_words: int) -> tuple[list[dict[str, Any]], list[str]]:
    """([{"name", "params"}] to inject into the isolated module, [notes on the other faults of the run])."""
    inject: list[dict[str, Any]] = []
    notes: list[str] = []
    for name in faults:
        form = FORMS.get(name)
        if form is not None and any(overlaps(module_path, p) for p in form.paths()):
            inject.append({"name": name, "params": form.params(prompt_words)})
            continue
        where = FAULTS[name].injected_at if name in FAULTS else "?"
        if overlaps(module_path, where):
            notes.append(f"{name} (at {where}) changed this module's weights: the saved weights carry it")
        else:
            notes.append(f"{name} acts at {where}, outside this module: its effect, if any, is in the saved inputs")
    return inject, notes


def apply_faults(module: nn.Module, module_path: str, faults: list[dict[str, Any]],
                 seq_len: int | None = None) -> Restore:
    return _undo([FORMS[f["name"]].apply(module, module_path, f["params"], seq_len) for f in faults])
