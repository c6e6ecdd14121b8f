"""The one-launch GPU statistics (engine/tracing/fused_stats.py) give the values of the torch functions: min, max,
counts and fingerprint exactly, the sums to float32 precision. Runs on a CUDA device with Triton, or on the CPU under
Triton's interpreter (TRITON_INTERPRET=1 set before the first import; Triton 3.6's interpreter then needs numpy < 2.4,
or its `int(self.handle.data)` read as `int(self.handle.data.item())`); skipped elsewhere, as where the product runs
without it."""

from __future__ import annotations

import math
import os

import pytest
import torch

from ghostviewer.engine.tracing import fused_stats
from ghostviewer.engine.tracing.stats import IN_ROW, DeviceStats, fingerprint, hook_stats, tensor_stats
from ghostviewer.record.types import wrap_fingerprint

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(
    fused_stats.triton is None or (DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1"),
    reason="needs Triton and a CUDA device (or TRITON_INTERPRET=1)",
)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("numel", [1, 7, 4096, fused_stats.SMALL + 1, 300_000])
def test_the_fused_row_gives_the_torch_functions_values(dtype: torch.dtype, numel: int) -> None:
    x = (torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 3).to(dtype).to(DEVICE)
    if numel > 10:
        x[numel // 3] = math.nan
        x[numel // 2] = math.inf
    row = fused_stats.fused_row(x)
    assert row is not None
    raw, fp = fused_stats.raw_of(row.cpu().tolist())
    expected = tensor_stats(x)
    expected = DeviceStats.gather([expected])[0][0] if isinstance(expected, DeviceStats) else expected
    assert _same(raw[0], expected[0]) and _same(raw[1], expected[1])
    assert raw[4:] == expected[4:]
    reference = fingerprint(x)
    assert wrap_fingerprint(fp) == wrap_fingerprint(int(reference))  # type: ignore[arg-type]
    for got, want in zip(raw[2:4], expected[2:4], strict=True):
        assert _same(got, want) or got == pytest.approx(want, rel=1e-4, abs=1e-3)


@pytest.mark.skipif(DEVICE == "cpu", reason="the tracer takes the fused path for CUDA tensors only")
def test_a_hook_on_the_gpu_queues_one_row_with_its_fingerprint() -> None:
    x = torch.randn(2, 64, 32, 32, device="cuda")
    stats, fp = hook_stats(x)
    assert isinstance(stats, DeviceStats) and stats.row is not None and fp is IN_ROW
    assert hook_stats(x, False)[1] is None
