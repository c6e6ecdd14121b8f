"""The demo's shape check: which of its shapes an image shows, by template matching.

The foreground mask (pixels not of the background's palette colour, ghostviewer.demo.colour_check) is compared
with masks drawn by ``shapes.draw`` for each shape at the mask's centroid, with the radius that gives the mask's
area and a few rotations; the best intersection-over-union wins. ``shape_classifier_accuracy`` measures that
classifier on ground-truth drawings. Like the rest of ghostviewer.demo, this imports no other part of
GhostViewer: analysis reads the demo's pictures with it, and the demo model's evaluation
(engine/loading/demo_model/evaluate.py) with analysis' verdict besides.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any

import numpy as np

from ghostviewer.demo import colour_check, shapes

_ANGLES = (-0.2, 0.0, 0.2)
_NAMES = list(shapes.PALETTE)


def foreground_mask(image: np.ndarray, background: str) -> np.ndarray:
    """(H, W) bool: pixels whose nearest palette colour is not the background's."""
    return colour_check.label_pixels(image) != _NAMES.index(background)


@functools.lru_cache(maxsize=1)
def _area_per_radius2() -> dict[str, float]:
    """Drawn area in pixels per (radius in pixels)², per shape, measured on a large centred drawing."""
    out = {}
    radius = 0.3
    for shape in shapes.SHAPES:
        mask = _template(shape, 0.5, 0.5, radius, 0.0)
        out[shape] = float(mask.sum()) / (radius * shapes.SIZE) ** 2
    return out


def _template(shape: str, cx: float, cy: float, radius: float, angle: float) -> np.ndarray:
    scene = shapes.Scene(shape, "white", "black", cx, cy, radius, angle, None)
    return shapes.draw_grey(scene) >= 128  # white on black: the mean of draw()'s three equal channels


def classify_shape(mask: np.ndarray) -> tuple[str | None, float]:
    """(best shape, its IoU) for a (64, 64) foreground mask; (None, 0.0) when the mask is (nearly) empty."""
    area = float(mask.sum())
    if area < 12:
        return None, 0.0
    ys, xs = np.nonzero(mask)
    size = mask.shape[0]
    cx, cy = (xs.mean() + 0.5) / size, (ys.mean() + 0.5) / size
    best: tuple[str | None, float] = (None, -1.0)
    for shape, per_r2 in _area_per_radius2().items():
        radius = math.sqrt(area / per_r2) / size
        # The triangle is drawn around (cx, cy + 0.15 r); its centroid is that point.
        centre_y = cy - 0.15 * radius if shape == "triangle" else cy
        for angle in _ANGLES if shape != "circle" else (0.0,):
            template = _template(shape, cx, centre_y, radius, angle)
            union = np.logical_or(mask, template).sum()
            iou = float(np.logical_and(mask, template).sum() / union) if union else 0.0
            if iou > best[1]:
                best = (shape, iou)
    return best


def shape_classifier_accuracy(count: int = 200, seed: int = 0) -> dict[str, Any]:
    """The shape classifier on ground-truth drawings (random scenes, all combinations): accuracy, misses."""
    rng = random.Random(seed)
    combos = shapes.all_combos()
    hits = 0
    confusions: dict[str, int] = {}
    for _ in range(count):
        scene = shapes.random_scene(rng, combos)
        image = shapes.draw(scene)
        shape, _ = classify_shape(foreground_mask(image, scene.background))
        if shape == scene.shape:
            hits += 1
        else:
            key = f"{scene.shape}->{shape}"
            confusions[key] = confusions.get(key, 0) + 1
    return {"accuracy": hits / count, "count": count, "confusions": confusions}


def nearest_position(mask: np.ndarray) -> str | None:
    """The named position nearest the mask's centroid; None when the mask is (nearly) empty."""
    if mask.sum() < 12:
        return None
    ys, xs = np.nonzero(mask)
    size = mask.shape[0]
    cx, cy = (xs.mean() + 0.5) / size, (ys.mean() + 0.5) / size
    return min(shapes.POSITIONS, key=lambda p: math.dist(shapes.POSITIONS[p], (cx, cy)))
