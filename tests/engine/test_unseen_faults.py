"""Faults GhostViewer was never taught, made the way users make them (their own forward hooks and attention
processors on tiny pipelines of other families), never through the ghost lab: each checks the whole method — the
run names the module and step, the watcher names the one image of a batch that went bad (in the decode too), the
bisection names the block, fuzz finds the short text that breaks a masked cross-attention."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from diffusers.models.attention_processor import AttnProcessor2_0

import ghostviewer
from ghostviewer import api
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.record import RunRecord
from tests.engine.test_families import assert_no_leftovers
from tests.engine.tiny_families import build_tiny

STEPS = 3
SIZE = 32


@pytest.fixture(scope="module")
def tiny() -> Callable[[str], Any]:
    """tiny(family): that family's tiny pipeline, built once for the module (tests leave it as they found it)."""
    built: dict[str, Any] = {}

    def get(family: str) -> Any:
        if family not in built:
            built[family] = build_tiny(family)
        return built[family]

    return get


class ShortKeyZero(AttnProcessor2_0):
    """A user's processor with a bug: attention as usual, all zeros when fewer than 4 keys are attended to."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = super().__call__(attn, hidden_states, encoder_hidden_states, *args, **kwargs)
        keys = (hidden_states if encoder_hidden_states is None else encoder_hidden_states).shape[1]
        return out * 0.0 if keys < 4 else out


def test_fuzz_cuts_the_text_mask_with_the_text_and_finds_the_short_key_zeroing(tiny, runs_dir: Path,
                                                                               tmp_path: Path) -> None:
    """PixArt's cross-attention is masked (T5 padding): the module takes the mask as `attention_mask`, and a fuzzed
    text length must cut it too, or every length but the recorded one fails to run and nothing is found."""
    pipe = tiny("pixart")
    before = dict(pipe.transformer.attn_processors)
    pipe.transformer.set_attn_processor(ShortKeyZero())
    module = "transformer.transformer_blocks.1.attn2"
    try:
        run = api.run(pipe, "a red circle", steps=2, width=SIZE, height=SIZE, runs_dir=runs_dir)
        result = api.isolate(run["run_dir"], module=module, step=0, out=tmp_path / "iso", pipeline=pipe, fuzz=True)
    finally:
        pipe.transformer.set_attn_processor(before)
    assert run["first_anomaly"] is None  # 300 keys in the run: healthy as it ran
    table = result["fuzz"]
    assert result["inputs"]["attention_mask"]["shape"][-1] == result["inputs"]["encoder_hidden_states"]["shape"][1]
    assert table["skipped"] == 0, [row["skipped"] for row in table["cases"] if "skipped" in row][:3]
    assert table["broken_values"] == {"seq_len": [1, 2, 3]}


def _poison_sample(index: int, batch: int) -> Callable[..., Any]:
    """A forward hook: the output of batch item `index` (each copy of it under classifier-free guidance) to inf."""
    def hook(_module: object, _args: tuple, output: Any) -> Any:
        tensor = output[0] if isinstance(output, tuple) else output
        tensor = tensor.clone()
        tensor[[i for i in range(tensor.shape[0]) if i % batch == index]] = float("inf")
        return (tensor, *output[1:]) if isinstance(output, tuple) else tensor

    return hook


@pytest.mark.parametrize("module", ["vae.decoder.up_blocks.0", "unet.mid_block"])
def test_a_batch_of_three_names_image_two_wherever_it_went_bad(tiny, runs_dir: Path, module: str) -> None:
    """The decode's rows are judged after the call returns: the sample is named there as in the denoising loop."""
    pipe = tiny("sd")
    handle = resolve_module(pipe, module).register_forward_hook(_poison_sample(1, 3))

    def call() -> np.ndarray:
        return pipe("a red circle", num_inference_steps=STEPS, num_images_per_prompt=3, height=SIZE, width=SIZE,
                    generator=torch.Generator().manual_seed(3), output_type="np").images

    try:
        plain = call()
        with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
            watched = call()
    finally:
        handle.remove()
    assert np.array_equal(plain, watched, equal_nan=True)  # the caller's output, unchanged
    (run,) = watcher.runs
    first = run["first_anomaly"]
    assert (first["module"], first["kind"], first["samples"], first["sample"]) == (module, "inf", [1], 1), first
    assert [v["label"] == "nan" for v in run["verdicts"]] == [False, True, False]
    assert RunRecord(run["run_dir"]).first_anomaly["sample"] == 1  # the record says it too
    assert_no_leftovers(pipe)


@pytest.fixture
def last_step_image_stream_nan(tiny, request: pytest.FixtureRequest) -> Iterator[Any]:
    """SD3/Flux: a dual-stream block whose tuple's second element (the image stream) goes NaN at the last step only;
    the text stream stays healthy. The step is the user's own count of the transformer's calls, reset per call."""
    pipe = tiny(request.param)
    seen = {"calls": 0}

    def count(_module: object, _args: tuple, _kwargs: dict) -> None:
        seen["calls"] += 1

    def last_step(_module: object, _args: tuple, output: tuple) -> tuple:
        return (output[0], output[1] + float("nan")) if seen["calls"] % STEPS == 0 else output

    handles = [pipe.transformer.register_forward_pre_hook(count, with_kwargs=True),
               resolve_module(pipe, "transformer.transformer_blocks.1").register_forward_hook(last_step)]
    yield pipe
    for handle in handles:
        handle.remove()
    assert_no_leftovers(pipe)


@pytest.mark.parametrize("last_step_image_stream_nan", ["sd3", "flux"], indirect=True)
def test_a_tuple_blocks_second_element_is_named_at_its_step_and_bisected(last_step_image_stream_nan,
                                                                        runs_dir: Path) -> None:
    pipe = last_step_image_stream_nan
    bad = api.run(pipe, "a red circle", steps=STEPS, width=SIZE, height=SIZE, runs_dir=runs_dir)
    first = bad["first_anomaly"]
    assert (first["module"], first["step"], first["kind"]) == ("transformer.transformer_blocks.1", 2, "nan"), first
    result = api.bisect(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    assert result["culprit"] == "transformer.transformer_blocks.1", result.get("reason")


def test_fuzz_of_a_flux_block_varies_the_text_and_sees_its_attention_collapse_inside(tiny, runs_dir: Path,
                                                                                     tmp_path: Path) -> None:
    """Flux: a user's processor (a subclass of the block's own) zeroes the attention for a text of fewer than 4
    tokens. Its rotary embedding runs over text and image tokens, so a fuzzed text length cuts its text part too;
    the block's output stays finite and varied (residuals), and the collapse is seen inside, at the attention."""
    pipe = tiny("flux")
    block = "transformer.transformer_blocks.0"
    own = type(resolve_module(pipe, block).attn.processor)

    class ShortTextZero(own):  # type: ignore[misc, valid-type]
        def __call__(self, attn, hidden_states, encoder_hidden_states=None, *args, **kwargs):  # type: ignore[no-untyped-def]
            out = super().__call__(attn, hidden_states, encoder_hidden_states, *args, **kwargs)
            if encoder_hidden_states is None or encoder_hidden_states.shape[1] >= 4:
                return out
            return tuple(o * 0.0 for o in out) if isinstance(out, tuple) else out * 0.0

    before = dict(pipe.transformer.attn_processors)
    pipe.transformer.set_attn_processor(ShortTextZero())
    try:
        run = api.run(pipe, "a red circle", steps=2, width=SIZE, height=SIZE, runs_dir=runs_dir)
        result = api.isolate(run["run_dir"], module=block, step=0, out=tmp_path / "iso", pipeline=pipe, fuzz=True)
    finally:
        pipe.transformer.set_attn_processor(before)
    table = result["fuzz"]
    assert table["skipped"] == 0, [row["skipped"] for row in table["cases"] if "skipped" in row][:3]
    assert table["broken_values"] == {"seq_len": [1, 2, 3]}, table["broken_values"]
    short = next(row for row in table["cases"] if row["vary"] == "seq_len" and row["value"] == 1)
    assert short["why"] == "collapse inside" and short["inside"] == ["attn"]
