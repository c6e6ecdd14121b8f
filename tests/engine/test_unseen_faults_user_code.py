"""A fault in the user's own code of a module — their subclass of a diffusers block, or a `forward` they set on the
instance —, never the ghost lab: the block stays bypassable (bisection names it), isolation rebuilds it as the
user's class and repro.py carries that class's source, and a rebuild that would run diffusers' forward instead is
refused (its output has no Inf where the run's had them), saying why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from diffusers.models.resnet import ResnetBlock2D

from ghostviewer import api
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
