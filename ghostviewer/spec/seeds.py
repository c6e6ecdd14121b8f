"""Seed specs for sweeps and baselines: `0-99`, `1,5,9`, or a mix such as `0-9,42,100-104`."""

from __future__ import annotations

from collections.abc import Iterable

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
        if hi - lo + 1 > MAX_SEEDS:  # refused before anything is allocated for it
            raise SeedSpecError(f"{spec!r} names more than {MAX_SEEDS:,} seeds")
        seeds.update(dict.fromkeys(range(lo, hi + 1)))
        if len(seeds) > MAX_SEEDS:  # distinct seeds: a range repeating ones already named costs nothing
            raise SeedSpecError(f"{spec!r} names more than {MAX_SEEDS:,} seeds")
    return list(seeds)


def seed_list(seeds: Iterable[object]) -> list[int]:
    """Seeds given as a list (the API's `seeds=range(…)`): whole numbers only, at most MAX_SEEDS distinct, read
    one at a time so that a huge iterable is refused without being held."""
    found: dict[int, None] = {}
    for seed in seeds:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise SeedSpecError(f"seeds must be whole numbers, not {seed!r}")
        if not 0 <= seed <= MAX_SEED:
            raise SeedSpecError(f"seeds must lie in 0..{MAX_SEED}, not {seed}")
        found[seed] = None
        if len(found) > MAX_SEEDS:
            raise SeedSpecError(f"more than {MAX_SEEDS:,} seeds")
    if not found:
        raise SeedSpecError("a seed spec is needed, e.g. 0-99 or 1,5,9")
    return list(found)
