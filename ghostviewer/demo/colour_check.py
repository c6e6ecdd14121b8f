"""A simple colour-segmentation check: does an image show the asked background and shape colour?

Every pixel is labelled with its nearest palette colour. The background is the commonest label on the image's
border; the shape colour is the commonest label among the other pixels. `background_offset`: how far, per RGB
channel in 0-255 levels, the border pixels read as background sit from their palette colour (the median: a
shape that bleeds into the border does not move it) — the demo
draws flat palette colours, so a cast (a shifted decoder bias) shows there even when every label is still right;
`foreground_offset` is the same for the shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ghostviewer.demo.shapes import PALETTE

_NAMES = list(PALETTE)
_COLOURS = np.array([PALETTE[n] for n in _NAMES], dtype=np.float32)


@dataclass(frozen=True)
class ColourReading:
    background: str
    foreground: str | None
    foreground_fraction: float
    background_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    foreground_offset: tuple[float, float, float] | None = None  # the same for the pixels read as the shape


def label_pixels(image: np.ndarray) -> np.ndarray:
    """(H, W) indices into the palette of the nearest colour to each pixel of an (H, W, 3) uint8 image."""
    pixels = image.reshape(-1, 3).astype(np.float32)
    distances = ((pixels[:, None, :] - _COLOURS[None, :, :]) ** 2).sum(-1)
    return distances.argmin(1).reshape(image.shape[:2])


def read_colours(image: np.ndarray, min_foreground: float = 0.03) -> ColourReading:
    labels = label_pixels(image)
    border = np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])
    background = int(np.bincount(border, minlength=len(_NAMES)).argmax())
    pixels = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]]).astype(np.float32)
    offset = np.median(pixels[border == background], axis=0) - _COLOURS[background]
    offsets = (float(offset[0]), float(offset[1]), float(offset[2]))
    rest = labels[labels != background]
    fraction = rest.size / labels.size
    if fraction < min_foreground:
        return ColourReading(_NAMES[background], None, fraction, offsets)
    foreground = int(np.bincount(rest, minlength=len(_NAMES)).argmax())
    shape = np.median(image.reshape(-1, 3)[labels.reshape(-1) == foreground].astype(np.float32), axis=0)
    shape -= _COLOURS[foreground]
    return ColourReading(_NAMES[background], _NAMES[foreground], fraction, offsets,
                         (float(shape[0]), float(shape[1]), float(shape[2])))
