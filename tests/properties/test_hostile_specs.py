"""Properties of hostile specs (issue 29): prompt lists (deep JSON, repeated columns, odd cells), seed specs (huge
ranges, fractions, huge iterables) and bypass specs (any text) are parsed into what they say or refused with the
spec's own one-line UserError — never another exception, never a memory blow-up — and the file read is unchanged."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.spec import UserError
from ghostviewer.spec.bypass import BypassSpec, BypassSpecError
from ghostviewer.spec.prompt_lists import PromptListError, read_prompt_list
from ghostviewer.spec.seeds import MAX_SEED, MAX_SEEDS, SeedSpecError, parse_seeds, seed_list

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_COLUMNS = st.sampled_from(["prompt", "negative", "seed", "steps", "guidance", "width", "prmpt", "", "prompt "])
_CELLS = st.one_of(st.text(max_size=12), st.sampled_from(["1e999", "nan", "-1", "7", "0.5", "\x00", '"', "a,b"]))


def _one_line(exc: BaseException) -> None:
    assert isinstance(exc, UserError) and str(exc).strip() and "\n" not in str(exc)


def _read(path: Path, error: type[Exception] = PromptListError) -> list[dict] | None:
    before = path.read_bytes()
    try:
        items = read_prompt_list(path)
    except error as exc:
        _one_line(exc)
        items = None
    assert path.read_bytes() == before
    if items is not None:
        assert all(isinstance(item["prompt"], str) for item in items)
    return items


# -- prompt lists -----------------------------------------------------------------------------------------
@FEW
@given(st.integers(1, 200_000), st.sampled_from(["[", "{\"prompt\": "]), st.booleans())
def test_deeply_nested_json_lists_are_refused_in_one_line(tmp_path_factory: pytest.TempPathFactory, depth: int,
                                                          opener: str, closed: bool) -> None:
    closer = "]" if opener == "[" else "}"
    text = opener * depth + ('"x"' + closer * depth if closed else "")
    path = tmp_path_factory.mktemp("deep") / "list.json"
    path.write_text(text)
    _read(path)


_JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(_COLUMNS, inner, max_size=3)), max_leaves=12)


@FEW
@given(st.lists(_JSON, max_size=5), st.sampled_from([".json", ".jsonl"]))
def test_json_lists_of_any_shape_parse_or_say_why(tmp_path_factory: pytest.TempPathFactory, items: list,
                                                  suffix: str) -> None:
    path = tmp_path_factory.mktemp("json") / f"list{suffix}"
    text = json.dumps(items) if suffix == ".json" else "\n".join(json.dumps(item) for item in items)
    path.write_text(text)
    _read(path)


@FEW
@given(st.lists(_COLUMNS, min_size=1, max_size=5), st.lists(st.lists(_CELLS, max_size=6), max_size=4))
def test_csv_lists_with_any_header_parse_or_say_why(tmp_path_factory: pytest.TempPathFactory, header: list[str],
                                                    rows: list[list[str]]) -> None:
    path = tmp_path_factory.mktemp("csv") / "list.csv"
    path.write_text("\n".join(",".join(line) for line in [header, *rows]) + "\n")
    items = _read(path)
    if items is not None:
        assert header.count("prompt") == 1  # a second 'prompt' column never wins silently


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 1_000_000), st.sampled_from([" ", "\n", "\t"]))
def test_a_list_padded_with_blanks_is_read_quickly_or_refused(tmp_path_factory: pytest.TempPathFactory,
                                                              blanks: int, blank: str) -> None:
    path = tmp_path_factory.mktemp("blank") / "list.txt"
    path.write_text(blank * blanks + "a red circle" + blank * blanks)
    items = _read(path)
    assert items is None or [item["prompt"] for item in items] == ["a red circle"]


# -- seed specs -------------------------------------------------------------------------------------------
_BOUNDS = st.one_of(st.integers(-5, 2**80), st.just(MAX_SEED), st.just(MAX_SEED + 1))


@FEW
@given(st.lists(st.tuples(_BOUNDS, st.one_of(st.none(), _BOUNDS)), min_size=1, max_size=4))
def test_seed_ranges_of_any_size_parse_or_are_refused_before_allocating(parts: list[tuple[int, int | None]]) -> None:
    spec = ",".join(str(lo) if hi is None else f"{lo}-{hi}" for lo, hi in parts)
    try:
        seeds = parse_seeds(spec)
    except SeedSpecError as exc:
        _one_line(exc)
        return
    assert 0 < len(seeds) <= MAX_SEEDS and all(0 <= s <= MAX_SEED for s in seeds)


@FEW
@given(st.lists(st.one_of(st.integers(0, 10), st.floats(), st.booleans(), st.text(max_size=3), st.none()),
                min_size=1, max_size=5))
def test_seed_lists_hold_whole_numbers_only(values: list) -> None:
    try:
        seeds = seed_list(values)
    except SeedSpecError as exc:
        _one_line(exc)
        assert any(not isinstance(v, int) or isinstance(v, bool) for v in values)
        return
    assert seeds == list(dict.fromkeys(values))


@settings(max_examples=2, deadline=None)  # each example reads a million seeds before it may refuse
@given(st.integers(MAX_SEEDS + 1, 10**15))
def test_a_huge_seed_iterable_is_refused_without_being_held(size: int) -> None:
    with pytest.raises(SeedSpecError, match="more than"):
        seed_list(itertools.islice(itertools.count(), size))


# -- bypass specs -----------------------------------------------------------------------------------------
_MODULE = st.from_regex(r"[a-z_]{1,6}(\.[a-z0-9_]{1,6}){0,3}", fullmatch=True)
_STEP = st.one_of(st.integers(-3, 10**20).map(str), st.text("0123456789-+.e", max_size=4))


@FEW
@given(st.one_of(st.text(max_size=30),
                 st.builds(lambda m, a, b: f"{m}@{a}:{b}", _MODULE, _STEP, _STEP),
                 st.builds(lambda m, a: f"{m}@{a}", _MODULE, _STEP)))
def test_bypass_specs_parse_into_what_they_say_or_are_refused(text: str) -> None:
    try:
        spec = BypassSpec.parse(text)
    except BypassSpecError as exc:
        _one_line(exc)
        return
    assert spec.module and "\n" not in spec.module
    again = BypassSpec.parse(spec.spec())  # what it says is what it is
    assert again == spec
    assert spec.start is None or spec.end is None or 0 <= spec.start < spec.end
