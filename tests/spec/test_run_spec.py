"""RunSpec: one description of a run, defaults written once, unknown keys refused by name."""

from __future__ import annotations

import json

import pytest

from ghostviewer.spec import DEFAULTS, RunSpec, SpecError, UserError, resolve_seed, validate
from ghostviewer.spec.run_spec import SPEC_VERSION


def test_defaults_are_those_of_a_plain_run() -> None:
    assert (DEFAULTS.steps, DEFAULTS.seed, DEFAULTS.guidance, DEFAULTS.trace_depth) == (20, 0, None, "block")
    assert (DEFAULTS.kind, DEFAULTS.batch, DEFAULTS.generator_device) == ("text2img", 1, "cpu")


def test_round_trip_through_json_is_exact() -> None:
    spec = RunSpec(prompt="a red circle", seed=7, steps=4, bypass=("unet.mid_block@0:2",), faults=("nan-latents",),
                   extra={"memory_check": False})
    wire = json.loads(json.dumps(spec.to_json()))
    assert wire["spec_version"] == SPEC_VERSION
    assert RunSpec.from_dict(wire) == spec
    assert spec.memory_check is False


def test_a_typo_is_refused_naming_the_key_and_the_near_one() -> None:
    with pytest.raises(SpecError, match=r"unknown setting 'stpes' \(did you mean 'steps'\?\)"):
        RunSpec.from_dict({"prompt": "x", "stpes": 4})
    with pytest.raises(SpecError, match="unknown extra setting"):
        RunSpec.from_dict({"prompt": "x", "extra": {"memroy_check": False}})


def test_a_record_from_a_newer_version_keeps_what_this_one_knows() -> None:
    spec = RunSpec.from_record({"prompt": "x", "steps": 3, "a_future_setting": 1, "extra": {"later": 2}})
    assert (spec.prompt, spec.steps, spec.extra) == ("x", 3, {})
    with pytest.raises(SpecError, match="newer GhostViewer"):
        RunSpec.from_dict({"prompt": "x", "spec_version": SPEC_VERSION + 1})


@pytest.mark.parametrize("value", ["unet.mid_block", 3, {"a": 1}])
def test_a_list_setting_given_as_one_string_is_refused_not_split_into_letters(value: object) -> None:
    with pytest.raises(SpecError, match="bypass must be a list"):
        RunSpec.from_dict({"prompt": "x", "bypass": value})


def test_plain_calls_write_no_call_fields_so_old_records_read_the_same() -> None:
    data = RunSpec(prompt="x").to_dict()
    assert not {"kind", "batch", "generator_device", "strength", "adapters"} & set(data)
    assert RunSpec(prompt="x", batch=4).to_dict()["batch"] == 4


def test_calls_the_engine_cannot_make_yet_are_refused_not_run_as_text_to_image() -> None:
    with pytest.raises(SpecError, match=r"--lora lora: no such file"):  # made now (a LoRA file), checked
        validate(RunSpec(prompt="x", adapters=("lora",)))
    with pytest.raises(SpecError, match="a controlnet run needs --control-image FILE"):  # a watched call's record
        validate(RunSpec(prompt="x", kind="controlnet"))
    with pytest.raises(SpecError, match="an img2img run needs --init-image FILE"):  # a watched call's record
        validate(RunSpec(prompt="x", kind="img2img", strength=0.5))
    validate(RunSpec(prompt="x"))


@pytest.mark.parametrize("changes, words", [
    ({"steps": 0}, "steps must be at least 1"),
    ({"seed": -2}, "seed must be between"),
    ({"trace_depth": "deep"}, "trace depth"),
    ({"guidance": float("nan")}, "guidance must be a number"),
    ({"kind": "video"}, "call kind"),
    ({"batch": 0}, "batch must be"),
])
def test_each_bad_value_gets_its_own_line(changes: dict, words: str) -> None:
    with pytest.raises(UserError, match=words):
        validate(RunSpec(prompt="x", **changes))


def test_with_row_maps_prompt_list_columns_to_fields() -> None:
    spec = DEFAULTS.with_row({"prompt": "a blue star", "negative": "red", "seed": 5, "steps": 8})
    assert (spec.prompt, spec.negative_prompt, spec.seed, spec.steps) == ("a blue star", "red", 5, 8)


def test_random_seed_is_resolved_once_and_said() -> None:
    seed, note = resolve_seed(-1)
    assert 0 <= seed < 2**32 and note and str(seed) in note
    assert resolve_seed(12) == (12, None)
    with pytest.raises(SpecError, match="whole number"):
        resolve_seed(1.5)  # type: ignore[arg-type]


def test_updated_goes_through_the_same_checks() -> None:
    assert DEFAULTS.updated(steps=5).steps == 5
    with pytest.raises(SpecError, match="unknown setting"):
        DEFAULTS.updated(stepz=5)


def test_prompt_list_columns_are_the_fields_rows_set(tmp_path) -> None:
    from ghostviewer.spec.prompt_lists import KEYS, PromptListError, read_prompt_list
    from ghostviewer.spec.run_spec import ROW_FIELDS

    assert set(ROW_FIELDS) == set(KEYS)
    bad = tmp_path / "list.jsonl"
    bad.write_text('{"prompt": "a red circle"}\n{"prompt": "a blue star", "negativ": "red"}\n')
    near = r"list.jsonl line 2: unknown key 'negativ' \(did you mean 'negative'\?\)"
    with pytest.raises(PromptListError, match=near):
        read_prompt_list(bad)
    csv_list = tmp_path / "list.csv"
    csv_list.write_text("prompt,sed\na red circle,3\n")
    with pytest.raises(PromptListError, match=r"line 1: unknown key 'sed'"):
        read_prompt_list(csv_list)
