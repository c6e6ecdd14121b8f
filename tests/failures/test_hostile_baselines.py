"""A baseline file may come from anyone (a colleague's --baseline, a runs folder's baselines/): a FIFO, JSON nested
deeper than Python decodes, binary bytes, values of the wrong kind are each a one-line BaselineError — never a hang,
a RecursionError or a TypeError. Deep JSON in baselines/ made every run of that folder an internal error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ghostviewer.analysis.baseline_file import load_baseline
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.cli import main as cli_main

HEAD = {"format": "ghostviewer-baseline", "version": 1, "key": "x", "identity": {}, "settings": {}, "buckets": 20,
        "stats": ["mean", "std", "absmax"], "margin": 1, "channel_margin": 1, "colour_margin": 1, "modules": {}}
FILES: dict[str, bytes | None] = {
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "binary": bytes(range(256)),
    "meta-a-list": json.dumps({**HEAD, "meta": [1, 2]}).encode(),
    "stats-a-number": json.dumps({**HEAD, "stats": 5}).encode(),
    "fifo": None,
}


def _write(folder: Path, name: str) -> Path:
    path = folder / f"{name}.json"
    data = FILES[name]
    if data is None:
        os.mkfifo(path)
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_hostile_baseline_file_is_one_line(name: str, tmp_path: Path) -> None:
    with pytest.raises(BaselineError) as info:
        load_baseline(_write(tmp_path, name))
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)


def test_a_runs_folder_with_garbage_baselines_still_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "runs" / "baselines"
    folder.mkdir(parents=True)
    for name in FILES:
        _write(folder, name)
    code = cli_main(["run", "--prompt", "a red circle", "--steps", "2", "--seed", "1", "--runs-dir",
                     str(tmp_path / "runs"), "--json"])
    captured = capsys.readouterr()
    assert code in (0, 1) and "internal error" not in captured.err, captured.err
    assert json.loads(captured.out)["verdict"]["label"]
    code = cli_main(["run", "--prompt", "a red circle", "--steps", "2", "--baseline", str(folder / "deep.json"),
                     "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "deep.json is JSON nested too deeply to be read" in err and "\n" not in err, err
