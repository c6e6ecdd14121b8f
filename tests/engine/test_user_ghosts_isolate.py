"""Isolation carries the user's own code: a block with the user's attention processor (set with
set_attn_processor) is rebuilt with that processor, not diffusers' default, so it behaves as it ran."""

from __future__ import annotations

from pathlib import Path

from diffusers.models.attention_processor import AttnProcessor2_0

from ghostviewer import api
from ghostviewer.engine.isolation.isolate import isolate_module

BLOCK = "unet.down_blocks.1.attentions.0"


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
