"""Run settings: everything needed to re-create a run exactly, validated with messages a user can act on."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ghostviewer.engine.errors import GhostError

MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class RunSettings:
    prompt: str
    negative_prompt: str = ""
    seed: int = 0
    steps: int = 20
    guidance: float = 7.5
    width: int | None = None  # None: the pipeline's native size
    height: int | None = None
    scheduler: str | None = None  # None: the pipeline's own
    device: str = "auto"
    dtype: str | None = None
    bypass: tuple[str, ...] = ()
    capture: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    trace_depth: str = "block"
    capture_attention: bool = False  # cross-attention maps per token and self-attention entropy, every step
    source: str = "demo"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("bypass", "capture", "faults"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSettings:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("bypass", "capture", "faults"):
            values[key] = tuple(values.get(key) or ())
        return cls(**values)


def resolve_seed(seed: int | None) -> tuple[int, str | None]:
    """-1 (or None) means "pick one", as in A1111: return the seed actually used and a note saying so."""
    if seed is None or seed == -1:
        chosen = random.SystemRandom().randrange(0, 2**32)
        return chosen, f"seed -1 means random: using seed {chosen}"
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise GhostError(f"seed must be a whole number, not {seed!r}")
    if seed < 0 or seed > MAX_SEED:
        raise GhostError(f"seed must be between 0 and {MAX_SEED} (or -1 for a random one), not {seed}")
    return seed, None


def validate(settings: RunSettings) -> None:
    if not isinstance(settings.prompt, str):
        raise GhostError("the prompt must be text")
    if not isinstance(settings.steps, int) or settings.steps < 1:
        raise GhostError(f"steps must be at least 1, not {settings.steps}")
    if settings.steps > 1000:
        raise GhostError(f"steps must be at most 1000, not {settings.steps}")
    if settings.guidance < 0:
        raise GhostError(f"guidance must not be negative, not {settings.guidance}")
    for name in ("width", "height"):
        value = getattr(settings, name)
        if value is not None and (value < 8 or value % 8):
            raise GhostError(f"{name} must be a positive multiple of 8, not {value}")
    if settings.trace_depth not in ("block", "leaf"):
        raise GhostError(f"trace depth must be 'block' or 'leaf', not {settings.trace_depth!r}")
