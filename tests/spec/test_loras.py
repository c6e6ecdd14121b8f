"""LoRA entries of a run spec: FILE or FILE:SCALE, split on the last colon only when a number follows (Windows drive
letters and colons in names stay in the path), a scale that is not a finite number refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.spec import RunSpec, SpecError, validate
from ghostviewer.spec.loras import LoraEntry, lora_entries, parse_lora
from ghostviewer.spec.prompt_lists import read_prompt_list


@pytest.mark.parametrize("entry, parsed", [
    ("style.safetensors", LoraEntry("style.safetensors", 1.0)),
    ("style.safetensors:0.5", LoraEntry("style.safetensors", 0.5)),
    ("style.safetensors:-1e-1", LoraEntry("style.safetensors", -0.1)),
    (r"C:\loras\style.safetensors", LoraEntry(r"C:\loras\style.safetensors", 1.0)),
    (r"C:\loras\style.safetensors:2", LoraEntry(r"C:\loras\style.safetensors", 2.0)),
    ("runs/12:30/style.safetensors", LoraEntry("runs/12:30/style.safetensors", 1.0)),
])
def test_an_entry_is_split_on_its_last_colon_only_before_a_number(entry: str, parsed: LoraEntry) -> None:
    assert parse_lora(entry) == parsed


@pytest.mark.parametrize("entry, words", [
    ("style.safetensors:strong", "the scale 'strong' is not a number"),
    ("style.safetensors:inf", "the scale must be a finite number, not inf"),
    ("style.safetensors:nan", "the scale must be a finite number"),
    ("", "--lora takes FILE or FILE:SCALE"),
])
def test_a_scale_that_is_not_a_finite_number_is_refused(entry: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_lora(entry)


def test_the_spec_checks_files_and_writes_nothing_for_plain_runs(tmp_path: Path) -> None:
    lora = tmp_path / "style.safetensors"
    lora.write_bytes(b"")
    validate(RunSpec(prompt="x", adapters=(f"{lora}:0.7",), fuse_lora=True))
    with pytest.raises(SpecError, match="no such file"):
        validate(RunSpec(prompt="x", adapters=(str(tmp_path / "gone.safetensors"),)))
    with pytest.raises(SpecError, match="is given twice"):
        validate(RunSpec(prompt="x", adapters=(str(lora), f"{lora}:0.5")))
    with pytest.raises(SpecError, match="--fuse-lora needs a --lora FILE"):
        validate(RunSpec(prompt="x", fuse_lora=True))
    assert not {"adapters", "fuse_lora"} & set(RunSpec(prompt="x").to_dict())
    assert RunSpec.from_dict({"prompt": "x", "adapters": [str(lora)], "fuse_lora": True}).fuse_lora is True


def test_a_prompt_list_row_may_name_its_loras(tmp_path: Path) -> None:
    assert lora_entries("a.safetensors:0.5; b.safetensors") == ("a.safetensors:0.5", "b.safetensors")
    listed = tmp_path / "rows.jsonl"
    (tmp_path / "a.safetensors").write_bytes(b"")
    listed.write_text('{"prompt": "p", "lora": ["a.safetensors:0.5"]}\n{"prompt": "q", "lora": 3}\n')
    with pytest.raises(SpecError, match="rows.jsonl line 2: lora must be FILE"):
        read_prompt_list(listed)
    listed.write_text('{"prompt": "p", "lora": ["a.safetensors:0.5"]}\n')
    (row,) = read_prompt_list(listed)
    assert row["lora"] == (f"{tmp_path.resolve() / 'a.safetensors'}:0.5",)  # read from the list's folder
    assert RunSpec(prompt="x").with_row(row).adapters == row["lora"]
