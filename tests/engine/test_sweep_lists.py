"""Sweeps of the lists users already have: A1111 lines, styles and dynamic-prompt templates, frozen in the study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ghostviewer.cli import main
from ghostviewer.record import StudyRecord


@pytest.mark.slow
def test_a_template_sweep_runs_its_variants_and_resumes_the_same_rows(tmp_path: Path, capsys) -> None:
    (tmp_path / "wildcards").mkdir()
    colours = tmp_path / "wildcards" / "colour.txt"
    colours.write_text("red\nblue\n")
    listing = tmp_path / "list.txt"
    listing.write_text('--prompt "a __colour__ {circle|square}" --steps 2 --cfg_scale 5\n')
    runs = tmp_path / "runs"
    assert main(["sweep", str(listing), "--seeds", "1", "--runs-dir", str(runs), "--json"]) in (0, 1)
    result = json.loads(capsys.readouterr().out)
    assert sorted(r["prompt"] for r in result["runs"]) == ["a blue circle", "a blue square", "a red circle",
                                                           "a red square"]
    assert all(r["steps"] == 2 for r in result["runs"])
    params = StudyRecord(result["study_dir"]).params
    assert params["list_provenance"]["templates"]["templates"] == ["a __colour__ {circle|square}"]
    assert "colour.txt" in params["list_provenance"]["templates"]["wildcard_files"]
    assert len(params["items"]) == 4 and "list" not in params  # frozen rows, not the path
    colours.write_text("green\n")  # the wildcard file changes: the study still holds its rows
    assert main(["sweep", "--resume", result["study_dir"], "--json"]) in (0, 1)
    again = json.loads(capsys.readouterr().out)
    assert sorted(r["prompt"] for r in again["runs"]) == sorted(r["prompt"] for r in result["runs"])


def test_resume_never_takes_allow_pickle_from_the_study(tmp_path: Path) -> None:
    from ghostviewer.engine.loops.sweep_spec import SweepSpec

    spec = SweepSpec.from_params({"items": [{"prompt": "x"}], "seeds": "1", "settings": {}, "allow_pickle": True})
    assert spec.allow_pickle is False


def test_styles_need_their_file_and_a_plain_list_stays_streamed(tmp_path: Path, capsys) -> None:
    from ghostviewer.engine.loops.sweep_jobs import frozen_list
    from ghostviewer.spec.prompt_lists import ListOptions

    listing = tmp_path / "list.txt"
    listing.write_text("a red circle\na blue star\n")
    assert frozen_list(listing, ListOptions()) == (listing, None)
    code = main(["sweep", str(listing), "--style", "poster", "--runs-dir", str(tmp_path / "runs")])
    assert code == 2 and "needs the styles file" in capsys.readouterr().err
