"""The traced runner on the real demo pipeline: record, steps, cancellation, bypass, scoping of hooks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.run.runner import CancelToken, RunFailed, execute_run
from ghostviewer.engine.tracing.blocks import pipeline_components
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec

PROMPT = "a red circle on a blue background, top left"


def _run(loaded, runs_dir: Path, **kwargs) -> dict:
    return execute_run(loaded, RunSpec(prompt=kwargs.pop("prompt", PROMPT), **kwargs), runs_dir)


def _pixels(result: dict) -> np.ndarray:
    return np.asarray(Image.open(result["image"]))


def assert_no_leftovers(pipe) -> None:
    """No hook, patched method or processor override survives a run."""
    for component in pipeline_components(pipe).values():
        for name, module in component.named_modules():
            assert not module._forward_hooks, f"forward hook left on {name}"
            assert not module._forward_pre_hooks, f"pre-hook left on {name}"
    assert "prepare_latents" not in vars(pipe)
    assert "step" not in vars(pipe.scheduler)


def test_healthy_run_is_recorded_step_by_step(demo_loaded, runs_dir: Path) -> None:
    result = _run(demo_loaded, runs_dir, seed=3)
    assert result["verdict"]["label"] == "ok", result
    assert result["first_anomaly"] is None
    record = RunRecord(Path(result["run_dir"]))
    assert record.complete and record.status == "done"
    assert record.settings["prompt"] == PROMPT and record.settings["seed"] == 3
    assert [s.index for s in record.steps()] == list(range(20))
    assert all(s.mem_after and s.wall_s > 0 for s in record.steps())
    modules = record.modules()
    assert modules[0].startswith("text_encoder.")  # execution order: encode, denoise, decode
    assert "unet.mid_block" in modules and "vae.decoder.up_blocks.2" in modules
    assert "pipeline.prepare_latents" in modules and "scheduler.step" in modules
    mid = record.stats("unet.mid_block", phase="denoise")
    assert len(mid) == 20 and all(np.isfinite(r.std) and r.std > 0 for r in mid)
    tensors = record.step_tensors(19)
    assert tensors["latents"].shape == (4, 16, 16) and tensors["x0"].shape == (4, 16, 16)
    assert tensors["preview"].shape == (16, 16, 3) and tensors["preview"].dtype == np.uint8
    assert record.tensors("initial_noise")["latents"].shape == (4, 16, 16)
    assert _pixels(result).shape == (64, 64, 3)
    assert record.environment["pipeline"]["weight_hashes"]["unet"]
    assert_no_leftovers(demo_loaded.pipe)


def test_same_seed_is_bit_identical_and_seed_matters(demo_loaded, runs_dir: Path) -> None:
    a, b, c = (_run(demo_loaded, runs_dir, seed=s, steps=2) for s in (5, 5, 6))
    assert np.array_equal(_pixels(a), _pixels(b))
    assert not np.array_equal(_pixels(a), _pixels(c))


def test_cancel_stops_at_once_and_keeps_the_steps(demo_loaded, runs_dir: Path) -> None:
    token = CancelToken()
    calls = iter(range(10**6))

    def cancel_during_third(*_args) -> None:  # noqa: ANN002 - as the engine's reader thread would, mid-step
        if next(calls) == 2:
            token.cancel()

    handle = demo_loaded.pipe.unet.register_forward_hook(cancel_during_third)
    try:
        result = execute_run(demo_loaded, RunSpec(prompt=PROMPT), runs_dir, token)
    finally:
        handle.remove()
    record = RunRecord(Path(result["run_dir"]))
    assert record.status == "cancelled" and result["status"] == "cancelled"
    assert [s.index for s in record.steps()] == [0, 1, 2]  # seen at the end of the step it came in
    assert_no_leftovers(demo_loaded.pipe)


@pytest.fixture(scope="module")
def plain_seed_1(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A plain run (seed 1, 4 steps) the bypass tests compare with, made once for the module and only read."""
    return _run(demo_loaded, tmp_path_factory.mktemp("plain-seed-1"), seed=1, steps=4)


def test_bypass_changes_the_run_and_removing_it_restores_it(demo_loaded, runs_dir: Path, plain_seed_1: dict) -> None:
    plain = plain_seed_1
    bypassed = _run(demo_loaded, runs_dir, seed=1, steps=4, bypass=("unet.mid_block.attentions.0",))
    again = _run(demo_loaded, runs_dir, seed=1, steps=4)
    assert not np.array_equal(_pixels(plain), _pixels(bypassed))
    assert np.array_equal(_pixels(plain), _pixels(again))
    # The bypassed block's recorded output is its input: the mid block's first resnet output.
    record = RunRecord(Path(bypassed["run_dir"]))
    resnet = record.stats("unet.mid_block.resnets.0", step=2)[0]
    attention = record.stats("unet.mid_block.attentions.0", step=2)[0]
    assert attention.mean == pytest.approx(resnet.mean) and attention.std == pytest.approx(resnet.std)


def test_bypass_for_a_step_range_only(demo_loaded, runs_dir: Path) -> None:
    plain = _run(demo_loaded, runs_dir, seed=2, steps=6)
    late = _run(demo_loaded, runs_dir, seed=2, steps=6, bypass=("unet.mid_block@4:",))
    a, b = RunRecord(Path(plain["run_dir"])), RunRecord(Path(late["run_dir"]))
    assert np.array_equal(a.step_tensors(3)["latents"], b.step_tensors(3)["latents"])
    assert not np.array_equal(a.step_tensors(4)["latents"], b.step_tensors(4)["latents"])


def test_shape_changing_block_is_refused_before_recording(demo_loaded, runs_dir: Path) -> None:
    with pytest.raises(GhostError, match="changes the shape"):
        _run(demo_loaded, runs_dir, bypass=("unet.down_blocks.1",))
    with pytest.raises(GhostError, match="no module"):
        _run(demo_loaded, runs_dir, bypass=("unet.nowhere.0",))
    assert not list(runs_dir.iterdir())


def test_a_failing_run_leaves_no_hook_behind_and_keeps_its_record(demo_loaded, runs_dir: Path) -> None:
    module = demo_loaded.pipe.unet.mid_block

    def explode(_module, _args, _output):
        raise RuntimeError("simulated CUDA error")

    handle = module.register_forward_hook(explode)
    try:
        with pytest.raises(RunFailed, match="simulated CUDA error") as info:
            _run(
                demo_loaded,
                runs_dir,
                bypass=("unet.up_blocks.1.attentions.0",),
                faults=("unseeded-noise",),
                capture=("unet.mid_block*",),
            )
    finally:
        handle.remove()
    assert_no_leftovers(demo_loaded.pipe)
    record = RunRecord(info.value.run_dir)
    assert record.status == "failed" and "simulated CUDA error" in record.error
    assert record.stats(phase="encode"), "the encode phase was committed before the failure"


def test_feature_maps_are_captured_small_and_float16(demo_loaded, runs_dir: Path) -> None:
    result = _run(demo_loaded, runs_dir, steps=4, capture=("unet.mid_block", "unet.up_blocks.*.attentions.0"))
    tensors = RunRecord(Path(result["run_dir"])).step_tensors(2)
    fmap = tensors["fm/unet.mid_block"]
    assert fmap.dtype == np.float16 and fmap.ndim == 3 and fmap.shape[0] <= 64
    assert "fm/unet.up_blocks.1.attentions.0" in tensors


def test_bad_settings_get_clear_messages(demo_loaded, runs_dir: Path) -> None:
    with pytest.raises(GhostError, match="steps must be at least 1"):
        _run(demo_loaded, runs_dir, steps=0)
    with pytest.raises(GhostError, match="seed must be between"):
        _run(demo_loaded, runs_dir, seed=-5)
    with pytest.raises(GhostError, match="unknown scheduler"):
        _run(demo_loaded, runs_dir, scheduler="warp-drive")
    with pytest.raises(GhostError, match="unknown fault"):
        _run(demo_loaded, runs_dir, faults=("gremlin",))
    assert not list(runs_dir.iterdir())


def test_seed_minus_one_picks_and_records_a_seed(demo_loaded, runs_dir: Path) -> None:
    result = _run(demo_loaded, runs_dir, seed=-1, steps=2)
    assert result["seed"] >= 0
    record = RunRecord(Path(result["run_dir"]))
    assert record.settings["seed"] == result["seed"]
    assert any("seed -1" in e.message for e in record.events())


@pytest.mark.parametrize("scheduler", ["ddim", "euler", "dpm++"])
def test_schedulers_all_draw_and_do_not_leak(demo_loaded, runs_dir: Path, scheduler: str) -> None:
    before = type(demo_loaded.pipe.scheduler)
    # 12 steps, not the default 20: step 10's x0 is read, and every scheduler draws an ok image there with room
    # (measured: std >= 0.25 against 0.02, colour cast <= 0.15 against 0.3)
    result = _run(demo_loaded, runs_dir, seed=4, scheduler=scheduler, steps=12)
    assert result["verdict"]["label"] == "ok", result
    record = RunRecord(Path(result["run_dir"]))
    assert np.isfinite(record.step_tensors(10)["x0"]).all()
    assert type(demo_loaded.pipe.scheduler) is before


def test_prompt_tokens_and_attention_maps_are_recorded(demo_loaded, runs_dir: Path) -> None:
    result = _run(demo_loaded, runs_dir, steps=3, capture_attention=True)
    record = RunRecord(Path(result["run_dir"]))
    prompt = record.tensors("prompt")
    assert prompt["ids"].ndim == 1 and prompt["input_embeddings"].shape[0] == prompt["ids"].shape[0]
    assert any(e.kind == "prompt" and "circle" in e.message for e in record.events())
    maps = {k: v for k, v in record.step_tensors(2).items() if k.startswith("attn/")}
    assert "attn/unet.mid_block.attentions.0.transformer_blocks.0.attn2" in maps
    assert all(m.ndim == 3 and (m >= 0).all() for m in maps.values())


def test_zero_residual_bypass_keeps_only_the_shortcut(demo_loaded, runs_dir: Path, plain_seed_1: dict) -> None:
    module = "unet.up_blocks.1.resnets.0"  # its shortcut maps the skip concatenation to fewer channels
    plain = plain_seed_1
    bypassed = _run(demo_loaded, runs_dir, seed=1, steps=4, bypass=(module,), capture=(module,))
    assert not np.array_equal(_pixels(plain), _pixels(bypassed))
    record = RunRecord(Path(bypassed["run_dir"]))
    row = record.stats(module, step=3)[0]
    assert row.shape[1] == demo_loaded.pipe.unet.up_blocks[1].resnets[0].out_channels
    assert np.isfinite(record.step_tensors(3)[f"fm/{module}"]).all()
    assert_no_leftovers(demo_loaded.pipe)


@pytest.mark.parametrize(("module", "phase"), [("unet.conv_act", "denoise"), ("vae.decoder.conv_in", "decode")])
def test_a_nan_from_a_module_between_blocks_is_named_there_at_block_depth(demo_loaded, runs_dir: Path, module: str,
                                                                          phase: str) -> None:
    """An activation or a decoder's first conv sits between blocks: traced at block depth too, a fault in it is named
    there, not at the healthy block that runs next (unet.conv_out, vae.decoder.mid_block.resnets.0)."""
    from ghostviewer.engine.tracing.blocks import resolve_module

    handle = resolve_module(demo_loaded.pipe, module).register_forward_hook(lambda _m, _a, out: out * float("nan"))
    try:
        result = execute_run(demo_loaded, RunSpec(prompt="a red circle on a blue background", steps=3), runs_dir)
    finally:
        handle.remove()
    anomaly = result["first_anomaly"]
    assert (anomaly["module"], anomaly["phase"], anomaly["kind"]) == (module, phase, "nan")


def test_a_prompt_is_encoded_for_the_record_once_per_loaded_pipeline(demo_loaded, runs_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps and replays run one prompt many times: its tokens and embeddings are recorded from the first run's."""
    from ghostviewer.engine.run import runner

    calls: list[str] = []
    original = runner.prompt_embeddings
    monkeypatch.setattr(runner, "prompt_embeddings",
                        lambda pipe, prompt: calls.append(prompt) or original(pipe, prompt))
    prompt = "a green star on a purple background, top left"  # not run by other tests
    first, second = (execute_run(demo_loaded, RunSpec(prompt=prompt, seed=seed, steps=2), runs_dir)
                     for seed in (1, 2))
    assert calls == [prompt]
    a, b = (RunRecord(r["run_dir"]).tensors("prompt") for r in (first, second))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
