"""`ghostviewer prune` and api.prune on real demo runs (two tiny runs made once, copied for each test): what it
prints, its JSON, its exit codes, and refusals in one line."""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.cli import main


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A healthy demo run and one with NaN latents (2 steps each), made once."""
    folder = tmp_path_factory.mktemp("made")
    api.run("demo", "a red circle on a blue background", seed=1, steps=2, runs_dir=folder)
    api.run("demo", "a red circle on a blue background", seed=7, steps=2, faults=["nan-latents"], runs_dir=folder)
    return folder


@pytest.fixture
def runs(made: Path, tmp_path: Path) -> dict[str, Path]:
    """A copy of the two runs, both made 10 days ago."""
    folder = tmp_path / "runs"
    shutil.copytree(made, folder)
    found = {}
    for run in folder.iterdir():
        if not run.is_dir():
            continue
        when = (datetime.now().astimezone() - timedelta(days=10)).isoformat()
        with sqlite3.connect(run / "run.sqlite") as conn:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'created_at'", (json.dumps(when),))
            verdict = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'verdict'").fetchone()[0])
        conn.close()
        found[verdict["label"]] = run
    found["folder"] = folder
    return found


def _cli(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001 - pytest's capsys
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prune_prints_what_it_removed_and_the_bytes_freed(capsys, runs: dict[str, Path]) -> None:  # noqa: ANN001
    (runs["folder"] / "notes.txt").write_text("mine")
    code, out, err = _cli(capsys, "prune", str(runs["folder"]), "--older-than", "7d", "--keep-anomalies",
                          "--dry-run")
    assert code == 0 and err == "" and runs["ok"].is_dir()
    assert f"would remove run {runs['ok']} (ok, made " in out and "(dry run: nothing removed)" in out
    assert f"left {runs['folder'] / 'notes.txt'}: not a GhostViewer record" in out
    code, out, _ = _cli(capsys, "prune", str(runs["folder"]), "--older-than", "7d", "--keep-anomalies")
    assert code == 0 and not runs["ok"].exists() and runs["nan"].is_dir()
    assert out.splitlines()[-1].startswith("removed 1 record, freed ") and out.splitlines()[-1].endswith("kept 1")


def test_prune_json_is_one_document_and_the_api_returns_the_same(capsys, runs: dict[str, Path]) -> None:  # noqa: ANN001
    expected = api.prune(runs["folder"], verdict="nan", dry_run=True)
    code, out, _ = _cli(capsys, "prune", str(runs["folder"]), "--verdict", "nan", "--dry-run", "--json")
    result = json.loads(out)
    assert code == 0 and result == expected
    assert [r["path"] for r in result["removed"]] == [str(runs["nan"])] and result["removed"][0]["verdict"] == "nan"
    assert result["bytes_freed"] == result["removed"][0]["bytes"] > 0 and runs["nan"].is_dir()


@pytest.mark.parametrize(("argv", "message"), [
    ([], "say what to remove"),
    (["--older-than", "soon"], "--older-than takes an age such as 7d"),
    (["--verdict", "fine"], "unknown verdict 'fine'"),
    (["--keep-last", "x"], "invalid int value"),
])
def test_refusals_are_one_line_and_exit_two(capsys, runs: dict[str, Path], argv: list[str],  # noqa: ANN001
                                            message: str) -> None:
    code, out, err = _cli(capsys, "prune", str(runs["folder"]), *argv, "--json")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert json.loads(out)["exit_code"] == 2 and runs["ok"].is_dir() and runs["nan"].is_dir()


def test_a_missing_folder_exits_two(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    code, _, err = _cli(capsys, "prune", str(tmp_path / "nowhere"), "--older-than", "1d")
    assert code == 2 and err.strip() == f"ghostviewer: not a runs folder: {tmp_path / 'nowhere'}"
