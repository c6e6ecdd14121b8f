"""LoRA entries of a run (`RunSpec.adapters`): "FILE" or "FILE:SCALE", the scale a finite number (default 1.0).

A path may hold colons itself (a Windows drive letter, `C:\\loras\\x.safetensors`), so an entry is split on its
last colon only when what follows reads as a number. `x.safetensors:strong` is refused as a scale that is not a
number when `x.safetensors` is a file and the whole entry is not one. Standard library only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ghostviewer.spec.errors import SpecError

DEFAULT_LORA_SCALE = 1.0
LORA_SUFFIX = ".safetensors"


@dataclass(frozen=True)
class LoraEntry:
    path: str
    scale: float = DEFAULT_LORA_SCALE

    def text(self) -> str:
        """The entry as a RunSpec holds it once resolved: the scale always written, so the record says it."""
        return f"{self.path}:{self.scale!r}"


def parse_lora(entry: Any) -> LoraEntry:
    """One `--lora FILE[:SCALE]` entry; SpecError (one line) when it cannot be read."""
    if not isinstance(entry, str) or not entry.strip():
        raise SpecError(f"--lora takes FILE or FILE:SCALE, not {entry!r}")
    head, colon, tail = entry.rpartition(":")
    if colon and head and _number(tail) is not None:
        scale = _number(tail)
        assert scale is not None
        if not math.isfinite(scale):
            raise SpecError(f"--lora {entry}: the scale must be a finite number, not {tail}")
        return LoraEntry(head, scale)
    if colon and head and not os.path.exists(entry) and (os.path.isfile(head) or head.endswith(LORA_SUFFIX)):
        raise SpecError(f"--lora {entry}: the scale {tail!r} is not a number (FILE:SCALE, e.g. {head}:0.8)")
    return LoraEntry(entry)


def parse_loras(entries: Iterable[Any]) -> list[LoraEntry]:
    return [parse_lora(entry) for entry in entries]


def lora_entries(value: Any) -> tuple[str, ...]:
    """A prompt list's `lora` value as entries: a list of them, or one string ("a.safetensors:0.8;b.safetensors":
    several separated by ';')."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(";") if part.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SpecError(f"lora must be FILE[:SCALE] or a list of them, not {value!r}")


def check_loras(entries: Iterable[Any], fuse_lora: Any = False) -> None:
    """Every check of the LoRA entries that needs no pipeline: each readable as FILE[:SCALE], each file there."""
    if not isinstance(fuse_lora, bool):
        raise SpecError(f"fuse_lora must be true or false, not {fuse_lora!r}")
    if isinstance(entries, str) or not isinstance(entries, Iterable):
        raise SpecError(f"adapters must be a list of FILE[:SCALE] entries, not {entries!r}")
    parsed = parse_loras(entries)
    for lora in parsed:
        if not os.path.isfile(lora.path):
            raise SpecError(f"--lora {lora.path}: no such file" if not os.path.exists(lora.path)
                            else f"--lora {lora.path}: not a file (a LoRA is one .safetensors file)")
    seen = [os.path.abspath(lora.path) for lora in parsed]
    twice = next((path for path in seen if seen.count(path) > 1), None)
    if twice is not None:
        raise SpecError(f"--lora {twice} is given twice: give it once, with the scale you want")
    if fuse_lora and not parsed:
        raise SpecError("--fuse-lora needs a --lora FILE to fuse")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
