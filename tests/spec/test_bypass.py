"""Bypass specs, `MODULE` or `MODULE@START:END`: parsing, step ranges (slice semantics), and their round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ghostviewer.spec import UserError
from ghostviewer.spec.bypass import BypassSpec, BypassSpecError, format_steps, parse_steps


@pytest.mark.parametrize(("text", "steps"), [
    ("", (None, None)), ("all", (None, None)), (" ALL ", (None, None)), (":", (None, None)),
    ("5:12", (5, 12)), (":8", (None, 8)), ("3:", (3, None)), (" 0 : 1 ", (0, 1)),
])
def test_step_ranges(text: str, steps: tuple[int | None, int | None]) -> None:
    assert parse_steps(text) == steps


@pytest.mark.parametrize(("text", "message"), [
    ("5", "steps must look like START:END, e.g. 0:10, not '5'"),
    ("a:b", "steps must look like START:END"),
    ("1:2:3", "steps must look like START:END"),
    ("-1:3", "steps cannot be negative"),
    ("2:-1", "steps cannot be negative"),
    ("4:4", "the step range is empty: 4:4"),
    ("5:2", "the step range is empty"),
])
def test_bad_step_ranges(text: str, message: str) -> None:
    with pytest.raises(BypassSpecError, match=message):
        parse_steps(text)


def test_format_steps_is_the_inverse_of_parse_steps() -> None:
    for steps in [(None, None), (0, 10), (None, 8), (3, None)]:
        assert parse_steps(format_steps(steps)) == steps
    assert format_steps((None, None)) == "all" and format_steps((3, None)) == "3:" and format_steps((None, 8)) == ":8"


def test_parse_a_module_with_and_without_steps() -> None:
    assert BypassSpec.parse("unet.mid_block") == BypassSpec("unet.mid_block")
    assert BypassSpec.parse("  unet.mid_block@0:10 ") == BypassSpec("unet.mid_block", 0, 10)
    assert BypassSpec.parse("unet.up_blocks.1@5:") == BypassSpec("unet.up_blocks.1", 5, None)
    assert BypassSpec.parse("vae.decoder@:") == BypassSpec("vae.decoder")  # every step
    assert BypassSpec.parse("unet.mid_block@2:4").steps == (2, 4)


@pytest.mark.parametrize(("spec", "message"), [
    ("", "expected MODULE or MODULE@START:END"),
    ("unet mid", "bad --bypass 'unet mid'"),
    ("unet@1:2@3:4", "expected MODULE or MODULE@START:END"),
    ("@0:3", "expected MODULE"),
    ("unet@", "the steps after '@' must look like START:END"),
    ("unet@all", "the steps after '@' must look like START:END"),  # 'all' is for the Steps cell, not a spec
    ("unet@5", "the steps after '@' must look like START:END"),
    ("unet@4:2", r"bad --bypass 'unet@4:2': the step range is empty: 4:2"),
    ("unet@x:2", "bad --bypass 'unet@x:2': steps must look like START:END"),
])
def test_bad_specs_name_the_spec_in_one_line(spec: str, message: str) -> None:
    with pytest.raises(BypassSpecError, match=message) as caught:
        BypassSpec.parse(spec)
    assert isinstance(caught.value, UserError) and "\n" not in str(caught.value)


def test_active_at_uses_slice_semantics() -> None:
    ranged = BypassSpec("m", 2, 5)
    assert [s for s in range(8) if ranged.active_at(s)] == [2, 3, 4]
    assert [s for s in range(4) if BypassSpec("m", None, 2).active_at(s)] == [0, 1]
    assert [s for s in range(4) if BypassSpec("m", 2, None).active_at(s)] == [2, 3]
    assert all(BypassSpec("m").active_at(s) for s in range(4))
    assert ranged.active_at(None)  # outside the denoising loop (encode, decode) a bypass is always on


def test_spec_text() -> None:
    assert BypassSpec("unet.mid_block").spec() == "unet.mid_block"
    assert BypassSpec("unet.mid_block", 0, 10).spec() == "unet.mid_block@0:10"
    assert BypassSpec("m", None, 4).spec() == "m@:4" and BypassSpec("m", 3).spec() == "m@3:"


_module = st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z0-9_]{1,8}){0,4}", fullmatch=True)
_bound = st.none() | st.integers(0, 10_000)


@st.composite
def _specs(draw: st.DrawFn) -> BypassSpec:
    start, end = draw(_bound), draw(_bound)
    if start is not None and end is not None and end <= start:
        start, end = end, start + 1 if end == start else start
    return BypassSpec(draw(_module), start, end)


@settings(max_examples=50)
@given(_specs())
def test_parse_of_spec_is_the_spec(spec: BypassSpec) -> None:
    assert BypassSpec.parse(spec.spec()) == spec


@settings(max_examples=50)
@given(st.text(max_size=24) | st.text(alphabet="ab._@:019- ", max_size=16))
def test_any_text_parses_or_is_refused_as_a_bypass_spec(text: str) -> None:
    try:
        spec = BypassSpec.parse(text)
    except BypassSpecError:
        return
    assert BypassSpec.parse(spec.spec()) == spec
