"""A prompt list is someone else's file: its wildcards read the wildcard folder beside it and nothing else.
`__../../secret__` or an absolute `__/home/me/secret__` is refused in one line naming the entry (the absolute one
was an internal error), and no file outside the folder reaches the prompts (nor the record, nor a bundle)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.cli import main as cli_main
from ghostviewer.spec.prompt_lists import read_prompt_list


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "secret.txt").write_text("SECRET-TOKEN\n", encoding="utf-8")
    lists = tmp_path / "lists"
    (lists / "wildcards").mkdir(parents=True)
    (lists / "wildcards" / "colour.txt").write_text("red\nblue\n", encoding="utf-8")
    (lists / "wildcards" / "linked.txt").symlink_to(tmp_path / "secret.txt")
    return lists


@pytest.mark.parametrize("name", ["../../secret", "../wildcards/../../secret", "{root}/secret"])
def test_a_wildcard_naming_a_file_outside_its_folder_is_refused(name: str, folder: Path, tmp_path: Path) -> None:
    listed = folder / "list.txt"
    listed.write_text(f"a __{name.format(root=tmp_path)}__ circle\n", encoding="utf-8")
    with pytest.raises(ValueError, match="list.txt entry 1: the wildcard .* points outside the wildcard folder"):
        read_prompt_list(listed)


def test_the_sweep_command_says_so_in_one_line(folder: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    listed = folder / "list.txt"
    listed.write_text(f"a __{tmp_path}/secret__ circle\n", encoding="utf-8")  # was an internal error
    # a pipeline that is there: a sweep checks it before it reads the list (a missing one is said first)
    code = cli_main(["sweep", str(listed), "--seeds", "0", "--steps", "1", "--pipeline", "demo",
                     "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "internal error" not in err, err
    assert "list.txt entry 1: the wildcard" in err and "points outside the wildcard folder" in err
    assert not (tmp_path / "runs").exists() or not any(p.name != "logs" for p in (tmp_path / "runs").iterdir())


def test_a_wildcard_file_linked_from_elsewhere_is_not_read(folder: Path, tmp_path: Path) -> None:
    listed = folder / "list.txt"
    listed.write_text("a __linked__ circle\n", encoding="utf-8")
    with pytest.raises(ValueError, match="has no file linked.txt"):
        read_prompt_list(listed)
    listed.write_text("a __colour__ circle\n", encoding="utf-8")  # the folder's own files still work
    assert sorted(row["prompt"] for row in read_prompt_list(listed)) == ["a blue circle", "a red circle"]
