"""Delta debugging: a 1-minimal failing subset, found with few tests, none repeated, the known ends never re-run."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from ghostviewer.analysis.ddmin import _split, ddmin


def _oracle(culprits: set[int]) -> tuple[Callable[[list[int]], bool], list[list[int]]]:
    """Fails when every culprit is present (a monotone failure); records each subset it was asked about."""
    calls: list[list[int]] = []

    def fails(subset: list[int]) -> bool:
        calls.append(list(subset))
        return culprits <= set(subset)

    return fails, calls


def test_split_into_nearly_equal_ordered_parts() -> None:
    assert _split(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert _split([1, 2], 4) == [[1], [2]]  # never an empty part


def test_one_culprit_among_eight_halves_down_to_it() -> None:
    fails, calls = _oracle({5})
    assert ddmin(list(range(8)), fails) == [5]
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [4, 5], [4], [5]]


def test_a_culprit_in_the_first_half_costs_one_test_per_halving() -> None:
    fails, calls = _oracle({0})
    assert ddmin(list(range(8)), fails) == [0]
    assert calls == [[0, 1, 2, 3], [0, 1], [0]]


def test_two_culprits_in_different_halves_are_found_by_complements() -> None:
    fails, calls = _oracle({3, 7})
    assert ddmin(list(range(8)), fails) == [3, 7]
    assert calls == [
        [0, 1, 2, 3], [4, 5, 6, 7],  # halves: neither fails alone
        [0, 1], [2, 3], [4, 5], [6, 7],  # quarters: neither
        [2, 3, 4, 5, 6, 7],  # a complement fails; [4, 5, 6, 7] was answered already and is not asked again
        [2, 3, 6, 7],
        [2], [3], [6], [7],
        [3, 6, 7], [3, 7],
    ]


def test_the_full_and_the_empty_set_are_never_tested() -> None:
    fails, calls = _oracle({1, 2, 3})
    assert ddmin([1, 2, 3], fails) == [1, 2, 3]  # every difference is needed
    assert [1, 2, 3] not in calls and [] not in calls


def test_trivial_inputs_need_no_test() -> None:
    fails, calls = _oracle({9})
    assert ddmin([9], fails) == [9]
    assert ddmin([], fails) == []
    assert calls == []


def test_the_order_of_the_differences_is_kept() -> None:
    units = ["scheduler", "dtype:unet", "steps", "guidance", "dtype:vae"]
    culprits = {"dtype:vae", "scheduler"}
    assert ddmin(units, lambda kept: culprits <= set(kept)) == ["scheduler", "dtype:vae"]


def test_a_non_monotone_failure_still_ends_1_minimal() -> None:
    def fails(subset: list[int]) -> bool:  # fails with 1 and 2 together, or 6 alone, but not all three
        s = set(subset)
        return ({1, 2} <= s or 6 in s) and not {1, 2, 6} <= s

    result = ddmin(list(range(8)), fails)
    assert fails(result)
    assert all(not fails([x for x in result if x != drop]) for drop in result)


@given(st.integers(1, 24).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=1))))
def test_a_monotone_failure_gives_exactly_its_culprits_and_no_repeated_test(case: tuple[int, set[int]]) -> None:
    n, culprits = case
    fails, calls = _oracle(culprits)
    assert ddmin(list(range(n)), fails) == sorted(culprits)
    keys = [frozenset(c) for c in calls]
    assert len(set(keys)) == len(keys) and frozenset(range(n)) not in keys and frozenset() not in keys
    if len(culprits) == 1 and n > 1:
        assert len(calls) <= 2 * (n - 1).bit_length()  # a single culprit: at most two tests per halving
