"""The prompt panel's input files (init image, mask, control image, ControlNet folder, LoRA files): what an image
file is (its size read from its header, no decode), a small copy for its thumbnail, and the checks the engine makes on
them before a run (engine/run/call_inputs.py), in the engine's words — so the window refuses a mask of another size
before anything is queued instead of after the engine has it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QImage, QImageReader

from ghostviewer.spec.checks import SettingsError, check_size

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
LORA_SUFFIXES = (".safetensors",)
THUMB_READ_PX = 256  # a big image is read this small for its thumbnail
# spec field -> (the flag the engine names it by, the words the window names it by)
IMAGE_FIELDS = {"init_image": ("--init-image", "init image"), "mask": ("--mask", "mask"),
                "control_image": ("--control-image", "control image")}


@dataclass(frozen=True)
class ImageInfo:
    size: tuple[int, int] | None  # (width, height); None: not readable (problem says why)
    problem: str = ""


_INFO: dict[tuple[str, int, int], ImageInfo] = {}  # (path, mtime, bytes) -> its header, read once


def is_image_file(path: str) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def image_info(path: str, flag: str) -> ImageInfo:
    """An image file's size, or why it cannot be used (missing, not a file, not an image), in the engine's words."""
    try:
        stat = os.stat(path)
    except OSError:
        return ImageInfo(None, f"{flag} {path}: no such file")
    if not os.path.isfile(path):
        return ImageInfo(None, f"{flag} {path}: not a file")
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _INFO:
        reader = QImageReader(path)
        size = reader.size()
        if size.isValid() and reader.canRead():
            _INFO[key] = ImageInfo((size.width(), size.height()))
        else:
            reason = reader.errorString() or "not an image"
            _INFO[key] = ImageInfo(None, f"{flag} {path}: cannot read it as an image ({reason})")
    return _INFO[key]


def read_thumbnail(path: str) -> np.ndarray | None:
    """(H, W, 3) uint8 of the file, at most THUMB_READ_PX on its longer side; None when it cannot be read."""
    reader = QImageReader(path)
    size = reader.size()
    if size.isValid() and max(size.width(), size.height()) > THUMB_READ_PX:
        reader.setScaledSize(size.scaled(QSize(THUMB_READ_PX, THUMB_READ_PX), Qt.AspectRatioMode.KeepAspectRatio))
    image = reader.read()
    if image.isNull():
        return None
    return qimage_rgb(image)


def qimage_rgb(image: QImage) -> np.ndarray:
    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    width, height, line = rgb.width(), rgb.height(), rgb.bytesPerLine()
    data = np.frombuffer(rgb.constBits(), np.uint8, count=line * height).reshape(height, line)
    return data[:, :width * 3].reshape(height, width, 3).copy()


def input_problems(init_image: str, mask: str, control_image: str, width: int, height: int) -> dict[str, str]:
    """field -> why the engine would refuse that input file ("" files are not set and not checked): missing or
    unreadable, a mask of another size than the init image, an init image whose size is not a run's size or
    differs from the width and height asked for."""
    problems: dict[str, str] = {}
    infos: dict[str, ImageInfo] = {}
    for key, path in (("init_image", init_image), ("mask", mask), ("control_image", control_image)):
        if path:
            infos[key] = info = image_info(path, IMAGE_FIELDS[key][0])
            if info.problem:
                problems[key] = info.problem
    init = infos.get("init_image")
    if init is None or init.size is None:
        return problems
    w, h = init.size
    if (width and width != w) or (height and height != h):
        problems["init_image"] = (f"the init image {init_image} is {w}×{h} but the run asks for "
                                  f"{width or w}×{height or h}: resize the image, or leave --width/--height out")
    else:
        try:
            check_size("the init image's width", w)
            check_size("the init image's height", h)
        except SettingsError as exc:
            problems["init_image"] = f"{exc} ({init_image} is {w}×{h})"
    masked = infos.get("mask")
    if masked is not None and masked.size is not None and masked.size != init.size:
        mw, mh = masked.size
        problems["mask"] = (f"the mask {mask} is {mw}×{mh} but the init image is {w}×{h}: they must be the "
                            "same size")
    return problems


def missing_note(words: str, path: str) -> str:
    return f"the {words} {path} is no longer there: left out"
