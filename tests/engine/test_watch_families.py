"""Watching each family's own calls (tiny pipelines built offline): the output is the unwatched call's, bit for bit,
and every step is recorded, with or without a step callback (PixArt has none: its scheduler steps count)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import ghostviewer
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.tracing.blocks import pipeline_components
from ghostviewer.record import RunRecord
from tests.engine.tiny_families import FAMILIES, build_tiny

SIZE = 32  # every tiny family: a 16×16 latent


@pytest.mark.parametrize("family", FAMILIES)
def test_a_watched_family_call_is_unchanged_and_recorded(family: str, tmp_path: Path) -> None:
    pipe = build_tiny(family)

    extra = dict(adapter_for(pipe).call_kwargs)  # PixArt's: no resolution binning at this size

    def call():
        return pipe("a red circle", num_inference_steps=3, height=SIZE, width=SIZE, output_type="np",
                    generator=torch.Generator().manual_seed(1), **extra)

    plain = call().images
    hooks = _hooks(pipe)  # transformers' own output-capturing hooks stay after a call: those are not ours
    with ghostviewer.watch(pipe, runs_dir=tmp_path) as watcher:
        watched = call().images
    assert np.array_equal(plain, watched)
    assert _hooks(pipe) == hooks and "prepare_latents" not in vars(pipe) and "step" not in vars(pipe.scheduler)
    (run,) = watcher.runs
    record = RunRecord(run["run_dir"])
    assert record.status == "done" and [s.index for s in record.steps()] == [0, 1, 2]
    assert {r.step for r in record.stats(phase="denoise")} == {0, 1, 2}
    assert record.call["pipeline_class"].endswith(type(pipe).__name__)


def _hooks(pipe) -> dict[str, int]:
    return {f"{name}.{path}": len(module._forward_hooks) + len(module._forward_pre_hooks)
            for name, component in pipeline_components(pipe).items() for path, module in component.named_modules()}
