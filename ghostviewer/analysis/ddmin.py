"""Delta debugging (Zeller and Hildebrandt's ddmin): the smallest set of differences that still fails.

Given the differences between a good and a bad configuration, `ddmin` looks for a 1-minimal subset that still
makes the test fail (removing any single element of it makes the failure go): it tries halves, then their
complements, then finer splits. The test is called only on subsets it has not seen; the full set is known to
fail (it is the bad run) and the empty set known to pass (the good run), so neither is ever re-run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


def _split(items: list[T], parts: int) -> list[list[T]]:
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        out.append(items[start:end])
        start = end
    return [part for part in out if part]


def ddmin(differences: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal failing subset of `differences` (kept in their order). `fails(subset)`: does it fail?"""
    seen: dict[frozenset[T], bool] = {frozenset(differences): True, frozenset(): False}

    def test(subset: list[T]) -> bool:
        key = frozenset(subset)
        if key not in seen:
            seen[key] = fails(subset)
        return seen[key]

    current, parts = list(differences), 2
    while len(current) >= 2:
        chunks = _split(current, parts)
        reduced = next((chunk for chunk in chunks if test(chunk)), None)
        if reduced is not None:
            current, parts = reduced, 2
            continue
        if parts > 2:  # with two chunks each complement is the other chunk, already tested
            complements = ([d for d in current if d not in chunk] for chunk in chunks)
            reduced = next((c for c in complements if test(c)), None)
            if reduced is not None:
                current, parts = reduced, max(parts - 1, 2)
                continue
        if parts >= len(current):
            break
        parts = min(len(current), parts * 2)
    return current
