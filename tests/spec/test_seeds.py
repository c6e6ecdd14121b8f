"""Seed specs: `0-99`, `1,5,9`, mixes; written order kept, duplicates dropped, every malformed spec one line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ghostviewer.spec import UserError
from ghostviewer.spec.seeds import MAX_SEED, MAX_SEEDS, SeedSpecError, parse_seeds


def test_ranges_lists_and_mixes() -> None:
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("1,5,9") == [1, 5, 9]
    assert parse_seeds("0-2,42,100-101") == [0, 1, 2, 42, 100, 101]
    assert parse_seeds(" 7 , 8 - 9 ") == [7, 8, 9]  # spaces anywhere are ignored
    assert parse_seeds("5-5") == [5]


def test_an_int_is_one_seed_and_the_order_written_is_kept() -> None:
    assert parse_seeds(7) == [7]
    assert parse_seeds(0) == [0]
    assert parse_seeds("9,3,3,0-4") == [9, 3, 0, 1, 2, 4]  # duplicates dropped where first seen


def test_the_ends_of_the_seed_range() -> None:
    assert parse_seeds(f"{MAX_SEED}") == [MAX_SEED]
    assert parse_seeds(f"{MAX_SEED - 1}-{MAX_SEED}") == [MAX_SEED - 1, MAX_SEED]
    with pytest.raises(SeedSpecError, match=rf"seeds must lie in 0..{MAX_SEED}"):
        parse_seeds(f"{MAX_SEED + 1}")


@pytest.mark.parametrize(("spec", "message"), [
    ("", "a seed spec is needed"),
    ("   ", "a seed spec is needed"),
    (True, "a seed spec is needed"),  # a bool is not a seed
    (None, "a seed spec is needed"),
    (1.5, "a seed spec is needed"),
    ("1,,2", "empty item in seed spec '1,,2'"),
    ("1,", "empty item"),
    ("x", "bad seed 'x' in 'x': use N, A-B or a comma list"),
    ("1-2-3", "bad seed '1-2-3'"),
    ("-1", "bad seed '-1'"),  # a minus sign reads as a range with no start
    (-5, "bad seed '-5'"),
    ("1-", "bad seed '1-'"),
    ("9-3", "the seed range '9-3' runs backwards"),
    (f"0-{MAX_SEEDS}", f"names more than {MAX_SEEDS:,} seeds"),
])
def test_malformed_specs_are_refused_in_one_line(spec: object, message: str) -> None:
    with pytest.raises(SeedSpecError, match=message) as caught:
        parse_seeds(spec)  # type: ignore[arg-type]
    assert isinstance(caught.value, UserError) and "\n" not in str(caught.value)


def test_exactly_max_seeds_is_allowed() -> None:
    assert len(parse_seeds(f"0-{MAX_SEEDS - 1}")) == MAX_SEEDS


def test_the_cap_counts_distinct_seeds() -> None:
    assert len(parse_seeds(f"0-{MAX_SEEDS - 1},5")) == MAX_SEEDS


def test_seeds_given_as_a_list_are_whole_numbers_read_one_at_a_time() -> None:
    from ghostviewer.spec.seeds import SeedSpecError, seed_list

    assert seed_list([3, 1, 3]) == [3, 1]
    with pytest.raises(SeedSpecError, match="whole numbers, not 2.5"):
        seed_list([1, 2.5])
    with pytest.raises(SeedSpecError, match="more than 1,000,000 seeds"):
        seed_list(range(10**12))  # refused after a million, never held whole


_ranges = st.lists(st.tuples(st.integers(0, 10**12), st.integers(0, 20)), min_size=1, max_size=6)


@settings(max_examples=50)
@given(_ranges)
def test_round_trip_of_written_ranges(ranges: list[tuple[int, int]]) -> None:
    spec = ",".join(str(lo) if width == 0 else f"{lo}-{lo + width}" for lo, width in ranges)
    expected = list(dict.fromkeys(s for lo, width in ranges for s in range(lo, lo + width + 1)))
    seeds = parse_seeds(spec)
    assert seeds == expected
    assert parse_seeds(",".join(map(str, seeds))) == seeds  # the expanded list reads back as itself


@settings(max_examples=50)
@given(st.text(max_size=20))
def test_any_text_gives_seeds_or_a_seed_spec_error(text: str) -> None:
    try:
        seeds = parse_seeds(text)
    except SeedSpecError:
        return
    assert seeds and all(0 <= s <= MAX_SEED for s in seeds)
