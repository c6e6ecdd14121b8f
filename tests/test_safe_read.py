"""One reader for files someone else made: regular files only, sizes capped before reading, depth bounded."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from ghostviewer.safe_read import loads, read_json, read_regular


class Refused(Exception):
    pass


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "tensors.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(Refused, match="not a regular file"):
        read_regular(fifo, Refused, max_bytes=100)


def test_a_file_over_its_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "model_index.json"
    with big.open("wb") as handle:
        handle.truncate(3 * 1024**3)  # sparse: 3 GB that were never written
    with pytest.raises(Refused, match="3,221,225,472 bytes, more than the 1,048,576"):
        read_json(big, Refused, max_bytes=1024**2)


def test_deep_json_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="nested too deeply"):
        loads("[" * 200_000 + "]" * 200_000, Refused, "manifest.json")
    with pytest.raises(Refused, match="not valid JSON"):
        loads("{", Refused, "manifest.json")


def test_hostile_model_index_is_a_usage_error(tmp_path: Path, capsys) -> None:
    from ghostviewer.cli import main

    (tmp_path / "model_index.json").write_text("[" * 200_000 + "]" * 200_000)
    assert main(["blocks", "--pipeline", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nested too deeply" in err and len(err.strip().splitlines()) == 1


def test_a_bomb_of_many_small_members_is_refused(tmp_path: Path) -> None:
    from ghostviewer.record.bundle_read import BundleError, check_bundle

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(40):  # each under the per-member floor; together 40 MiB of zeros in ~40 KiB
            zf.writestr(f"runs/r{i}/images/final.png", b"\0" * (1024**2 - 1))
    with pytest.raises(BundleError, match="in all"):
        check_bundle(bomb)


def test_a_name_ending_in_a_newline_is_not_a_safe_member_name() -> None:
    from ghostviewer.record.bundle_format import BundleError, check_member_name

    with pytest.raises(BundleError):
        check_member_name("runs/abc\n/run.sqlite")
    with pytest.raises(BundleError):
        check_member_name("README.txt\n")


def test_a_deep_safetensors_header_is_a_value_error() -> None:
    import io
    import struct

    from ghostviewer.record.reader import safetensors_header

    text = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(ValueError, match="nested too deeply"):
        safetensors_header(io.BytesIO(struct.pack("<Q", len(text)) + text).read)
