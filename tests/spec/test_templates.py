"""Dynamic-prompt templates expand into frozen rows through the dynamicprompts library, or are refused by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.spec.prompt_lists import ListOptions, PromptListError, freeze_prompt_list, read_prompt_list
from ghostviewer.spec.templates import TemplateOptions, is_template


def test_combinatorial_templates_give_every_variant_with_the_rows_values(tmp_path: Path) -> None:
    listing = tmp_path / "list.jsonl"
    listing.write_text('{"prompt": "a {red|blue} {circle|square}", "steps": 4}\n{"prompt": "a green star"}\n')
    rows = read_prompt_list(listing)
    assert sorted(r["prompt"] for r in rows[:4]) == ["a blue circle", "a blue square", "a red circle",
                                                       "a red square"]
    assert all(r["steps"] == 4 for r in rows[:4]) and rows[4] == {"prompt": "a green star"}


def test_wildcards_come_from_the_folder_beside_the_list_and_are_hashed(tmp_path: Path) -> None:
    (tmp_path / "wildcards").mkdir()
    (tmp_path / "wildcards" / "colour.txt").write_text("red\nblue\n")
    listing = tmp_path / "list.txt"
    listing.write_text("a __colour__ circle\n")
    rows, provenance = freeze_prompt_list(listing)
    assert sorted(r["prompt"] for r in rows) == ["a blue circle", "a red circle"]
    assert provenance["templates"]["templates"] == ["a __colour__ circle"]
    assert len(provenance["templates"]["wildcard_files"]["colour.txt"]) == 64
    listing.write_text("a __shape__ circle\n")
    with pytest.raises(PromptListError, match=r"the wildcard __shape__ has no file shape.txt"):
        read_prompt_list(listing)


def test_random_mode_is_fixed_by_its_seed(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("a {red|blue|green|orange|purple} {circle|square|star}\n")
    options = ListOptions(templates=TemplateOptions(mode="random", count=5, seed=11))
    first, provenance = freeze_prompt_list(listing, options)
    again, _ = freeze_prompt_list(listing, options)
    assert len(first) == 5 and first == again and provenance["templates"]["options"]["seed"] == 11


def test_a_broken_or_huge_template_is_refused_naming_the_entry(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("fine prompt\na {red|blue circle {x|y}\n")
    with pytest.raises(PromptListError, match="list.txt entry 2"):
        read_prompt_list(listing)
    listing.write_text("{a|b|c|d|e|f|g|h|i|j} {a|b|c|d|e|f|g|h|i|j} {a|b|c|d|e|f|g|h|i|j} {a|b|c|d|e|f|g|h|i|j} "
                       "{a|b|c|d|e|f|g|h|i|j}\n")
    with pytest.raises(PromptListError, match="more than 10,000 prompts"):
        read_prompt_list(listing)


def test_plain_prompts_are_not_templates() -> None:
    assert not is_template("a red circle, top left")
    assert is_template("a {red|blue} circle") and is_template("a __colour__ circle")
