"""Attention capture on the demo pipeline: real maps, an unchanged image, processors restored; prompt tokens."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from ghostviewer.analysis.projection import project_2d
from ghostviewer.engine.faults.short_prompt_attention import ShortPromptAttention
from ghostviewer.engine.interventions.attention_capture import (
    DENOISER_PATTERNS,
    AttentionCapture,
    AttentionCaptureConfig,
    RecordingAttnProcessor,
)
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.engine.tracing.prompt_tokens import prompt_embeddings, prompt_tokens

PROMPT = "a red circle on a blue background"
STEPS = 3
CROSS_BLOCKS = [
    "unet.down_blocks.1.attentions.0",
    "unet.down_blocks.2.attentions.0",
    "unet.mid_block.attentions.0",
    "unet.up_blocks.0.attentions.0",
    "unet.up_blocks.0.attentions.1",
    "unet.up_blocks.1.attentions.0",
    "unet.up_blocks.1.attentions.1",
]


def _context(pipe, prompt: str = PROMPT) -> RunContext:
    return RunContext(pipe=pipe, prompt=prompt, negative_prompt="", seed=0, current_step=lambda: None)


def _generate(pipe, prompt: str = PROMPT, **kwargs) -> np.ndarray:
    generator = torch.Generator().manual_seed(0)
    return pipe(prompt, num_inference_steps=STEPS, output_type="np", generator=generator, **kwargs).images


def _processors(pipe) -> dict[str, object]:
    return {path: resolve_module(pipe, path).processor for path in _attention_paths()}


def _attention_paths() -> list[str]:
    return [f"{block}.transformer_blocks.0.{name}" for block in CROSS_BLOCKS for name in ("attn1", "attn2")]


@dataclass
class CapturedRun:
    reference: np.ndarray
    image: np.ndarray
    steps: list[dict[str, np.ndarray]]
    paths: list[str]
    before: dict[str, object]
    after: dict[str, object]


@pytest.fixture(scope="module")
def captured(demo_loaded) -> CapturedRun:
    pipe = demo_loaded.pipe
    before = _processors(pipe)
    reference = _generate(pipe)
    capture = AttentionCapture(AttentionCaptureConfig(patterns=DENOISER_PATTERNS))
    steps: list[dict[str, np.ndarray]] = []

    def on_step_end(_pipe, _index, _timestep, _kwargs):
        steps.append(capture.harvest())
        return {}

    with applied([capture], _context(pipe)):
        paths = capture.paths
        image = _generate(pipe, callback_on_step_end=on_step_end)
    return CapturedRun(reference, image, steps, paths, before, _processors(pipe))


def test_capture_leaves_the_image_unchanged(captured: CapturedRun) -> None:
    assert np.abs(captured.image - captured.reference).max() <= 1e-5


def test_every_attention_module_of_the_unet_is_captured_and_restored(captured: CapturedRun) -> None:
    assert sorted(captured.paths) == sorted(_attention_paths())
    assert all(captured.after[path] is captured.before[path] for path in captured.paths)
    assert not any(isinstance(p, RecordingAttnProcessor) for p in captured.after.values())


def test_cross_attention_maps_are_probabilities_per_pixel(demo_loaded, captured: CapturedRun) -> None:
    length = demo_loaded.pipe.tokenizer.model_max_length
    assert len(captured.steps) == STEPS
    for step in captured.steps:
        maps = {k: v for k, v in step.items() if k.startswith("attn/")}
        assert sorted(maps) == sorted(f"attn/{block}.transformer_blocks.0.attn2" for block in CROSS_BLOCKS)
        for key, value in maps.items():
            assert value.dtype == np.float16 and value.shape in ((length, 8, 8), (length, 4, 4)), key
            assert (value >= 0).all(), key
            np.testing.assert_allclose(value.astype(np.float32).sum(0), 1.0, atol=2e-3, err_msg=key)


def test_self_attention_entropy_is_a_scalar_within_bounds(captured: CapturedRun) -> None:
    for step in captured.steps:
        entropies = {k: v for k, v in step.items() if k.startswith("attn_entropy/")}
        assert sorted(entropies) == sorted(f"attn_entropy/{block}.transformer_blocks.0.attn1" for block in CROSS_BLOCKS)
        for key, value in entropies.items():
            cross_map = step[key.replace("attn_entropy/", "attn/").replace(".attn1", ".attn2")]
            queries = cross_map.shape[1] * cross_map.shape[2]  # attn1 and attn2 share the block's resolution
            assert value.dtype == np.float32 and value.shape == (1,), key
            assert 0.0 <= float(value[0]) <= np.log(queries) + 1e-4, key


def test_the_prompts_words_get_more_attention_than_padding(demo_loaded, captured: CapturedRun) -> None:
    """The token axis of the maps is the prompt's: its words draw more attention, token for token, than the
    padding after it (which words draw most is the model's business: "blue" here, for the background)."""
    tokens = prompt_tokens(demo_loaded.pipe, PROMPT)
    words = slice(1, len(tokens["ids"]) - 1)  # between the start and end markers
    padding = slice(len(tokens["ids"]), tokens["padded_length"])
    maps = [k for k in captured.steps[0] if k.startswith("attn/unet.")]
    mass = np.stack([step[k].astype(np.float32).mean(axis=(1, 2)) for step in captured.steps for k in maps])
    assert mass[:, words].mean() > 1.5 * mass[:, padding].mean()


def test_a_failed_run_still_restores_processors(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    before = _processors(pipe)
    capture = AttentionCapture(AttentionCaptureConfig(patterns=("unet.mid_block.*",)))
    with pytest.raises(RuntimeError, match="boom"), applied([capture], _context(pipe)):
        assert len(capture.paths) == 2
        raise RuntimeError("boom")
    assert _processors(pipe) == before
    assert not pipe.unet._forward_pre_hooks


def test_custom_processors_are_left_in_place(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    before = _processors(pipe)
    fault, capture = ShortPromptAttention(), AttentionCapture(AttentionCaptureConfig(patterns=("unet.*",)))
    ctx = _context(pipe, "red circle")
    with applied([fault, capture], ctx):
        faulty = f"{fault.config.block}.transformer_blocks.0.attn2"
        assert faulty not in capture.paths and len(capture.paths) == len(_attention_paths()) - 1
        assert any(faulty in note for note in ctx.notes)
    assert _processors(pipe) == before


@torch.inference_mode()
@pytest.mark.parametrize("name", ["attn1", "attn2"])
def test_recording_processor_computes_what_the_default_one_does(demo_loaded, name: str) -> None:
    path = f"unet.down_blocks.1.attentions.0.transformer_blocks.0.{name}"
    module = resolve_module(demo_loaded.pipe, path)
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(2, 64, module.query_dim, generator=generator)
    context = torch.randn(2, 32, module.cross_attention_dim, generator=generator) if name == "attn2" else None
    expected = module(hidden, encoder_hidden_states=context)
    capture = AttentionCapture(AttentionCaptureConfig(patterns=(path,)))
    with applied([capture], _context(demo_loaded.pipe)):
        actual = module(hidden, encoder_hidden_states=context)
    assert (actual - expected).abs().max().item() <= 1e-5


@torch.inference_mode()
def test_repeated_calls_in_one_step_are_averaged(demo_loaded) -> None:
    pipe = demo_loaded.pipe
    path = "unet.mid_block.attentions.0.transformer_blocks.0.attn2"
    module = resolve_module(pipe, path)
    capture = AttentionCapture(AttentionCaptureConfig(patterns=(path,), max_tokens=5))
    generator = torch.Generator().manual_seed(1)
    inputs = [
        (torch.randn(1, 16, module.query_dim, generator=generator), torch.randn(1, 32, module.cross_attention_dim))
        for _ in range(2)
    ]
    with applied([capture], _context(pipe)):
        singles = []
        for hidden, context in inputs:
            module(hidden, encoder_hidden_states=context)
            singles.append(capture.harvest()[f"attn/{path}"].astype(np.float32))
        for hidden, context in inputs:
            module(hidden, encoder_hidden_states=context)
        both = capture.harvest()[f"attn/{path}"]
        assert capture.harvest() == {}  # harvesting clears
    assert both.shape == (5, 4, 4)
    np.testing.assert_allclose(both, (singles[0] + singles[1]) / 2, atol=1e-3)


def test_prompt_tokens_of_a_demo_prompt(demo_loaded) -> None:
    tokenizer = demo_loaded.pipe.tokenizer
    tokens = prompt_tokens(demo_loaded.pipe, PROMPT)
    assert tokens["labels"] == ["<|startoftext|>", *PROMPT.split(), "<|endoftext|>"]
    assert tokens["ids"][0] == tokenizer.bos_token_id and tokens["ids"][-1] == tokenizer.eos_token_id
    assert tokens["tokens"] == tokenizer.convert_ids_to_tokens(tokens["ids"])
    assert tokens["words"] == len(PROMPT.split()) and tokens["padded_length"] == tokenizer.model_max_length
    padded = tokenizer(PROMPT, padding="max_length", max_length=tokenizer.model_max_length).input_ids
    assert padded[: len(tokens["ids"])] == tokens["ids"]  # the pipeline's own ids, padding stripped


def test_prompt_embeddings_project_to_the_plane(demo_loaded) -> None:
    embeddings = prompt_embeddings(demo_loaded.pipe, PROMPT)
    count = len(prompt_tokens(demo_loaded.pipe, PROMPT)["ids"])
    width = demo_loaded.pipe.text_encoder.config.hidden_size
    for vectors in embeddings.values():
        assert vectors.dtype == np.float32 and vectors.shape == (count, width)
    points, method = project_2d(embeddings["input_embeddings"])
    assert method == "pca" and points.shape == (count, 2) and np.isfinite(points).all()
    first_a, second_a = 1, 5  # "a red circle on a ...": the same token twice, the same point twice
    np.testing.assert_array_equal(points[first_a], points[second_a])
    assert not np.allclose(points[first_a], points[2])
