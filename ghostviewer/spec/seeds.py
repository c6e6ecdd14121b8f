"""Seed specs for sweeps and baselines: `0-99`, `1,5,9`, or a mix such as `0-9,42,100-104`."""

from __future__ import annotations

from ghostviewer.spec.errors import SpecError

MAX_SEED = 2**63 - 1
MAX_SEEDS = 1_000_000  # a spec expanding to more is a typo, not a sweep


class SeedSpecError(SpecError):
    """A seed spec that cannot be read; the message is one line for the user."""


def parse_seeds(spec: str | int) -> list[int]:
    """The seeds a spec names, in the order written, duplicates dropped."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = str(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise SeedSpecError("a seed spec is needed, e.g. 0-99 or 1,5,9")
    seeds: dict[int, None] = {}
    for part in spec.replace(" ", "").split(","):
        if not part:
            raise SeedSpecError(f"empty item in seed spec {spec!r}")
        first, sep, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            raise SeedSpecError(f"bad seed {part!r} in {spec!r}: use N, A-B or a comma list") from None
        if lo < 0 or hi > MAX_SEED:
            raise SeedSpecError(f"seeds must lie in 0..{MAX_SEED}, not {part!r}")
        if hi < lo:
            raise SeedSpecError(f"the seed range {part!r} runs backwards")
        if len(seeds) + (hi - lo + 1) > MAX_SEEDS:
            raise SeedSpecError(f"{spec!r} names more than {MAX_SEEDS:,} seeds")
        seeds.update(dict.fromkeys(range(lo, hi + 1)))
    return list(seeds)
