"""Memory readings for the step records: CUDA allocated/peak where a GPU runs the pipeline, process RSS otherwise."""

from __future__ import annotations

from dataclasses import dataclass

import psutil
import torch

_PROCESS = psutil.Process()


@dataclass(frozen=True)
class MemoryReading:
    used: int
    peak: int | None
    kind: str  # 'cuda' or 'rss'


def read_memory(device: str) -> MemoryReading:
    if device.startswith("cuda") and torch.cuda.is_available():
        return MemoryReading(torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(), "cuda")
    return MemoryReading(_PROCESS.memory_info().rss, None, "rss")


def reset_peak(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
