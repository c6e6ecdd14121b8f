"""Memory readings for the step records: CUDA allocated/peak where a GPU runs the pipeline, process RSS otherwise."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil
import torch

_STATM: tuple[int, int] | None = None  # (pid, fd of /proc/self/statm), reopened in a forked child
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class MemoryReading:
    used: int
    peak: int | None
    kind: str  # 'cuda' or 'rss'


def read_memory(device: str) -> MemoryReading:
    if device.startswith("cuda") and torch.cuda.is_available():
        return MemoryReading(torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(), "cuda")
    return MemoryReading(_rss(), None, "rss")


def _rss() -> int:
    """The process's resident set size. On Linux one pread of /proc/self/statm on a kept descriptor (~1 µs;
    psutil opens and parses the file each time, ~10 µs, and a step reads it once); psutil elsewhere."""
    global _STATM
    pid = os.getpid()
    try:
        if _STATM is None or _STATM[0] != pid:
            _STATM = (pid, os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_STATM[1], 128, 0).split()[1]) * _PAGE
    except (OSError, AttributeError, IndexError, ValueError):
        return psutil.Process().memory_info().rss


def reset_peak(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
