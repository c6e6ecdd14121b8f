"""Does the demo pipeline draw what it is asked? Background colour, shape colour, shape, on held-out prompts.

Colours are read by ghostviewer.demo.colour_check. The shape is classified by template matching: the
foreground mask (pixels not of the background's palette colour) is compared with masks drawn by
``shapes.draw`` for each shape at the mask's centroid, with the radius that gives the mask's area and a few
rotations; the best intersection-over-union wins. ``shape_classifier_accuracy`` measures that classifier on
ground-truth drawings.

torch is imported inside ``evaluate_demo`` only, so the classifier and the grid work without it.
"""

from __future__ import annotations

import functools
import math
import random
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ghostviewer.demo import colour_check, shapes

_ANGLES = (-0.2, 0.0, 0.2)
_NAMES = list(shapes.PALETTE)


def to_uint8(image: np.ndarray) -> np.ndarray:
    """A float (H, W, 3) image in [0, 1] (NaN allowed) as uint8."""
    clean = np.nan_to_num(np.asarray(image, dtype=np.float64), nan=0.0, posinf=1.0, neginf=0.0)
    return (np.clip(clean, 0.0, 1.0) * 255.0).round().astype(np.uint8)


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
    return shapes.draw(scene).mean(axis=2) >= 128


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


def _nearest_position(mask: np.ndarray) -> str | None:
    if mask.sum() < 12:
        return None
    ys, xs = np.nonzero(mask)
    size = mask.shape[0]
    cx, cy = (xs.mean() + 0.5) / size, (ys.mean() + 0.5) / size
    return min(shapes.POSITIONS, key=lambda p: math.dist(shapes.POSITIONS[p], (cx, cy)))


def score_image(image: np.ndarray, shape: str, colour: str, background: str,
                position: str | None = None) -> dict[str, Any]:
    """Read one generated image (float [0, 1] or uint8) against what its prompt asked for."""
    from ghostviewer.analysis.verdicts import image_verdict

    verdict = image_verdict(image)["label"]
    pixels = image if image.dtype == np.uint8 else to_uint8(image)
    reading = colour_check.read_colours(pixels)
    mask = foreground_mask(pixels, reading.background)
    read_shape, iou = classify_shape(mask) if reading.foreground is not None else (None, 0.0)
    row: dict[str, Any] = {
        "read_background": reading.background,
        "read_foreground": reading.foreground,
        "foreground_fraction": round(reading.foreground_fraction, 4),
        "read_shape": read_shape,
        "shape_iou": round(iou, 4),
        "read_position": _nearest_position(mask) if reading.foreground is not None else None,
        "verdict": verdict,
        "background_ok": reading.background == background,
        "foreground_ok": reading.foreground == colour,
        "shape_ok": read_shape == shape,
    }
    if position is not None:
        row["position_ok"] = row["read_position"] == position
    return row


def evaluate_demo(pipe: Any, combos: Sequence[tuple[str, str, str]], seeds: Sequence[int] = (0, 1),
                  steps: int = 20, guidance: float = 7.5, batch_size: int = 8,
                  grid_path: str | Path | None = None, grid_count: int = 12) -> dict[str, Any]:
    """One image per (combo × seed), prompted ``shapes.caption(shape, colour, bg, position)`` with the
    position cycling through the five named ones; returns the accuracies and one row per image.

    ``grid_path``: also write a PNG grid of ``grid_count`` images (the first seed's, spread over the combos)
    with their prompts underneath.
    """
    import torch

    positions = list(shapes.POSITIONS)
    jobs = []
    for i, (shape, colour, background) in enumerate(combos):
        position = positions[i % len(positions)]
        for seed in seeds:
            jobs.append({"prompt": shapes.caption(shape, colour, background, position), "seed": int(seed),
                         "shape": shape, "colour": colour, "background": background, "position": position})

    images: list[np.ndarray] = []
    for start in range(0, len(jobs), batch_size):
        batch = jobs[start : start + batch_size]
        with torch.no_grad():
            out = pipe(
                [job["prompt"] for job in batch],
                num_inference_steps=steps,
                guidance_scale=guidance,
                height=shapes.SIZE,
                width=shapes.SIZE,
                output_type="np",
                generator=[torch.Generator().manual_seed(job["seed"]) for job in batch],
            ).images
        images.extend(np.asarray(img) for img in out)

    rows = []
    for job, image in zip(jobs, images, strict=True):
        row = dict(job)
        row.update(score_image(image, job["shape"], job["colour"], job["background"], job["position"]))
        rows.append(row)

    def rate(key: str) -> float:
        return sum(bool(r[key]) for r in rows) / len(rows) if rows else 0.0

    per_shape: dict[str, str] = {}
    for shape in shapes.SHAPES:
        mine = [r for r in rows if r["shape"] == shape]
        if mine:
            per_shape[shape] = f"{sum(r['shape_ok'] for r in mine)}/{len(mine)}"
    result = {
        "images": len(rows),
        "background_accuracy": rate("background_ok"),
        "foreground_accuracy": rate("foreground_ok"),
        "shape_accuracy": rate("shape_ok"),
        "position_accuracy": rate("position_ok"),
        "shape_by_kind": per_shape,
        "bad_verdicts": sum(r["verdict"] != "ok" for r in rows),
        "rows": rows,
    }
    if grid_path is not None:
        first_seed = int(seeds[0]) if seeds else 0
        picks = _spread([i for i, job in enumerate(jobs) if job["seed"] == first_seed], grid_count,
                        len(positions))
        grid = make_grid([images[i] for i in picks], [jobs[i]["prompt"] for i in picks])
        Path(grid_path).parent.mkdir(parents=True, exist_ok=True)
        grid.save(grid_path, optimize=True)
        result["grid"] = str(grid_path)
    return result


def _spread(items: list[int], count: int, cycle: int) -> list[int]:
    """``count`` of ``items`` spread evenly, nudged so that the cycling positions vary along the picks."""
    if len(items) <= count:
        return items
    picks: list[int] = []
    for k in range(count):
        base = int(k * len(items) / count)
        nudged = next((j for j in range(base, len(items)) if j % cycle == k % cycle and j not in picks), base)
        picks.append(nudged if nudged not in picks else base)
    return [items[j] for j in sorted(set(picks))]


def make_grid(images: Sequence[np.ndarray], captions: Sequence[str], columns: int = 4, scale: int = 2,
              wrap: int = 22) -> Image.Image:
    """Images (float [0, 1] or uint8) in a grid with each caption under its image, on white."""
    side = shapes.SIZE * scale
    font = ImageFont.load_default(size=12)
    line_height = 15
    wrapped = [textwrap.wrap(text, wrap) for text in captions]
    text_rows = max((len(lines) for lines in wrapped), default=1)
    pad = 8
    cell_w, cell_h = side + 2 * pad, side + pad + text_rows * line_height + pad
    rows = math.ceil(len(images) / columns)
    grid = Image.new("RGB", (columns * cell_w, rows * cell_h), (255, 255, 255))
    pen = ImageDraw.Draw(grid)
    for i, (image, lines) in enumerate(zip(images, wrapped, strict=True)):
        x0, y0 = (i % columns) * cell_w, (i // columns) * cell_h
        pixels = image if np.asarray(image).dtype == np.uint8 else to_uint8(image)
        tile = Image.fromarray(pixels).resize((side, side), Image.Resampling.NEAREST)
        grid.paste(tile, (x0 + pad, y0 + pad))
        for j, line in enumerate(lines):
            width = pen.textlength(line, font=font)
            pen.text((x0 + (cell_w - width) / 2, y0 + pad + side + 4 + j * line_height), line,
                     fill=(30, 30, 30), font=font)
    return grid
