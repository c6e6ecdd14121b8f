"""The hook's statistics: the C pass, the numpy path and the torch path agree, and the fingerprint sees one flipped
bit."""

from __future__ import annotations

import math
import shutil
import sys

import numpy as np
import pytest
import torch

from ghostviewer.engine.tracing import stats as stats_module
from ghostviewer.engine.tracing.stats import (
    DeviceStats,
    device_stats,
    fingerprint,
    finish_stats,
    hook_stats,
    stats_and_fingerprint,
    tensor_stats,
)
from ghostviewer.record.types import same_fingerprint, wrap_fingerprint


@pytest.fixture(params=["C", "numpy"])
def fast_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: with the C extension (skipped where it is not built) and with the numpy path."""
    if request.param == "C" and stats_module._f32_stats is None:
        pytest.skip("the C extension is not built here")
    if request.param == "numpy":
        monkeypatch.setattr(stats_module, "_f32_stats", None)
        monkeypatch.setattr(stats_module, "_f32_finished", None)
    return request.param


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler here")
def test_the_c_extension_is_built_where_a_compiler_is() -> None:
    assert stats_module._f32_stats is not None, (
        "pip install -e . should have built ghostviewer/engine/tracing/_fast_stats.c")


@pytest.mark.skipif(stats_module._f32_stats is None, reason="the C extension is not built here")
def test_the_c_pass_refuses_no_memory_and_says_none_for_non_finite() -> None:
    f32_stats = stats_module._f32_stats

    def of(a: np.ndarray, fp: bool = True):  # noqa: ANN202
        return f32_stats(a.ctypes.data, a.size, fp)

    with pytest.raises(ValueError):
        f32_stats(0, 8, True)
    with pytest.raises(ValueError):
        of(np.zeros(0, np.float32))
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones(100, np.float32)
        x[77] = bad
        assert of(x) is None
    assert of(np.ones(5, np.float32), False)[4] is None
    if sys.byteorder == "little":
        assert of(np.ones(1, np.float32)) == (1.0, 1.0, 1.0, 1.0, 0x3F800000)


def test_tensors_the_c_pass_must_not_read_take_the_other_paths() -> None:
    """Non-contiguous views, other dtypes, empty tensors and subclasses: the same values as torch's own."""
    base = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))

    class Wrapped(torch.Tensor):
        pass

    negative = base._neg_view()  # a lazily negated view: its memory holds the un-negated values
    assert stats_and_fingerprint(negative, False)[0][:2] == tensor_stats(negative)[:2] == tensor_stats(-base)[:2]
    for x in (base[:, ::2], base.T, base.double(), base.half(), base[:0], base.as_subclass(Wrapped)):
        fast, fp = stats_and_fingerprint(x)
        slow = tensor_stats(x)
        assert fast[:2] == slow[:2] and fp == fingerprint(x)


@pytest.mark.parametrize("numel", [1, 7, 31, 32, 33, 384, 4096, 32768, 1 << 18])
def test_fast_paths_agree_with_torch(numel: int, fast_path: str) -> None:
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 3 + 1
    fast, fp_fast = stats_and_fingerprint(x)
    slow, fp_slow = tensor_stats(x), fingerprint(x)
    assert isinstance(fast, list) and isinstance(slow, list)
    assert fast[0] == slow[0] and fast[1] == slow[1]  # min, max: exact
    assert fast[2] == pytest.approx(slow[2], rel=1e-4, abs=1e-3)  # sums: the last float32 bits may differ
    assert fast[3] == pytest.approx(slow[3], rel=1e-5)
    assert fp_fast == fp_slow
    stats = finish_stats(fast, numel)
    assert stats["mean"] == pytest.approx(float(x.double().mean()), rel=1e-4, abs=1e-4)
    if numel > 1:
        assert stats["std"] == pytest.approx(float(x.double().std()), rel=1e-3)


def test_fingerprint_sees_one_bit_a_swap_and_an_ulp_pair_and_wraps_at_32_bits(fast_path: str) -> None:
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(1)).abs() + 0.5
    changed = {"one bit": x.clone(), "swap": x.clone(), "ulp pair": x.clone()}
    changed["one bit"].view(torch.int32)[1234] ^= 1  # the lowest mantissa bit of one element
    changed["swap"][[3, 7000]] = x[[7000, 3]]  # a plain sum of the bits would not see these two
    changed["ulp pair"].view(torch.int32)[10] += 1
    changed["ulp pair"].view(torch.int32)[20] -= 1
    for name, y in changed.items():
        assert stats_and_fingerprint(y)[1] != stats_and_fingerprint(x)[1], name
        assert fingerprint(y) != fingerprint(x), name
    big = torch.randn(300_000, generator=torch.Generator().manual_seed(2))  # over the fast paths' size: torch
    assert fingerprint(big) == stats_and_fingerprint(big)[1]
    assert fingerprint(x) == stats_and_fingerprint(x)[1]  # numpy and torch agree
    for value in (fingerprint(x), fingerprint(big), fingerprint(big.double()), fingerprint(big.half())):
        assert isinstance(value, int) and -(2**31) <= value < 2**31
    # Older records kept a plain 64-bit sum: equal to its 32-bit wrap modulo 2**32 (compare then goes by kind).
    old = int(big.view(torch.int32).sum(dtype=torch.int64))
    assert same_fingerprint(old, wrap_fingerprint(old)) and -(2**31) <= wrap_fingerprint(old) < 2**31


def test_non_finite_tensors_are_counted(fast_path: str) -> None:
    x = torch.ones(300)
    x[3], x[7], x[9] = math.nan, math.inf, -math.inf
    raw, fp = stats_and_fingerprint(x)
    stats = finish_stats(list(raw), x.numel())  # type: ignore[arg-type]
    assert stats["nan_count"] == 1 and stats["inf_count"] == 2
    assert math.isnan(stats["mean"]) and isinstance(fp, int)


def test_huge_finite_values_take_the_torch_path_without_overflow(fast_path: str) -> None:
    x = torch.full((1000,), 3e30)
    raw, _ = stats_and_fingerprint(x)
    assert raw[0] == pytest.approx(3e30) and raw[4] == 0 and raw[5] == 0
    assert np.isfinite(raw[2])


@pytest.mark.parametrize("numel", [1, 2, 31, 33, 4096, 1 << 18, (1 << 18) + 1])
def test_what_a_hook_queues_is_finished_as_the_harvest_would_to_the_last_bit(numel: int, fast_path: str) -> None:
    """The C pass finishes the statistics itself: the same values finish_columns makes of the raw sums."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 5 - 2
    queued, fp = hook_stats(x)
    raw, raw_fp = stats_and_fingerprint(x)
    assert fp == raw_fp
    expected = finish_stats(list(raw), numel)  # type: ignore[arg-type]
    if isinstance(queued, tuple):  # finished by the C pass
        assert fast_path == "C"  # any size (stats._C_MAX_NUMEL)
        assert dict(zip(("min", "max", "mean", "std", "absmax", "nan_count", "inf_count"), queued,
                        strict=True)) == expected
    else:
        assert queued == raw
    for bad in (math.nan, math.inf):  # not finite: raw sums with their counts, whatever the path
        y = x.clone()
        y[numel // 2] = bad
        queued, _ = hook_stats(y)
        assert isinstance(queued, list) and finish_stats(queued, numel)["nan_count" if bad != math.inf else
                                                                        "inf_count"] == 1


def test_a_harvest_of_finished_and_raw_outputs_gives_each_its_finished_statistics(fast_path: str) -> None:
    """Finished tuples (the C pass), raw sums (half precision, a strided view, a NaN) and, on a GPU, the fused
    kernel's rows and torch's loose reductions (float64) in one step: each row as finish_stats makes of its own raw
    sums, in queue order (the GPU's sums as float32 allows: the fused kernel adds in float64)."""
    from ghostviewer.engine.tracing.tracer import StepBatch, Tracer

    g = torch.Generator().manual_seed(5)
    outputs = [torch.randn(2, 8, 4, 4, generator=g), torch.randn(64, generator=g).half(),
               torch.randn(16, 16, generator=g).T, torch.randn(300, generator=g)]
    outputs[3][5] = math.nan
    outputs.append(torch.randn(7, generator=g) * 1e3)
    if torch.cuda.is_available():
        gpu = [torch.randn(1000, generator=g), torch.randn(4, 50, generator=g).half(), torch.randn(90, generator=g)]
        gpu[2][7] = math.nan
        outputs += [x.cuda() for x in gpu] + [torch.randn(33, generator=g, dtype=torch.float64).cuda()]
    pending = [(f"m{i}", "denoise", 0, 0, i, tuple(x.shape), str(x.dtype), *hook_stats(x))
               for i, x in enumerate(outputs)]
    columns = Tracer.harvest(StepBatch(pending, {})).columns
    assert columns.module == [f"m{i}" for i in range(len(outputs))]
    for i, x in enumerate(outputs):
        raw, fp = stats_and_fingerprint(x)
        raw = DeviceStats.gather([raw])[0][0] if isinstance(raw, DeviceStats) else raw
        expected = finish_stats(raw, x.numel())
        got = {name: getattr(columns, name)[i] for name in expected}
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            if x.is_cuda and name in ("mean", "std") and not math.isnan(value):
                assert got[name] == pytest.approx(value, rel=1e-4, abs=1e-5), (i, name)
            else:
                assert got[name] == value or (math.isnan(got[name]) and math.isnan(value)), (i, name)
        assert columns.fingerprint[i] == (fp if isinstance(fp, int) else wrap_fingerprint(int(fp)))


def test_the_accelerators_path_gives_the_cpu_values_and_gathers_many_outputs_at_once() -> None:
    """device_stats (what a GPU output gets) on CPU tensors: float32 exactly as tensor_stats, half precision reduced
    without a float32 copy (its sum of squares from the float32 norm), NaN and Inf counted."""
    g = torch.Generator().manual_seed(9)
    x32 = torch.randn(5000, generator=g) * 4
    x16 = torch.randn(3000, generator=g).half() * 100
    bad = torch.randn(50, generator=g)
    bad[3], bad[4], bad[40] = math.nan, math.inf, -math.inf
    gathered = [raw for raw, _ in DeviceStats.gather([device_stats(x32), device_stats(x16), device_stats(bad)])]
    assert gathered[0] == tensor_stats(x32)
    expected16 = tensor_stats(x16)
    assert gathered[1][:2] == expected16[:2] and gathered[1][4:] == [0.0, 0.0]
    assert gathered[1][2] == pytest.approx(expected16[2], rel=1e-5)
    assert gathered[1][3] == pytest.approx(expected16[3], rel=1e-5)
    assert gathered[2][4:] == [1.0, 2.0] and math.isnan(gathered[2][2])
    assert DeviceStats.gather([]) == []


@pytest.mark.skipif(stats_module._f32_stats is None, reason="the C extension is not built here")
def test_the_c_pass_gives_the_same_values_whatever_the_vector_width_the_cpu_allows() -> None:
    """8-float (AVX2) and 4-float vectors keep the same 32 lanes: a run's statistics do not depend on the CPU."""
    from ghostviewer.engine.tracing import _fast_stats

    in_use = _fast_stats.vector_width(0)
    if _fast_stats.vector_width(8) != 8:
        pytest.skip("this CPU has no AVX2: one width only")
    g = np.random.default_rng(4)
    try:
        for n in (1, 31, 32, 33, 1000, 4097, 70_001, 1 << 18):
            a = (g.standard_normal(n) * 7 + 2).astype(np.float32)
            results = []
            for width in (4, 8):
                assert _fast_stats.vector_width(width) == width
                results.append((_fast_stats.f32_stats(a.ctypes.data, n, True),
                                _fast_stats.f32_finished(a.ctypes.data, n, True)))
            assert results[0] == results[1], n
            a[n // 2] = np.nan
            for width in (4, 8):
                _fast_stats.vector_width(width)
                assert _fast_stats.f32_finished(a.ctypes.data, n, True) is None
    finally:
        _fast_stats.vector_width(in_use)
