"""Every way a run can end leaves a closed record with its first anomaly; a bypassed block's insides are not
recorded; a step decoded later goes into the record through its API."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.engine.run.runner import CancelToken, RunFailed, execute_run
from ghostviewer.engine.server import decode_step
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec

NAN_SEED = 17  # nan-latents poisons seeds ending in 7: first anomaly at pipeline.prepare_latents, step 0


def _settings(**kwargs) -> RunSpec:
    base = {"prompt": "a red circle on a blue background", "steps": 4, "seed": NAN_SEED, "faults": ("nan-latents",)}
    return RunSpec(**{**base, **kwargs})


def _only_run(runs_dir: Path) -> RunRecord:
    (folder,) = list(runs_dir.iterdir())
    return RunRecord(folder)


def _closed(record: RunRecord) -> bool:
    return not (record.path / "run.sqlite-wal").exists() and record.complete


@pytest.fixture
def raise_at_step(demo_loaded):
    """Install a hook on the mid block that raises `error` once the run reaches step 2."""
    handles = []

    def install(error: BaseException) -> None:
        calls = {"n": 0}

        def hook(_module, _args, _output):
            calls["n"] += 1
            if calls["n"] > 2:  # one call a step (the guidance batch is one call): fails at step 2
                raise error

        handles.append(demo_loaded.pipe.unet.mid_block.register_forward_hook(hook))

    yield install
    for handle in handles:
        handle.remove()


def test_an_unexpected_exception_fails_the_run_and_keeps_its_first_anomaly(demo_loaded, runs_dir, raise_at_step):
    raise_at_step(ZeroDivisionError("a bug deep in someone's attention processor"))
    events: list[dict] = []
    with pytest.raises(RunFailed):
        execute_run(demo_loaded, _settings(), runs_dir, on_progress=events.append)
    record = _only_run(runs_dir)
    assert record.status == "failed" and "ZeroDivisionError" in (record.error or "")
    assert record.first_anomaly["module"] == "pipeline.prepare_latents"
    assert _closed(record)
    assert events[-1]["event"] == "failed" and events[-1]["first_anomaly"]["kind"] == "nan"
    assert len(record.steps()) >= 1  # what was committed before the failure stays


def test_keyboard_interrupt_closes_the_record_and_propagates(demo_loaded, runs_dir, raise_at_step):
    raise_at_step(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        execute_run(demo_loaded, _settings(), runs_dir)
    record = _only_run(runs_dir)
    assert record.status == "cancelled" and record.error == "interrupted" and _closed(record)
    assert record.first_anomaly is not None


def test_cancelled_run_keeps_its_first_anomaly(demo_loaded, runs_dir):
    token = CancelToken()
    token.cancel()  # checked after the first committed step
    result = execute_run(demo_loaded, _settings(), runs_dir, cancel=token)
    record = _only_run(runs_dir)
    assert result["status"] == "cancelled" and record.status == "cancelled" and _closed(record)
    assert record.first_anomaly["module"] == "pipeline.prepare_latents"
    assert result["first_anomaly"] == record.first_anomaly


def test_a_bypassed_blocks_insides_are_not_recorded(demo_loaded, runs_dir):
    block = "unet.down_blocks.1.attentions.0"
    settings = _settings(seed=1, faults=("short-prompt-attention",), prompt="red circle", trace_depth="leaf")
    plain = execute_run(demo_loaded, settings, runs_dir / "plain")
    inside = [r.module for r in RunRecord(plain["run_dir"]).stats() if r.module.startswith(block + ".")]
    assert inside, "the leaf-depth trace records modules inside the block"
    assert plain["first_anomaly"]["module"].startswith(block)
    bypassed = execute_run(demo_loaded, RunSpec(**{**settings.__dict__, "bypass": (block,)}), runs_dir / "by")
    rows = RunRecord(bypassed["run_dir"]).stats()
    assert not [r for r in rows if r.module.startswith(block + ".")]
    assert [r for r in rows if r.module == block], "the block's own (substituted) output is still recorded"
    assert not (bypassed["first_anomaly"] or {}).get("module", "").startswith(block + ".")


@pytest.mark.parametrize("depth", ["block", "leaf"])
def test_a_fault_in_an_attention_modules_own_forward_is_named_there(demo_loaded, runs_dir, depth):
    """The attention's processor computes after its last layer: at leaf depth the attention module itself is
    traced, so its broken output is not pinned on the layer that runs next (norm2)."""
    attention = "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1"
    module = resolve_module(demo_loaded.pipe, attention)
    handle = module.register_forward_hook(lambda _m, _a, out: out + float("nan"))
    try:
        result = execute_run(demo_loaded, _settings(seed=1, faults=(), trace_depth=depth), runs_dir)
    finally:
        handle.remove()
    named = result["first_anomaly"]["module"]
    expected = attention if depth == "leaf" else "unet.down_blocks.1.attentions.0"
    assert named == expected and result["first_anomaly"]["kind"] == "nan", result["first_anomaly"]


def test_a_bypass_limited_to_steps_records_the_insides_outside_the_range(demo_loaded, runs_dir):
    block = "unet.mid_block.attentions.0"
    settings = _settings(seed=1, faults=(), trace_depth="leaf", bypass=(f"{block}@0:2",))
    result = execute_run(demo_loaded, settings, runs_dir)
    steps = {r.step for r in RunRecord(result["run_dir"]).stats() if r.module.startswith(block + ".")}
    assert steps == {2, 3}


def test_decoding_a_step_goes_through_the_record(demo_loaded, runs_dir):
    result = execute_run(demo_loaded, _settings(seed=1, faults=()), runs_dir)
    path = decode_step(demo_loaded, Path(result["run_dir"]), 2)
    record = RunRecord(result["run_dir"])
    assert record.step_image_path(2, "decoded") == path
    assert {"name": "step_0002_decoded", "kind": "image", "relpath": "images/step_0002_decoded.png", "step": 2} in (
        record.files()
    )
