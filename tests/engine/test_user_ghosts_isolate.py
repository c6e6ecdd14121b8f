"""Isolation carries the user's own code: a block with the user's attention processor (set with
set_attn_processor) is rebuilt with that processor, not diffusers' default, so it behaves as it ran; repro.py
carries the processor's source (or names it and says it runs the default), so it reproduces as the run did; a block
that cannot be rebuilt (the user's own wrapper) is fuzzed as the live module in memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from diffusers.models.attention_processor import AttnProcessor2_0
from torch import nn

from ghostviewer import api
from ghostviewer.engine.isolation.isolate import isolate_module
from tests.script_in_process import Finished, run_script

BLOCK = "unet.down_blocks.1.attentions.0"
STANDALONE = ("ghostviewer", "tests")  # what a standalone repro.py must run without


class HalfAttention(AttnProcessor2_0):
    """A user's processor: attention as usual, its output halved."""

    def __call__(self, attn, hidden_states, *args, **kwargs):  # type: ignore[no-untyped-def]
        return super().__call__(attn, hidden_states, *args, **kwargs) * 0.5


def test_isolate_rebuilds_a_block_with_the_users_processor(demo_loaded, runs_dir: Path, tmp_path: Path) -> None:
    pipe = demo_loaded.pipe
    before = dict(pipe.unet.attn_processors)
    pipe.unet.set_attn_processor(HalfAttention())
    try:
        run = api.run(pipe, "a red circle", steps=2, runs_dir=runs_dir)
        result = isolate_module(run["run_dir"], BLOCK, step=0, out_dir=tmp_path / "iso", pipeline=demo_loaded)
    finally:
        pipe.unet.set_attn_processor(before)
    assert result["rebuildable"] is True, result["reason"]
    assert any("HalfAttention" in line for line in result["carried"]), result["carried"]


ATTN = "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1"


class ZeroAttention(AttnProcessor2_0):
    """A user's processor with a bug: attention computed as usual, then its output zeroed."""

    def __call__(self, attn, hidden_states, *args, **kwargs):  # type: ignore[no-untyped-def]
        return super().__call__(attn, hidden_states, *args, **kwargs) * SCALE


SCALE = 0.0  # a module constant the processor reads: written into repro.py with it


def _repro(path: str, *flags: str) -> Finished:
    """repro.py as a user runs it (`python repro.py` in its folder), with GhostViewer and the tests refused if it
    imports them; in this process (no second torch import): tests/engine/test_isolate.py runs an isolated repro.py
    in a fresh interpreter."""
    return run_script(path, *flags, forbid=STANDALONE)


def _isolated_with(demo_loaded, processor: object, runs_dir: Path, out: Path) -> dict:
    pipe = demo_loaded.pipe
    before = dict(pipe.unet.attn_processors)
    pipe.unet.set_attn_processor(processor)
    try:
        run = api.run(pipe, "a red circle", steps=2, runs_dir=runs_dir)
        return isolate_module(run["run_dir"], ATTN, step=0, out_dir=out, pipeline=demo_loaded)
    finally:
        pipe.unet.set_attn_processor(before)


@pytest.mark.slow
def test_repro_carries_the_users_processor_source_and_reproduces(demo_loaded, runs_dir: Path,
                                                                 tmp_path: Path) -> None:
    result = _isolated_with(demo_loaded, ZeroAttention(), runs_dir, tmp_path / "iso")
    assert result["rebuildable"] is True and result["repro"], result["reason"]
    assert result["output"]["std"] == 0.0  # the run's own output there: all zeros
    [item] = result["user_code_in_repro"]
    assert item["kind"] == "processor" and item["in_repro"] is True and item["on"] == ["the module"]
    assert item["name"].endswith("ZeroAttention")
    source = Path(result["repro"]).read_text()
    assert "The user's own attention processor(s): " in source and "class ZeroAttention(AttnProcessor2_0)" in source
    assert "SCALE = 0.0" in source and "import ghostviewer" not in source and "from ghostviewer" not in source
    assert "from tests" not in source  # the processor's own module is never imported: its source is copied
    proc = _repro(result["repro"])
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "collapsed: every value is 0" in proc.stdout
    default = _repro(result["repro"], "--default-processor")  # without the user's code: not reproduced
    assert default.returncode == 0, default.stdout + default.stderr[-2000:]
    assert "The user's own" in (Path(result["out_dir"]) / "README.md").read_text()


@pytest.mark.slow
def test_repro_names_a_processor_whose_source_cannot_be_read(demo_loaded, runs_dir: Path, tmp_path: Path) -> None:
    namespace: dict = {"AttnProcessor2_0": AttnProcessor2_0, "__name__": "notebook_cell"}
    exec("class CellAttention(AttnProcessor2_0):\n"  # noqa: S102 - a class typed in a notebook: no source file
         "    def __call__(self, attn, h, *a, **k):\n        return super().__call__(attn, h, *a, **k) * 0.0\n",
         namespace)
    result = _isolated_with(demo_loaded, namespace["CellAttention"](), runs_dir, tmp_path / "iso")
    [item] = result["user_code_in_repro"]
    assert item["in_repro"] is False and item["name"] == "notebook_cell.CellAttention"
    assert "default processor" in item["why"] and "source cannot be read" in item["why"]
    source = Path(result["repro"]).read_text()
    assert "# NOTE: the recorded run had the user's processor notebook_cell.CellAttention" in source
    assert "--default-processor" not in source
    proc = _repro(result["repro"])  # runs diffusers' default, as the note says: does not reproduce
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


RESNET = "unet.mid_block.resnets.0"


class GuardedResnet(nn.Module):
    """A user's own wrapper around a block (no diffusers config: it cannot be rebuilt), with a bug past a
    threshold: it rescales the block's output by the input's peak, which goes inf once that peak reaches 1000."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_tensor, temb, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = self.inner(input_tensor, temb, *args, **kwargs)
        return out * (1000.0 / (1000.0 - input_tensor.abs().amax()).clamp(min=0.0))


def test_fuzz_runs_on_the_live_module_when_it_cannot_be_rebuilt(demo_loaded, runs_dir: Path, tmp_path: Path) -> None:
    pipe = demo_loaded.pipe
    inner = pipe.unet.mid_block.resnets[0]
    pipe.unet.mid_block.resnets[0] = GuardedResnet(inner)
    try:
        run = api.run(pipe, "a red circle", steps=2, runs_dir=runs_dir)
        result = api.isolate(run["run_dir"], module=RESNET, step=0, out=tmp_path / "iso", pipeline=pipe, fuzz=True)
    finally:
        pipe.unet.mid_block.resnets[0] = inner
    assert result["rebuildable"] is False and result["repro"] is None
    table = result["fuzz"]
    assert table is not None and table["on"].startswith("the live module in memory")
    assert table["total"] > 0 and table["module"] == RESNET
    assert table["broken_values"] == {"scale": ["x1000"]}  # the user's threshold, and nothing else
    assert pipe.unet.mid_block.resnets[0] is inner and not inner._forward_hooks  # left as it was


def test_fuzz_of_a_rebuilt_block_keeps_the_users_processor(demo_loaded, runs_dir: Path, tmp_path: Path) -> None:
    pipe = demo_loaded.pipe
    before = dict(pipe.unet.attn_processors)
    pipe.unet.set_attn_processor(ZeroAttention())
    try:
        run = api.run(pipe, "a red circle", steps=2, runs_dir=runs_dir)
        result = api.isolate(run["run_dir"], module=ATTN, step=0, out=tmp_path / "iso", pipeline=pipe, fuzz=True)
    finally:
        pipe.unet.set_attn_processor(before)
    table = result["fuzz"]
    assert result["rebuildable"] is True and table["on"].startswith("the rebuilt module in memory")
    real = next(row for row in table["cases"] if row["vary"] == "real")
    assert real["broken"] and real["why"] == "collapse"  # as it ran; the folder's default processor is healthy
