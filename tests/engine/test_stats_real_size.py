"""Statistics of a real-size model's outputs (SD 1.5 at 256 px: a 320-channel 32×32 map of a batch of 2 is 655k
floats; the VAE decoder's last maps are 8M) take the one C pass like a small model's, with torch's min, max and
fingerprint to the bit and its mean and std to float32 rounding; what the C pass refuses still goes to torch."""

from __future__ import annotations

import math

import pytest
import torch

from ghostviewer.engine.tracing import stats as stats_module
from ghostviewer.engine.tracing.stats import fingerprint, finish_stats, hook_stats, stats_and_fingerprint, tensor_stats

pytestmark = pytest.mark.skipif(stats_module._f32_finished is None, reason="the C extension is not built here")
SD15_DOWN_BLOCK_0 = (2, 320, 32, 32)  # unet.down_blocks.0's output at 256 px, with classifier-free guidance


@pytest.fixture(scope="module")
def output() -> torch.Tensor:
    return torch.randn(SD15_DOWN_BLOCK_0, generator=torch.Generator().manual_seed(0)) * 3 + 0.5


def test_a_real_size_output_is_finished_by_the_c_pass_with_torchs_extremes_and_fingerprint(
        output: torch.Tensor) -> None:
    queued, fp = hook_stats(output)
    assert isinstance(queued, tuple)  # finished in C: not torch's reductions
    expected = finish_stats(tensor_stats(output), output.numel())
    assert fp == fingerprint(output)
    assert (queued[0], queued[1], queued[4]) == (expected["min"], expected["max"], expected["absmax"])
    assert queued[2] == pytest.approx(expected["mean"], rel=1e-5, abs=1e-6)
    assert queued[3] == pytest.approx(expected["std"], rel=1e-5)
    raw, raw_fp = stats_and_fingerprint(output)  # the raw path of the same pass: the same values
    assert raw_fp == fp and finish_stats(raw, output.numel()) == dict(
        zip(("min", "max", "mean", "std", "absmax", "nan_count", "inf_count"), queued, strict=True))


def test_a_real_size_output_with_a_nan_or_a_view_still_goes_to_torch(output: torch.Tensor) -> None:
    bad = output.clone()
    bad[1, 7, 3, 3] = math.nan
    queued, _ = hook_stats(bad)
    assert isinstance(queued, list) and finish_stats(queued, bad.numel())["nan_count"] == 1
    strided = output.transpose(1, 2)  # not contiguous: torch's functions, same fingerprint definition
    raw, fp = stats_and_fingerprint(strided)
    assert fp == fingerprint(strided.contiguous()) and raw[0] == output.min().item()
