"""A byte count in words ("512 bytes", "3.4 MiB"), for what the record says about its folders and bundles."""

from __future__ import annotations


def size_words(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KiB", "MiB"):
        if value < 1024:
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
