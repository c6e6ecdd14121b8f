"""Hostile run folders the older corpus did not try: a record holding a value JSON cannot (an infinite guidance),
a final image whose header declares a decompression bomb, a creation date no datetime holds. `compare`, `prune`
and the reader end in a clean result or one line, never an internal error, and never decode the bomb. Torch-free
(tests/gui/fake_runs.py writes the runs through the real RunWriter)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import struct
import zlib
from pathlib import Path

import pytest

from ghostviewer.cli import main as cli_main
from ghostviewer.record import RunRecord
from ghostviewer.record.reader import MAX_IMAGE_PIXELS
from tests.gui.fake_runs import write_fake_run


def _set_meta(run: Path, key: str, text: str) -> None:
    conn = sqlite3.connect(run / "run.sqlite")
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (text, key))
    conn.commit()
    conn.close()


def _png_declaring(width: int, height: int) -> bytes:
    """A 100-byte PNG whose header says width × height: what Pillow would try to decode in full."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


def _one_line(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "internal error" not in err and "Traceback" not in err and "\n" not in err, err
    return captured.out, err


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hostile-runs")
    return write_fake_run(root, steps=2, run_id="a"), write_fake_run(root, steps=2, run_id="b", seed=8)


def test_compare_json_of_a_record_holding_infinity_is_one_json_document(pair: tuple[Path, Path], tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run = shutil.copytree(pair[0], tmp_path / "inf")
    _set_meta(run, "settings", '{"prompt": "x", "seed": 7, "steps": 2, "guidance": Infinity}')
    assert cli_main(["compare", "--json", str(run), str(pair[1])]) == 1  # they differ
    out, _ = _one_line(capsys)
    result = json.loads(out)  # strict JSON: the infinity is null, said as the value that differs
    assert result["same"] is False and result["settings_diff"]["guidance"] == [None, 7.5]


@pytest.mark.parametrize("size", [(100_000, 100_000), (10_000, 10_000)])
def test_a_final_image_declaring_a_bomb_is_never_decoded(size: tuple[int, int], pair: tuple[Path, Path],
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same stats, so compare reads the final images: the bomb reads as no image, not 1.2 GB or a crash."""
    twin = shutil.copytree(pair[0], tmp_path / "twin")
    (twin / "images" / "final.png").write_bytes(_png_declaring(*size))
    assert size[0] * size[1] > MAX_IMAGE_PIXELS
    assert RunRecord(twin).image_path("final") is None and RunRecord(pair[0]).image_path("final") is not None
    assert cli_main(["compare", str(pair[0]), str(twin)]) == 1
    out, _ = _one_line(capsys)
    assert "final image" in out


def test_prune_of_a_record_dated_before_year_one_in_utc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_fake_run(tmp_path / "runs", steps=1, run_id="old")
    _set_meta(run, "created_at", json.dumps("0001-01-01T00:00:00+23:59"))  # year 0 in UTC: no datetime holds it
    assert cli_main(["prune", str(tmp_path / "runs"), "--older-than", "0s", "--json"]) == 0
    out, _ = _one_line(capsys)
    assert [Path(r["path"]).name for r in json.loads(out)["removed"]] == ["old"] and not run.exists()
