"""Tensor statistics computed on the tensor's own device, gathered to the host once per step.

On a GPU, each output's statistics and fingerprint take one kernel launch where Triton is there (fused_stats.py);
elsewhere `tensor_stats` leaves the reductions' 0-d results on the device (seven launches, two more for the
fingerprint: a tiny model on a fast GPU is bound by kernel launches). Either way they stay there (DeviceStats) until
the tracer gathers a step's in a few small transfers. On the CPU there is no transfer to save, so the values come
back at once and the NaN/Inf counts are only computed when min or max is not finite.

Mean and std come from the sum and the sum of squares (torch's own std_mean is a slow single-pass kernel on
CPU: 70 µs on a 12k-element tensor against 6 µs here). The price: std loses precision when a tensor's mean is
more than ~1e3 times its std. Values are over all elements, so a tensor holding NaN has NaN min/max/mean/std.

Float32 CPU tensors are reduced in one pass by the C extension (_fast_stats.c: ~2 µs for 4k elements, against ~7 µs
for six numpy reductions and ~20 µs for torch's), whatever their size: on a real-size model's outputs (655k to 8M
floats at 256 px) one pass over memory costs a tenth of torch's five, threads and all (8M floats: 6.5 ms of CPU
against 64 on 2 shared cores). Where it is not built, tensors of up to 256k elements (most block outputs of a
small model) go through numpy on a zero-copy view: a reduction there costs ~1 µs against torch's ~3 µs per op, which
is most of a hook's cost at these sizes. Only finite tensors of moderate magnitude take those paths (no float
warnings); the rest, and larger tensors without the C pass, stay on torch. Either way a given
tensor always gets the same values on one build. On the numpy path the sum is a BLAS dot with a vector of ones (32k
elements: 1.8 against 5.2 µs for numpy's own float32 sum) and the fingerprint a position-weighted sum in int32,
wrapping (5 µs; numpy's int64 accumulation of a plain sum took 8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ghostviewer.engine.tracing import fused_stats
from ghostviewer.record.types import wrap_fingerprint

FP16_MAX = 65504.0
RAW_FIELDS = ("min", "max", "sum", "sumsq", "nan_count", "inf_count")
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_NUMPY_MAX_NUMEL = 1 << 18  # numpy beat torch's CPU reductions up to here (2 cores: 49k elements 17 µs vs 34)
_C_MAX_NUMEL = 1 << 31  # the C pass: any size (its fingerprint weights wrap at 32 bits like torch's)
_NUMPY_MAX_ABS = 1e16  # below this, the sum of squares of up to _NUMPY_MAX_NUMEL floats cannot overflow float32
_INT32 = np.dtype(np.int32)
_ONES = np.ones(_NUMPY_MAX_NUMEL, np.float32)  # sum(a) as dot(a, ones): BLAS beats numpy's pairwise sum
_WEIGHTS = (2 * np.arange(_NUMPY_MAX_NUMEL, dtype=np.int64) + 1).astype(np.int32)  # the fingerprint's, 2i + 1
_TORCH_WEIGHTS: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

try:  # the optional C extension (setup.py); a build without a C compiler takes the numpy path
    from ghostviewer.engine.tracing._fast_stats import f32_finished as _f32_finished
    from ghostviewer.engine.tracing._fast_stats import f32_stats as _f32_stats
except ImportError:
    _f32_stats = _f32_finished = None
# Tensors whose data_ptr() is their own float32 memory (a subclass may wrap or fake it: it takes the other paths).
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _weights(device: torch.device, dtype: torch.dtype, n: int) -> torch.Tensor:
    """2i + 1 for i < n (wrapping like the integers they multiply), cached per device and grown as needed."""
    key = (device, dtype)
    cached = _TORCH_WEIGHTS.get(key)
    if cached is None or cached.numel() < n:
        cached = _TORCH_WEIGHTS[key] = (2 * torch.arange(n, dtype=torch.int64, device=device) + 1).to(dtype)
    return cached[:n]


@torch.no_grad()
def fingerprint(x: torch.Tensor) -> torch.Tensor | int | None:
    """The tensor's bit patterns read as integers, each times its position's odd weight 2i + 1, summed, wrapping at
    32 bits (signed; record.types.FINGERPRINT_KIND): changes when any element changes by one bit, and — unlike a
    plain sum — when two elements swap or one goes up an ulp while another goes down one. With the statistics it
    tells "bit-identical" from "close". A 0-d device tensor on accelerators (gathered with the step), an int on
    the CPU."""
    bits = _BITS.get(x.element_size())
    if bits is None or x.is_complex():
        return None
    flat = x.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return 0
    ints = flat.view(bits)
    # Integer products and sums wrap the same whatever the order, so every path (numpy, torch, any device) agrees.
    wide = torch.int64 if bits is torch.int64 else torch.int32
    weighted = ints.to(wide) * _weights(flat.device, wide, flat.numel())
    total = weighted.sum(dtype=wide)
    if flat.device.type != "cpu":
        return total  # stacked with the step's others (int32 and int64 stack as int64) and wrapped when gathered
    return wrap_fingerprint(int(total))


class _InRow:
    """The fingerprint hook_stats hands over for an output whose DeviceStats row holds it (the fused kernel's)."""

    def __repr__(self) -> str:
        return "IN_ROW"


IN_ROW: Any = _InRow()


@dataclass(frozen=True, slots=True)
class DeviceStats:
    """Raw stats of one output still on its accelerator: the fused kernel's row (fused_stats.py: min, max, sum,
    sumsq, counts and fingerprint), or the 0-d tensors torch's reductions left (packing them would cost launches of
    their own). The tracer gathers a step's to the host together (Tracer.harvest).
    `norm`: the fourth float is the 2-norm (half precision outputs, reduced in float32 without a float32 copy), to
    square on the host; else the sum of squares."""

    floats: tuple[torch.Tensor, ...] = ()  # min, max, sum, sumsq (or norm)
    counts: tuple[torch.Tensor, ...] = ()  # nan, inf
    norm: bool = False
    row: torch.Tensor | None = None

    @staticmethod
    def gather(stats: list[DeviceStats]) -> list[tuple[list[float], int | None]]:
        """Raw stats (RAW_FIELDS) of many outputs, each with the fingerprint its row holds (else None): a few
        small transfers whatever their number."""
        if not stats:
            return []
        rows = [d.row for d in stats if d.row is not None]
        loose = [d for d in stats if d.row is None]
        gathered_rows = iter(_stack_to_host(rows, rows[0].device if rows else None))
        floats = _stack_to_host([v for d in loose for v in d.floats], loose[0].floats[0].device if loose else None)
        counts = _stack_to_host([v for d in loose for v in d.counts], loose[0].floats[0].device if loose else None)
        out: list[tuple[list[float], int | None]] = []
        k = 0
        for d in stats:
            if d.row is not None:
                out.append(fused_stats.raw_of(next(gathered_rows)))
                continue
            lo, hi, total, fourth = floats[4 * k: 4 * k + 4]
            out.append(([lo, hi, total, fourth * fourth if d.norm else fourth, float(counts[2 * k]),
                         float(counts[2 * k + 1])], None))
            k += 1
        return out


def _stack_to_host(tensors: list[torch.Tensor], device: torch.device | None) -> list[Any]:
    return torch.stack([t.to(device) for t in tensors]).cpu().tolist() if tensors else []


_HALF = (torch.float16, torch.bfloat16)


@torch.no_grad()
def tensor_stats(x: torch.Tensor) -> DeviceStats | list[float]:
    """Raw stats (RAW_FIELDS): a list of floats on the CPU; on accelerators a DeviceStats, from seven kernel
    launches (half precision outputs reduced as they are, without a float32 copy)."""
    xf = x.detach()
    if xf.dtype != torch.float32 and not (xf.dtype in _HALF and xf.device.type != "cpu"):
        xf = xf.float()
    flat = xf.reshape(-1)
    if flat.numel() == 0:
        return [0.0] * 6
    lo, hi = torch.aminmax(flat)
    if flat.device.type == "cpu":
        values = torch.stack([lo, hi, flat.sum(), torch.dot(flat, flat)]).tolist()
        if math.isfinite(values[0]) and math.isfinite(values[1]):
            return [*values, 0.0, 0.0]
        return [*values, float(torch.isnan(flat).sum()), float(torch.isinf(flat).sum())]
    return device_stats(flat, (lo, hi))


def device_stats(flat: torch.Tensor, extremes: tuple[torch.Tensor, torch.Tensor] | None = None) -> DeviceStats:
    """The accelerators' path of tensor_stats for a flat float32 or half precision tensor (any device)."""
    lo, hi = extremes if extremes is not None else torch.aminmax(flat)
    half = flat.dtype is not torch.float32
    fourth = torch.linalg.vector_norm(flat, dtype=torch.float32) if half else torch.dot(flat, flat)
    return DeviceStats((lo, hi, flat.sum(dtype=torch.float32), fourth),
                       (torch.isnan(flat).sum(), torch.isinf(flat).sum()), half)


def stats_and_fingerprint(x: torch.Tensor, with_fingerprint: bool = True
                          ) -> tuple[DeviceStats | list[float], torch.Tensor | int | None]:
    """(tensor_stats(x), fingerprint(x)): what a hook records. A small, contiguous, finite float32 CPU tensor of
    moderate magnitude is reduced in one pass of the C extension over its memory (numpy's reductions on a zero-copy
    view where it is not built): min, max and fingerprint as torch's, the sums may differ from torch's in the last
    float32 bits; anything else takes the torch functions.
    `with_fingerprint=False` (sweeps): the fingerprint is None and not computed (about a third of the cost)."""
    numel = x.numel()
    limit = _C_MAX_NUMEL if _f32_stats is not None else _NUMPY_MAX_NUMEL
    if (x.dtype is torch.float32 and x.is_cpu and 0 < numel <= limit and x.layout is torch.strided
            and x.is_contiguous()):
        if _f32_stats is not None and type(x) in _PLAIN_TENSORS and not x.is_neg():
            # One pass in C over the tensor's own memory (_fast_stats.c); None: not all finite. A tensor without
            # plain memory of its own (a functorch wrapper) raises on data_ptr(): torch's functions then.
            try:
                fast = _f32_stats(x.data_ptr(), numel, with_fingerprint)
            except (RuntimeError, ValueError):
                fast = None
            if fast is not None and -_NUMPY_MAX_ABS < fast[0] <= fast[1] < _NUMPY_MAX_ABS:
                return [fast[0], fast[1], fast[2], fast[3], 0.0, 0.0], fast[4]
            return tensor_stats(x), fingerprint(x) if with_fingerprint else None
        if numel > _NUMPY_MAX_NUMEL:  # a tensor the C pass would not read (a subclass, a negative view)
            return tensor_stats(x), fingerprint(x) if with_fingerprint else None
        try:
            arr = x.detach().numpy().reshape(-1)
        except (TypeError, RuntimeError):  # a tensor numpy cannot view (a subclass, a negative view)
            arr = None
        if arr is not None:
            lo, hi = float(np.minimum.reduce(arr)), float(np.maximum.reduce(arr))
            if -_NUMPY_MAX_ABS < lo <= hi < _NUMPY_MAX_ABS:  # NaN fails this too; no float warnings below
                fp = None
                if with_fingerprint:
                    ints = arr.view(np.int32)  # products and sum wrap like torch's int32 ones
                    fp = int(np.add.reduce(ints * _WEIGHTS[: ints.size], dtype=_INT32))
                total = float(np.dot(arr, _ONES[: arr.size]))
                return [lo, hi, total, float(np.dot(arr, arr)), 0.0, 0.0], fp
    return tensor_stats(x), fingerprint(x) if with_fingerprint else None


def hook_stats(x: torch.Tensor, with_fingerprint: bool = True
               ) -> tuple[tuple[float, float, float, float, float, int, int] | DeviceStats | list[float],
                          torch.Tensor | int | None]:
    """What a tracer hook queues for one output: where the C pass can read it, its statistics already finished (a
    tuple: min, max, mean, std, absmax, nan_count, inf_count — the values finish_columns gives, to the last bit);
    anything else as stats_and_fingerprint's raw sums (a list, or a DeviceStats), finished with the step's others
    by finish_columns (one gathering from the device)."""
    if _f32_finished is not None and x.dtype is torch.float32 and x.is_cpu and type(x) in _PLAIN_TENSORS:
        numel = x.numel()
        if 0 < numel <= _C_MAX_NUMEL and x.layout is torch.strided and x.is_contiguous() and not x.is_neg():
            try:
                fast = _f32_finished(x.data_ptr(), numel, with_fingerprint)
            except (RuntimeError, ValueError):  # no plain memory of its own (a functorch wrapper)
                fast = None
            if fast is not None and -_NUMPY_MAX_ABS < fast[0][0] <= fast[0][1] < _NUMPY_MAX_ABS:
                return fast
            return tensor_stats(x), fingerprint(x) if with_fingerprint else None  # not finite, or too large
    if not x.is_cpu and fused_stats.available(x):
        row = fused_stats.fused_row(x)
        if row is not None:
            return DeviceStats(row=row), IN_ROW if with_fingerprint else None
    return stats_and_fingerprint(x, with_fingerprint)


def finish_stats(raw: list[float], numel: int) -> dict[str, float]:
    """Host-side: min, max, mean, std (unbiased), absmax and the counts from the raw sums (one output)."""
    return {name: values[0] for name, values in finish_columns([raw], [numel]).items()}


def finish_columns(raw: list[list[float]], numel: list[int]) -> dict[str, list[Any]]:
    """finish_stats for many outputs at once (numpy, float64): lists 'min', 'max', 'mean', 'std', 'absmax',
    'nan_count', 'inf_count'. Every operation is IEEE-rounded like Python's floats, so values are those a
    per-output computation gives. std is NaN when the sums are not finite, 0 for a single element."""
    if not raw:
        return {name: [] for name in ("min", "max", "mean", "std", "absmax", "nan_count", "inf_count")}
    values = np.asarray(raw, dtype=np.float64).reshape(len(raw), len(RAW_FIELDS))
    n = np.asarray(numel, dtype=np.float64)
    lo, hi, total, sumsq = values[:, 0], values[:, 1], values[:, 2], values[:, 3]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mean = np.where(n > 0, total / np.maximum(n, 1.0), 0.0)
        spread = np.maximum(sumsq / np.maximum(n, 1.0) - mean * mean, 0.0) * n / np.maximum(n - 1.0, 1.0)
        std = np.where(n > 1, np.where(np.isfinite(sumsq) & np.isfinite(mean), np.sqrt(spread), np.nan), 0.0)
        magnitude = np.maximum(np.abs(lo), np.abs(hi))
    magnitude[np.isnan(lo) | np.isnan(hi)] = np.nan
    return {
        "min": lo.tolist(),
        "max": hi.tolist(),
        "mean": mean.tolist(),
        "std": std.tolist(),
        "absmax": magnitude.tolist(),
        "nan_count": values[:, 4].astype(np.int64).tolist(),
        "inf_count": values[:, 5].astype(np.int64).tolist(),
    }
