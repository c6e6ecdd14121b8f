"""One output's statistics and fingerprint in one GPU kernel launch (Triton), where Triton and a CUDA device are there.

Why: a small model on a fast GPU is bound by the CPU that launches its kernels, and the torch functions behind
stats.tensor_stats and stats.fingerprint are nine launches per traced output; block-depth tracing of the demo on an
H200 cost 1.8x an untraced run with them. Here one launch (two for outputs of more than SMALL elements) leaves a
row of seven float64 values on the device — min, max, sum, sum of squares, NaN count, Inf count, fingerprint — which
the tracer gathers with the step's others (stats.DeviceStats).

The values are the ones the other paths define (stats.py): min and max exact (NaN when any element is NaN, as
torch's), counts exact, the fingerprint exact (integer arithmetic wraps the same in any order); the sums are
accumulated in float64, in a fixed order, so a given tensor always gets the same values. float32, float16 and
bfloat16 outputs only; anything else, and any failure to compile or launch, takes the torch functions.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import torch

try:  # Triton comes with CUDA builds of torch on Linux; elsewhere the torch functions serve
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001 - an unusable Triton is no Triton
    triton = None

SMALL = 1 << 16  # up to here one program reads the whole output: one launch
BLOCK = 1024
MAX_PROGRAMS = 256  # larger outputs: this many programs' partial rows, reduced by a second launch
_MAX_NUMEL = (1 << 31) - (1 << 20)  # offsets stay in int32
_BITS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 1}  # 1: 16-bit patterns, sign-extended like torch's
_disabled = os.environ.get("GHOSTVIEWER_NO_TRITON", "") not in ("", "0") or triton is None


if triton is not None:

    @triton.jit
    def _partials(x_ptr, n, out_ptr, BLOCK: tl.constexpr, HALF: tl.constexpr):  # noqa: N803
        """Program p reduces chunks p, p + P, p + 2P... of x into row p of out (7 float64)."""
        pid = tl.program_id(0)
        programs = tl.num_programs(0)
        lanes = tl.arange(0, BLOCK)
        lo = tl.full([BLOCK], float("inf"), tl.float32)
        hi = tl.full([BLOCK], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK], tl.float64)
        squares = tl.zeros([BLOCK], tl.float64)
        nans = tl.zeros([BLOCK], tl.int64)
        infs = tl.zeros([BLOCK], tl.int64)
        fp = tl.zeros([BLOCK], tl.int32)
        for offset in range(pid * BLOCK, n, programs * BLOCK):  # int32 offsets: available() bounds n
            offs = offset + lanes
            mask = offs < n
            raw = tl.load(x_ptr + offs, mask=mask, other=0.0)
            x = raw.to(tl.float32)
            is_nan = x != x
            is_inf = (x == float("inf")) | (x == float("-inf"))
            lo = tl.minimum(lo, tl.where(mask & ~is_nan, x, float("inf")))
            hi = tl.maximum(hi, tl.where(mask & ~is_nan, x, float("-inf")))
            wide = x.to(tl.float64)
            total += wide
            squares += wide * wide
            nans += is_nan.to(tl.int64)
            infs += is_inf.to(tl.int64)
            if HALF:
                bits = raw.to(tl.int16, bitcast=True).to(tl.int32)
            else:
                bits = raw.to(tl.int32, bitcast=True)
            weight = 2 * offs + 1  # 2i + 1 in int32, wrapping like the integers it multiplies
            fp += tl.where(mask, bits * weight, 0)
        row = out_ptr + pid * 7
        tl.store(row + 0, tl.min(lo, axis=0).to(tl.float64))
        tl.store(row + 1, tl.max(hi, axis=0).to(tl.float64))
        tl.store(row + 2, tl.sum(total, axis=0))
        tl.store(row + 3, tl.sum(squares, axis=0))
        tl.store(row + 4, tl.sum(nans, axis=0).to(tl.float64))
        tl.store(row + 5, tl.sum(infs, axis=0).to(tl.float64))
        tl.store(row + 6, tl.sum(fp.to(tl.int64), axis=0).to(tl.float64))  # exact in float64: < 2**41

    @triton.jit
    def _combine(part_ptr, programs, out_ptr, ROWS: tl.constexpr):  # noqa: N803
        """The programs' partial rows into one (fingerprints summed in int64: wrapped to 32 bits when gathered)."""
        rows = tl.arange(0, ROWS)
        mask = rows < programs
        base = part_ptr + rows * 7
        tl.store(out_ptr + 0, tl.min(tl.load(base + 0, mask=mask, other=float("inf")), axis=0))
        tl.store(out_ptr + 1, tl.max(tl.load(base + 1, mask=mask, other=float("-inf")), axis=0))
        for k in range(2, 6):
            tl.store(out_ptr + k, tl.sum(tl.load(base + k, mask=mask, other=0.0), axis=0))
        fps = tl.load(base + 6, mask=mask, other=0.0).to(tl.int64)
        tl.store(out_ptr + 6, tl.sum(fps, axis=0).to(tl.float64))


def available(x: torch.Tensor) -> bool:
    """Whether `fused_row` can take this tensor: a contiguous float32/float16/bfloat16 CUDA tensor."""
    return (not _disabled and x.is_cuda and x.dtype in _BITS and x.layout is torch.strided and x.is_contiguous()
            and 0 < x.numel() < _MAX_NUMEL)


def fused_row(x: torch.Tensor) -> torch.Tensor | None:
    """The 7-value float64 row of x on its device, or None (then the torch functions, for good: a Triton that
    fails once is not asked again)."""
    global _disabled
    n = x.numel()
    half = _BITS[x.dtype]
    try:
        # Triton launches on the current device: switched only for a tensor on another one (the switch costs
        # microseconds a call; the CPU is Triton's interpreter, in tests).
        index = x.device.index
        switch = x.is_cuda and index is not None and index != torch.cuda.current_device()
        with torch.cuda.device(index) if switch else contextlib.nullcontext():
            if n <= SMALL:
                out = torch.empty(7, dtype=torch.float64, device=x.device)
                _partials[(1,)](x, n, out, BLOCK=BLOCK, HALF=half)
                return out
            programs = min(MAX_PROGRAMS, triton.cdiv(n, BLOCK))
            buffer = torch.empty(programs * 7 + 7, dtype=torch.float64, device=x.device)
            _partials[(programs,)](x, n, buffer, BLOCK=BLOCK, HALF=half)
            out = buffer[programs * 7:]
            _combine[(1,)](buffer, programs, out, ROWS=triton.next_power_of_2(programs))
            return out
    except Exception as exc:  # noqa: BLE001 - no compiler, an old GPU, a Triton bug: the torch functions
        _disabled = True
        logging.getLogger(__name__).warning("GPU statistics kernel not usable, torch functions instead: %s", exc)
        return None


def raw_of(row: list[float]) -> tuple[list[float], int]:
    """A gathered row as stats.RAW_FIELDS values and the fingerprint (not yet wrapped to 32 bits)."""
    lo, hi, total, squares, nans, infs, fp = row
    if nans:  # torch's min and max are NaN when any element is
        lo = hi = float("nan")
    return [lo, hi, total, squares, nans, infs], int(fp)


def describe() -> dict[str, Any]:
    """For a GPU run's environment record: whether its statistics come from this kernel or from torch's functions."""
    return {"gpu_statistics": "triton kernel" if not _disabled else "torch functions"}
