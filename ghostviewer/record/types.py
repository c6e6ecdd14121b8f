"""Plain, immutable records stored in and read back from a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PHASES: tuple[str, ...] = ("encode", "denoise", "decode")
PHASE_ORDER: dict[str, int] = {phase: i for i, phase in enumerate(PHASES)}  # rank in execution order
FP16_MAX = 65504.0
CALLBACK_LATENTS = "pipeline.callback_on_step_end"  # the latents a watched caller's step callback handed back
FINGERPRINT_MOD = 1 << 32
# How a run's fingerprints were made (environment["fingerprint"]): runs of different kinds compare by statistics.
# "weighted32": sum over i of bits[i] * (2i + 1), wrapping at 32 bits: swaps and +1/-1 pairs no longer cancel.
# "sum": the plain sum of the bit patterns (records without the key; 64-bit or wrapped, equal mod 2**32).
FINGERPRINT_KIND = "weighted32"
NO_FINGERPRINTS = "none"  # a run recorded without fingerprints (a sweep's, unless asked): compared by statistics


def wrap_fingerprint(value: int) -> int:
    """A fingerprint as recorded: the bit-pattern sum wrapped to a signed 32-bit integer."""
    value %= FINGERPRINT_MOD
    return value - FINGERPRINT_MOD if value >= FINGERPRINT_MOD // 2 else value


def same_fingerprint(a: int, b: int) -> bool:
    """Equal modulo 2**32: older records kept the sum in 64 bits; it now wraps at 32 (cheaper to compute)."""
    return (a - b) % FINGERPRINT_MOD == 0


@dataclass(frozen=True, slots=True)
class StatRow:
    """Summary statistics of one module output (one call of one module, in one phase/step)."""

    phase: str
    step: int | None
    module: str
    call: int
    seq: int
    shape: tuple[int, ...]
    dtype: str
    min: float
    max: float
    mean: float
    std: float
    absmax: float
    nan_count: int
    inf_count: int
    fingerprint: int | None = None  # its bit patterns summed (mod 2**32): equal sums, bit-identical outputs

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, not {self.phase!r}")
        if self.phase == "denoise" and self.step is None:
            raise ValueError("a 'denoise' stat needs a step")
        if self.phase != "denoise" and self.step is not None:
            raise ValueError(f"step must be None outside 'denoise' (phase {self.phase!r})")

    @property
    def fp16_headroom(self) -> float:
        """absmax as a fraction of the largest float16 value (>= 1.0 means it overflows float16)."""
        return self.absmax / FP16_MAX


@dataclass
class StatColumns:
    """Many StatRows column by column: what the tracer hands the recorder each step. A traced run makes hundreds
    of outputs a step; one object per output (and its checks) cost more than the statistics themselves."""

    phase: list[str] = field(default_factory=list)
    step: list[int | None] = field(default_factory=list)
    module: list[str] = field(default_factory=list)
    call: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    shape: list[tuple[int, ...]] = field(default_factory=list)
    dtype: list[str] = field(default_factory=list)
    min: list[float] = field(default_factory=list)
    max: list[float] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    absmax: list[float] = field(default_factory=list)
    nan_count: list[int] = field(default_factory=list)
    inf_count: list[int] = field(default_factory=list)
    fingerprint: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seq)

    def row(self, i: int) -> StatRow:
        return StatRow(
            self.phase[i], self.step[i], self.module[i], self.call[i], self.seq[i], self.shape[i], self.dtype[i],
            self.min[i], self.max[i], self.mean[i], self.std[i], self.absmax[i], self.nan_count[i],
            self.inf_count[i], self.fingerprint[i],
        )

    def rows(self) -> list[StatRow]:
        return [self.row(i) for i in range(len(self))]


@dataclass(frozen=True, slots=True)
class StepInfo:
    """One denoising step: scheduler position, wall time and memory (mem_kind 'cuda' or 'rss')."""

    index: int
    timestep: float | None
    sigma: float | None
    wall_s: float
    mem_before: int | None
    mem_after: int | None
    mem_peak: int | None
    mem_kind: str


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the run's event log; t is wall-clock time (seconds since the epoch)."""

    t: float
    level: str
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)
