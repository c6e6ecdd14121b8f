"""A prompt list reads files from its own folder only (spec/prompt_lists.py): an init image, mask, control image or
LoRA named outside it — by an absolute path, by `..`, or through a link placed beside the list — is refused in one
line naming the file and the folder, unless the user allows it (ListOptions.outside_files); files in the folder or
below are read as before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer.spec.prompt_lists import ListOptions, OutsideFilesError, read_prompt_list


def _image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    return path


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """(the list's folder, a private folder beside it with someone's photo in it)."""
    home, private = tmp_path / "shared-list", tmp_path / "private"
    _image(private / "photo.png")
    _image(home / "inputs" / "init.png")
    (private / "style.safetensors").write_bytes(b"\0" * 16)
    return home, private


def _jsonl(home: Path, rows: list[dict]) -> Path:
    path = home / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_files_in_the_lists_folder_are_read(folders: tuple[Path, Path]) -> None:
    home, _ = folders
    rows = read_prompt_list(_jsonl(home, [{"prompt": "a", "init_image": "inputs/init.png"},
                                          {"prompt": "b", "mask": str(home / "inputs" / "init.png")}]))
    assert [Path(r.get("init_image") or r["mask"]) for r in rows] == [home / "inputs" / "init.png"] * 2


@pytest.mark.parametrize("key", ["init_image", "mask", "control_image"])
def test_an_image_outside_the_folder_is_refused_in_one_line(folders: tuple[Path, Path], key: str) -> None:
    home, private = folders
    listing = _jsonl(home, [{"prompt": "fine"}, {"prompt": "a cat", key: str(private / "photo.png")}])
    with pytest.raises(OutsideFilesError) as info:
        read_prompt_list(listing)
    message = str(info.value)
    assert "\n" not in message and f"names {key} {private / 'photo.png'}" in message
    assert f"outside the list's folder {home}" in message and "--allow-outside-files" in message
    assert info.value.file == str(private / "photo.png") and info.value.folder == home


def test_dot_dot_and_a_link_beside_the_list_are_outside_too(folders: tuple[Path, Path]) -> None:
    home, private = folders
    (home / "innocent.png").symlink_to(private / "photo.png")
    for named in ("../private/photo.png", "innocent.png"):
        with pytest.raises(OutsideFilesError, match="outside the list's folder"):
            read_prompt_list(_jsonl(home, [{"prompt": "a cat", "init_image": named}]))


def test_a_lora_outside_the_folder_is_refused_in_a_csv_too(folders: tuple[Path, Path]) -> None:
    home, private = folders
    listing = home / "rows.csv"
    listing.write_text(f"prompt,lora\na cat,{private / 'style.safetensors'}:0.8\n", encoding="utf-8")
    with pytest.raises(OutsideFilesError, match="names lora .*style.safetensors"):
        read_prompt_list(listing)


def test_the_user_can_allow_files_from_outside(folders: tuple[Path, Path]) -> None:
    home, private = folders
    listing = _jsonl(home, [{"prompt": "a cat", "init_image": str(private / "photo.png"),
                             "lora": f"{private / 'style.safetensors'}:0.5"}])
    (row,) = read_prompt_list(listing, ListOptions(outside_files=True))
    assert row["init_image"] == str(private / "photo.png")
    assert row["lora"] == (f"{private / 'style.safetensors'}:0.5",)
