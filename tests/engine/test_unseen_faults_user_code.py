"""A fault in the user's own code of a module — their subclass of a diffusers block, or a `forward` they set on the
instance —, never the ghost lab: the block stays bypassable (bisection names it), isolation rebuilds it as the
user's class and repro.py carries that class's source, and a rebuild that would run diffusers' forward instead is
refused (its output has no Inf where the run's had them), saying why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers.models.resnet import ResnetBlock2D

from ghostviewer import api
from ghostviewer.engine.tracing.blocks import resolve_module
from tests.engine.tiny_families import build_tiny
from tests.engine.tiny_pipelines import build_tiny_sd
from tests.script_in_process import run_script

BLOCK = "vae.decoder.up_blocks.1.resnets.0"
LIMIT = 0.0  # a module constant the user's class reads: written into repro.py with it


class LoudResnet(ResnetBlock2D):
    """The user's edit of a decoder resnet: inf once its input's std passes LIMIT."""

    def forward(self, input_tensor, temb, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = super().forward(input_tensor, temb, *args, **kwargs)
        return out * float("inf") if float(input_tensor.std()) > LIMIT else out


@pytest.fixture(scope="module")
def pipe() -> Any:
    return build_tiny_sd()


@pytest.fixture
def users_class(pipe: Any) -> Iterator[Any]:
    block = pipe.vae.decoder.up_blocks[1].resnets[0]
    block.__class__ = LoudResnet
    yield pipe
    block.__class__ = ResnetBlock2D


def test_a_users_subclass_is_bisected_and_its_repro_carries_the_class(users_class, runs_dir: Path,
                                                                       tmp_path: Path) -> None:
    pipe = users_class
    bad = api.run(pipe, "a red circle", steps=2, width=32, height=32, runs_dir=runs_dir)
    assert (bad["first_anomaly"]["module"], bad["first_anomaly"]["kind"]) == (BLOCK, "inf")
    assert api.bisect(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)["culprit"] == BLOCK
    result = api.isolate(bad["run_dir"], module=BLOCK, out=tmp_path / "iso", pipeline=pipe)
    assert result["rebuildable"] and result["class"].endswith("LoudResnet"), result["reason"]
    [item] = result["user_code_in_repro"]
    assert item["kind"] == "module class" and item["in_repro"] is True
    source = Path(result["repro"]).read_text()
    assert "class LoudResnet(ResnetBlock2D)" in source and "LIMIT = 0.0" in source
    proc = run_script(result["repro"], forbid=("ghostviewer", "tests"))  # standalone: the class is in the script
    assert proc.returncode == 1 and "Inf 32768" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_a_forward_set_on_the_instance_is_never_rebuilt_as_diffusers_forward(pipe: Any, runs_dir: Path,
                                                                            tmp_path: Path) -> None:
    block = pipe.vae.decoder.up_blocks[1].resnets[0]
    original = block.forward

    def forward(input_tensor, temb, *args, **kwargs):  # type: ignore[no-untyped-def]
        return original(input_tensor, temb, *args, **kwargs) * float("inf")

    block.forward = forward
    try:
        bad = api.run(pipe, "a red circle", steps=2, width=32, height=32, runs_dir=runs_dir)
        result = api.isolate(bad["run_dir"], module=BLOCK, out=tmp_path / "iso", pipeline=pipe)
    finally:
        del block.forward
    assert bad["first_anomaly"]["module"] == BLOCK
    assert result["rebuildable"] is False and result["repro"] is None  # diffusers' forward would be healthy
    assert "Inf where the run had none" in result["reason"]
    assert [i["kind"] for i in result["user_code_in_repro"]] == ["patched forward"]


NORM = "vae.decoder.mid_block.resnets.0.norm1"


def test_an_edited_attribute_travels_into_the_rebuild_and_the_repro(pipe: Any, runs_dir: Path,
                                                                    tmp_path: Path) -> None:
    """The user's `eps = 0` on a GroupNorm that then gets a constant input (their own pre-hook blanks it): 0/0.
    A rebuild from the VAE's config has eps 1e-6 and is healthy there; the run's value is set on it, and in repro."""
    norm = resolve_module(pipe, NORM)
    handle = norm.register_forward_pre_hook(lambda _m, args: (torch.full_like(args[0], 0.5),))
    norm.eps = 0.0
    try:
        bad = api.run(pipe, "a red circle", steps=2, width=32, height=32, trace_depth="leaf", runs_dir=runs_dir)
        assert (bad["first_anomaly"]["module"], bad["first_anomaly"]["kind"]) == (NORM, "nan")
        result = api.isolate(bad["run_dir"], module=NORM, out=tmp_path / "iso", pipeline=pipe, fuzz=True)
    finally:
        handle.remove()
        norm.eps = 1e-6
    assert result["rebuildable"] and result["output"]["nan"] == result["output"]["numel"], result["reason"]
    assert result["user_code_in_repro"] == [{"kind": "attributes", "name": "eps = 0.0", "on": ["the module"],
                                             "in_repro": True, "why": None}]
    assert result["fuzz"]["broken_values"]["real"] == ["as recorded"]  # the folder's rebuild has it too
    proc = run_script(result["repro"], forbid=("ghostviewer", "tests"))
    assert proc.returncode == 1 and "NaN 16384" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_the_users_forward_hook_is_written_into_repro_and_reproduces(runs_dir: Path, tmp_path: Path) -> None:
    """SD3: the user's hook (a closure over a plain threshold) turns a dual-stream block's image stream NaN once
    its std passes the threshold; repro.py carries the hook, so it reproduces, and runs healthy without it."""
    pipe = build_tiny("sd3")
    limit = 0.1

    def image_stream_nan(_module, _args, output):  # type: ignore[no-untyped-def]
        return (output[0], output[1] + float("nan")) if float(output[1].std()) > limit else output

    module = "transformer.transformer_blocks.1"
    handle = resolve_module(pipe, module).register_forward_hook(image_stream_nan)
    try:
        bad = api.run(pipe, "a red circle", steps=2, width=32, height=32, runs_dir=runs_dir)
        result = api.isolate(bad["run_dir"], module=module, step=0, out=tmp_path / "iso", pipeline=pipe)
    finally:
        handle.remove()
    assert bad["first_anomaly"]["module"] == module
    [item] = result["user_code_in_repro"]
    assert item["kind"] == "forward hook" and item["in_repro"] is True, item
    source = Path(result["repro"]).read_text()
    assert "limit = 0.1" in source and "def image_stream_nan(" in source
    proc = run_script(result["repro"], forbid=("ghostviewer", "tests"))
    assert proc.returncode == 1 and "output[1]: shape (2, 64, 32)" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "NaN 4096" in proc.stdout
    assert run_script(result["repro"], "--without-hooks", forbid=("ghostviewer", "tests")).returncode == 0


def test_a_text_encoder_layer_zeroing_short_prompts_is_named_bisected_and_reproduced(runs_dir: Path,
                                                                                      tmp_path: Path) -> None:
    """PixArt's T5: the user's hook on a T5 block zeroes its output when the attention mask it is given lets 2
    tokens through (a one-word prompt and its EOS). Isolation captures the pipeline's own first call (never the one
    GhostViewer makes to record the prompt's embeddings), a transformers layer is rebuilt through its text encoder's
    config (it has no diffusers config), and repro.py carries the hook."""
    pipe = build_tiny("pixart")
    layer = "text_encoder.encoder.block.1"

    def short_zero(_module, args, kwargs, output):  # type: ignore[no-untyped-def]
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")  # (B, 1, L, L), True where attended
        tokens = int(mask[0].reshape(-1, mask.shape[-1])[0].sum()) if isinstance(mask, torch.Tensor) else 0
        return (output[0] * 0.0, *output[1:]) if 1 < tokens < 3 else output

    handle = resolve_module(pipe, layer).register_forward_hook(short_zero, with_kwargs=True)
    try:
        bad = api.run(pipe, "red", steps=2, width=32, height=32, runs_dir=runs_dir)
        fine = api.run(pipe, "a red circle on blue background", steps=2, width=32, height=32, runs_dir=runs_dir)
        culprit = api.bisect(bad["run_dir"], pipeline=pipe, runs_dir=runs_dir)["culprit"]
        result = api.isolate(bad["run_dir"], module=layer, out=tmp_path / "iso", pipeline=pipe)
    finally:
        handle.remove()
    first = bad["first_anomaly"]
    assert (first["phase"], first["module"], first["kind"]) == ("encode", layer, "collapse") and culprit == layer
    assert fine["first_anomaly"] is None
    assert result["rebuilt_by"] == "parent" and result["output"]["std"] == 0.0, result["reason"]
    assert "config_class.from_dict(PARENT_CONFIG)" in Path(result["repro"]).read_text()
    proc = run_script(result["repro"], forbid=("ghostviewer", "tests"))
    assert proc.returncode == 1 and "collapsed: every value is 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]
