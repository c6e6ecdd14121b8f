"""Plain, immutable records stored in and read back from a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PHASES: tuple[str, ...] = ("encode", "denoise", "decode")
FP16_MAX = 65504.0


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
    fingerprint: int | None = None  # sum of the output's bit patterns: equal rows with equal sums are bit-identical

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
