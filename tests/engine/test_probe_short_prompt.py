"""The short_prompt probe on the real demo: the healthy demo passes (one leaf-depth run of one word); a copy whose
cross-attention goes to zero when the prompt has very few tokens — the classic intermittent ghost, invisible at
block depth — fails it, naming the collapsed attention layer and its step; a layer that is broken for every prompt
is not blamed on the short one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ghostviewer import api
from ghostviewer.engine.judge_model.probes import short_prompt
from tests.engine.test_probes import verdicts

STEPS = 2  # the collapse is at step 0, and the healthy pass holds from the first step
ATTN2 = "unet.mid_block.attentions.0.transformer_blocks.0.attn2"


def _zeroed_cross_attention(pipe: Any, max_tokens: int) -> None:
    """The fault: the text encoder's calls remember the prompt's token count (the largest of a call's encodings: the
    negative prompt's is smaller), and the mid block's cross-attention returns zeros when it is at most max_tokens."""
    pad = pipe.tokenizer.pad_token_id
    state: dict[str, Any] = {"counts": [], "denoising": False}

    def count(_module, args, kwargs, output):  # noqa: ANN001, ANN202
        ids = kwargs.get("input_ids", args[0] if args else None)
        if state["denoising"]:
            state["counts"], state["denoising"] = [], False
        state["counts"].append(int((ids[0] != pad).sum()))
        return output

    def zero_when_short(_module, _args, output):  # noqa: ANN001, ANN202
        state["denoising"] = True
        return output * 0 if max(state["counts"] or [77]) <= max_tokens else output

    pipe.text_encoder.register_forward_hook(count, with_kwargs=True)
    module = pipe.unet.mid_block.attentions[0].transformer_blocks[0].attn2
    module.register_forward_hook(zero_when_short)


def test_the_healthy_demo_passes_with_one_more_run(tmp_path: Path) -> None:
    report = api.probe("demo", runs_dir=tmp_path, device="cpu", probes=["short_prompt"], steps=STEPS)
    assert verdicts(report) == {"short_prompt": True} and report["runs"] == 2
    (finding,) = report["findings"]
    assert finding["evidence"]["prompts"] == ["a red circle on a blue background", "background"]
    assert finding["evidence"]["first_failure"] is None and short_prompt("a cat, on a mat") == "cat"


def test_a_cross_attention_that_dies_on_short_prompts_fails_it(demo_loaded: Any, tmp_path: Path) -> None:
    demo = copy.deepcopy(demo_loaded.pipe)
    _zeroed_cross_attention(demo, max_tokens=4)  # "background": 2 tokens; the base prompt: 8
    report = api.probe(demo, runs_dir=tmp_path, probes=["short_prompt", "prompt_effect"], steps=STEPS)
    assert verdicts(report) == {"short_prompt": False, "prompt_effect": True}
    finding = report["findings"][0]
    assert finding["finding"] == "a short prompt breaks the model" and "short token sequences" in finding["bug_class"]
    failure = finding["evidence"]["first_failure"]
    assert (failure["module"], failure["kind"], failure["step"]) == (ATTN2, "collapse", 0)
    assert finding["evidence"]["base_first_failure"] is None and len(finding["evidence"]["runs"]) == 3


def test_a_layer_broken_for_every_prompt_is_not_the_short_prompts(demo_loaded: Any, tmp_path: Path) -> None:
    demo = copy.deepcopy(demo_loaded.pipe)
    _zeroed_cross_attention(demo, max_tokens=77)  # every prompt
    report = api.probe(demo, runs_dir=tmp_path, probes=["short_prompt"], steps=STEPS)
    (finding,) = report["findings"]
    assert finding["ok"] and finding["evidence"]["base_first_failure"]["module"] == ATTN2
