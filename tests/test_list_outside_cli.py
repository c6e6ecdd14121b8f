"""`ghostviewer sweep` and `baseline build` refuse a list naming a file outside its folder (exit 2, one line, nothing
recorded) and read it with --allow-outside-files: the sweep then runs the row's img2img call on that file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from ghostviewer.cli import main
from ghostviewer.record import RunRecord


def _list_naming_a_private_image(tmp_path: Path) -> tuple[Path, Path]:
    private = tmp_path / "private" / "photo.png"
    private.parent.mkdir()
    Image.fromarray(np.full((64, 64, 3), 120, np.uint8)).save(private)
    listing = tmp_path / "shared" / "rows.jsonl"
    listing.parent.mkdir()
    listing.write_text(json.dumps({"prompt": "a red circle", "init_image": str(private), "strength": 0.5}) + "\n")
    return listing, private


def test_a_list_naming_a_file_outside_its_folder_is_refused_then_allowed(capsys, tmp_path: Path,  # noqa: ANN001
                                                                         runs_dir: Path) -> None:
    listing, private = _list_naming_a_private_image(tmp_path)
    for argv in (["sweep", str(listing), "--seeds", "1", "--steps", "2"],
                 ["baseline", "build", "--pipeline", "demo", "--prompts", str(listing), "--seeds", "1"]):
        assert main([*argv, "--runs-dir", str(runs_dir)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"names init_image {private}, outside the list's folder" in err
        assert "--allow-outside-files" in err
    assert not runs_dir.exists() or not any(runs_dir.iterdir())  # nothing recorded
    code = main(["sweep", str(listing), "--seeds", "1", "--steps", "2", "--allow-outside-files",
                 "--runs-dir", str(runs_dir), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and report["total"] == 1 and report["failed"] == 0
    (run,) = report["runs"]
    settings = RunRecord(run["run_dir"]).settings
    assert settings["init_image"] == str(private) and settings["strength"] == 0.5
