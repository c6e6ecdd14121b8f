"""A watched call's record names its input images by path (`{"$image": "images/call_image.png"}`). A record edited
to name a file outside its folder, or an image declaring a decompression bomb, is refused in one line when the call
is re-issued: the file is never decoded, nor copied into the replay's own record (and so into a bundle of it)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import StableDiffusionImg2ImgPipeline
from PIL import Image

import ghostviewer
from ghostviewer import api
from ghostviewer.record import RecordError


@pytest.fixture(scope="module")
def watched(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StableDiffusionImg2ImgPipeline]:
    pipe = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
    runs = tmp_path_factory.mktemp("watched")
    with ghostviewer.watch(pipe, runs_dir=runs) as watcher:
        pipe("a red circle", image=Image.fromarray(np.full((64, 64, 3), 200, np.uint8)), strength=0.5,
             num_inference_steps=2, generator=torch.Generator().manual_seed(3), output_type="np")
    return Path(watcher.runs[0]["run_dir"]), pipe


def _bomb() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(64))) + chunk(b"IEND", b""))


def _point_image_at(run: Path, relpath: str) -> None:
    conn = sqlite3.connect(run / "run.sqlite")
    call = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'call'").fetchone()[0])
    assert "$image" in call["kwargs"]["image"]
    call["kwargs"]["image"]["$image"] = relpath
    conn.execute("UPDATE meta SET value = ? WHERE key = 'call'", (json.dumps(call),))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("case", ["outside", "absolute", "bomb"])
def test_a_recorded_input_image_that_escapes_or_explodes_is_refused(case: str, watched, tmp_path: Path) -> None:
    original, pipe = watched
    run = shutil.copytree(original, tmp_path / "edited")
    secret = tmp_path / "secret.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(secret)
    if case == "bomb":
        (run / "images" / "call_bomb.png").write_bytes(_bomb())
    relpath = {"outside": "../secret.png", "absolute": str(secret), "bomb": "images/call_bomb.png"}[case]
    _point_image_at(run, relpath)
    match = "declares more than" if case == "bomb" else "names an image outside its folder"
    with pytest.raises(RecordError, match=match) as info:
        api.replay(run, times=1, pipeline=pipe, runs_dir=tmp_path / "replays")
    assert "\n" not in str(info.value)
