"""AUTOMATIC1111 prompt files and styles: every option it accepts mapped or refused by name, never guessed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.spec.a1111 import A1111Error, Style, merge, parse_line, read_styles
from ghostviewer.spec.prompt_lists import ListOptions, PromptListError, read_prompt_list
from ghostviewer.spec.run_spec import DEFAULTS


def test_a_full_line_maps_to_the_run_spec() -> None:
    row = parse_line('--prompt "a red circle" --negative_prompt "blurry, dark" --seed 5 --steps 12 --cfg_scale 6.5 '
                     '--width 64 --height 64 --sampler_name "Euler a" --outpath_samples out --do_not_save_grid true',
                     "list.txt line 1")
    assert row == {"prompt": "a red circle", "negative": "blurry, dark", "seed": 5, "steps": 12, "guidance": 6.5,
                   "width": 64, "height": 64, "scheduler": "euler_a"}
    spec = DEFAULTS.with_row(row)
    assert (spec.negative_prompt, spec.guidance, spec.scheduler, spec.width) == ("blurry, dark", 6.5, "euler_a", 64)


def test_an_unquoted_prompt_takes_the_words_up_to_the_next_option_as_a1111_does() -> None:
    assert parse_line("--prompt a blue star --seed 3", "x")["prompt"] == "a blue star"


@pytest.mark.parametrize("line, words", [
    ("--prompt cat --stpes 4", r"unknown A1111 option --stpes \(did you mean --steps\?\)"),
    ("--prompt cat --steps four", r"--steps must be a whole number, not 'four'"),
    ("--prompt cat --restore_faces true", "face restoration"),
    ("--prompt cat --tiling true", "tiling"),
    ("--prompt cat --batch_size 4", "one image a row"),
    ("--prompt cat --subseed 3 --subseed_strength 0.5", "variation seeds"),
    ("--prompt cat --sampler_name 'DPM2 a'", "has no scheduler GhostViewer can swap in"),
    ("--prompt cat --sd_model other.ckpt", "the model is the sweep's --pipeline"),
    ('--prompt "cat', "No closing quotation"),
    ("--seed 3", "has no --prompt"),
    ("--prompt cat --seed", "--seed needs a value"),
])
def test_what_cannot_be_reproduced_is_refused_naming_the_line(line: str, words: str) -> None:
    with pytest.raises(A1111Error, match=words) as caught:
        parse_line(line, "list.txt line 7")
    assert str(caught.value).startswith("list.txt line 7: ")


def test_neutral_values_of_unsupported_options_are_accepted() -> None:
    row = parse_line("--prompt cat --batch_size 1 --n_iter 1 --restore_faces false --tiling false --subseed 9 "
                     "--subseed_strength 0", "x")
    assert row == {"prompt": "cat"}


def test_a_file_mixes_plain_prompts_and_option_lines(tmp_path: Path) -> None:
    listing = tmp_path / "prompts.txt"
    listing.write_text("# my list\na green square\n--prompt \"a red circle\" --seed 2 --steps 4\n")
    assert read_prompt_list(listing) == [{"prompt": "a green square"},
                                         {"prompt": "a red circle", "seed": 2, "steps": 4}]
    listing.write_text("a green square\n--prompt cat --cfg_scal 7\n")
    with pytest.raises(PromptListError, match="prompts.txt line 2: unknown A1111 option --cfg_scal"):
        read_prompt_list(listing)


def test_styles_apply_as_a1111_merges_them(tmp_path: Path) -> None:
    styles = tmp_path / "styles.csv"
    styles.write_text('name,prompt,negative_prompt\nposter,"poster of {prompt}, bold",ugly\nsoft,"pastel",\n')
    table = read_styles(styles)
    assert table["poster"] == Style("poster", "poster of {prompt}, bold", "ugly")
    assert merge("pastel", "a red circle") == "a red circle, pastel"
    listing = tmp_path / "prompts.txt"
    listing.write_text('a red circle\n--prompt "a blue star" --styles soft\n')
    rows = read_prompt_list(listing, ListOptions(styles_file=styles, styles=("poster",)))
    assert rows == [{"prompt": "poster of a red circle, bold", "negative": "ugly"},
                    {"prompt": "poster of a blue star, bold, pastel", "negative": "ugly"}]
    with pytest.raises(PromptListError, match=r"no style named 'postr' \(did you mean 'poster'\?\)"):
        read_prompt_list(listing, ListOptions(styles_file=styles, styles=("postr",)))
    with pytest.raises(PromptListError, match="give the styles file"):
        read_prompt_list(listing)
