"""Block depth's prompt sentinels on the real demo: a cross-attention that goes to zero on a short prompt — the classic
silent ghost, whose transformer block still looks healthy — is named at block depth, at the attention itself, in a
run and in a watched call; the realistic form of it (the weights gone to zero: only the output projection's bias left)
too. A healthy run records no sentinel row at all (records, baselines and the heat map are as before), the blocks
tree keeps to the blocks, a NaN still belongs to its block, and the accelerator path's rows are kept only when they
show the collapse."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

import ghostviewer
from ghostviewer import api
from ghostviewer.analysis.baseline_store import recorded_channel_means
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.loops.recorded import wrap_pipeline
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.engine.tracing.blocks import discover_blocks, resolve_module
from ghostviewer.engine.tracing.tracer import StepBatch, Tracer
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec
from tests.engine.test_probe_short_prompt import ATTN2, _zeroed_cross_attention
from tests.engine.tiny_families import build_tiny

SIZE = 32

STEPS = 3
UP_ATTN2 = "unet.up_blocks.1.attentions.1.transformer_blocks.0.attn2"


@pytest.fixture(scope="module")
def demo() -> Any:
    return load_pipeline("demo", device="cpu").pipe


class _ZeroWeights:
    """diffusers' plain attention whose weights all went to zero: out = to_out(0) = the projection's bias."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None, **_):  # noqa: ANN001, ANN204
        value = attn.head_to_batch_dim(attn.to_v(encoder_hidden_states))
        query = attn.head_to_batch_dim(attn.to_q(hidden_states))
        weights = torch.zeros(query.shape[0], query.shape[1], value.shape[1])
        return attn.to_out[1](attn.to_out[0](attn.batch_to_head_dim(torch.bmm(weights, value))))


def _sentinel_rows(run_dir: str) -> list[Any]:
    return [r for r in RunRecord(run_dir).stats() if ".attn" in r.module or r.module.endswith("self_attn")]


def test_a_cross_attention_that_dies_on_short_prompts_is_named_at_block_depth(demo: Any, tmp_path: Path) -> None:
    broken = copy.deepcopy(demo)
    _zeroed_cross_attention(broken, max_tokens=4)
    short = api.run(broken, "cat", steps=STEPS, runs_dir=tmp_path, device="cpu")
    assert short["first_anomaly"] == {"phase": "denoise", "step": 0, "module": ATTN2, "kind": "collapse"}
    rows = _sentinel_rows(short["run_dir"])
    assert {r.module for r in rows} == {ATTN2} and [r.step for r in rows] == list(range(STEPS))
    assert all(r.std == 0.0 and r.absmax == 0.0 for r in rows)
    long = api.run(broken, "a red circle on a blue background", steps=STEPS, runs_dir=tmp_path, device="cpu")
    assert long["first_anomaly"] is None and _sentinel_rows(long["run_dir"]) == []


def test_weights_gone_to_zero_leave_only_the_bias_and_are_named_too(demo: Any, tmp_path: Path) -> None:
    broken = copy.deepcopy(demo)
    broken.unet.up_blocks[1].attentions[1].transformer_blocks[0].attn2.set_processor(_ZeroWeights())
    result = api.run(broken, "a red circle", steps=STEPS, runs_dir=tmp_path, device="cpu")
    assert result["first_anomaly"] == {"phase": "denoise", "step": 0, "module": UP_ATTN2, "kind": "collapse"}


def test_a_healthy_run_records_no_sentinel_row_and_the_blocks_tree_keeps_to_blocks(demo: Any, tmp_path: Path) -> None:
    tracer = Tracer(demo)
    cross = {p for p in tracer.sentinels if p.startswith("unet.")}
    assert len(cross) == 7 and all(p.endswith("attn2") for p in cross)
    assert {p for p in tracer.sentinels if p.startswith("text_encoder.")} == {
        "text_encoder.encoder.layers.0.self_attn", "text_encoder.encoder.layers.1.self_attn"}
    assert not tracer.sentinels & {b.module for b in discover_blocks(demo)}
    assert Tracer(demo, config=type(tracer.config)(depth="leaf")).sentinels == frozenset()
    result = api.run(demo, "cat", steps=STEPS, runs_dir=tmp_path, device="cpu")
    assert result["first_anomaly"] is None and _sentinel_rows(result["run_dir"]) == []
    means = recorded_channel_means(RunRecord(result["run_dir"]))  # what baselines are built from: blocks only
    assert ("encode", "text_encoder.encoder.layers.1") in means and not {m for _, m in means} & tracer.sentinels


def test_a_nan_inside_a_block_is_still_named_at_the_block(demo: Any, tmp_path: Path) -> None:
    """attn1's NaN flows into attn2 (a sentinel) before the block ends: the block is named, as before."""
    broken = copy.deepcopy(demo)
    block = broken.unet.down_blocks[1].attentions[0]
    block.transformer_blocks[0].attn1.register_forward_hook(lambda _m, _a, out: out + float("nan"))
    result = api.run(broken, "a red circle", steps=STEPS, runs_dir=tmp_path, device="cpu")
    assert result["first_anomaly"]["module"] == "unet.down_blocks.1.attentions.0"
    assert result["first_anomaly"]["kind"] == "nan"


def test_a_watched_call_with_a_dying_attention_is_kept(demo: Any, tmp_path: Path) -> None:
    broken = copy.deepcopy(demo)
    _zeroed_cross_attention(broken, max_tokens=4)
    broken.set_progress_bar_config(disable=True)
    with ghostviewer.watch(broken, runs_dir=tmp_path, keep="anomalies") as watcher:
        broken("a red circle on a blue background", num_inference_steps=STEPS)
        broken("cat", num_inference_steps=STEPS)
    healthy, short = watcher.runs
    assert healthy["first_anomaly"] is None and not healthy["kept"]
    assert short["kept"] and short["first_anomaly"]["module"] == ATTN2
    assert short["first_anomaly"]["kind"] == "collapse"


def test_rows_queued_from_an_accelerator_are_kept_only_when_they_show_the_collapse(demo: Any) -> None:
    """The accelerator path queues every sentinel output's spread and lets the harvest decide (no sync per hook)."""
    tracer = Tracer(demo)
    varied = torch.randn(2, 4, 8)
    for path, spread in (("a.attn2", varied - varied[:, :1]), ("b.attn2", torch.zeros(2, 4, 8))):
        tracer._conditional.add(tracer._seq)
        tracer._record(path, "encode", spread, False, count_samples=False)
    tracer._record("c.block", "encode", varied, False)
    batch = tracer.take()
    assert isinstance(batch, StepBatch) and batch.conditional == {0, 1} and tracer._conditional == set()
    rows = Tracer.harvest(batch).rows
    assert [(r.module, r.seq) for r in rows] == [("b.attn2", 1), ("c.block", 2)]


def test_a_t5_self_attention_gone_to_zero_is_named_inside_its_block(tmp_path: Path) -> None:
    """T5's T5LayerSelfAttention is itself a block (a norm, the attention, the residual): the T5Attention inside it
    is its sentinel (SD3's third encoder, unmasked)."""
    pipe = build_tiny("sd3")
    path = "text_encoder_3.encoder.block.1.layer.0.SelfAttention"
    handle = resolve_module(pipe, path).register_forward_hook(lambda _m, _a, out: (out[0] * 0, *out[1:]))
    spec = RunSpec(prompt="a red circle", steps=2, width=SIZE, height=SIZE, guidance=None)
    result = execute_run(wrap_pipeline(pipe), spec, tmp_path / "bad")
    assert result["first_anomaly"] == {"phase": "encode", "step": None, "module": path, "kind": "collapse"}
    handle.remove()
    assert execute_run(wrap_pipeline(pipe), spec, tmp_path / "good")["first_anomaly"] is None


def test_a_masked_attention_that_sees_one_key_is_not_a_collapse(tmp_path: Path) -> None:
    """PixArt masks its T5 encoding and its cross-attention: the empty negative prompt leaves one key, so every
    token's output is that key's value — healthy, and not judged."""
    pipe = build_tiny("pixart")
    spec = RunSpec(prompt="a red circle", steps=2, width=SIZE, height=SIZE, guidance=None)
    assert execute_run(wrap_pipeline(pipe), spec, tmp_path)["first_anomaly"] is None


def test_isolating_the_named_attention_agrees_with_the_run(demo: Any, tmp_path: Path) -> None:
    """The run names the attention; its isolation and fuzz judge the same way (the same at every token from more
    than one key is broken; one key, healthy), and the healthy attention fuzzes clean."""
    broken = copy.deepcopy(demo)
    broken.unet.up_blocks[1].attentions[1].transformer_blocks[0].attn2.set_processor(_ZeroWeights())
    run = api.run(broken, "a red circle", steps=STEPS, runs_dir=tmp_path, device="cpu")
    fuzz = api.isolate(run["run_dir"], module=UP_ATTN2, step=0, out=tmp_path / "bad", pipeline=broken,
                       fuzz=True)["fuzz"]
    cases = {(c["vary"], c["value"]): c for c in fuzz["cases"]}
    assert cases[("real", "as recorded")]["broken"] and cases[("real", "as recorded")]["why"] == "collapse"
    assert not cases[("seq_len", 1)]["broken"] and cases[("seq_len", 2)]["broken"]
    healthy = api.run(demo, "a red circle", steps=STEPS, runs_dir=tmp_path, device="cpu")
    clean = api.isolate(healthy["run_dir"], module=UP_ATTN2, step=0, out=tmp_path / "good", pipeline=demo,
                        fuzz=True)["fuzz"]
    assert clean["broken_values"].get("seq_len") is None and not clean["broken_values"].get("real")
