"""Does the demo pipeline draw what it is asked? Background colour, shape colour, shape, on held-out prompts.

Colours are read by ghostviewer.demo.colour_check, the shape by ghostviewer.demo.shape_check; each image is also
given the image verdict (analysis/verdicts.py), so a held-out prompt that draws black counts as a bad verdict.
scripts/eval_demo.py prints the figures and writes the README grid.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from ghostviewer.analysis.image_stats import as_uint8
from ghostviewer.analysis.verdicts import image_verdict
from ghostviewer.demo import colour_check, shapes
from ghostviewer.demo.shape_check import classify_shape, foreground_mask, nearest_position


def score_image(image: np.ndarray, shape: str, colour: str, background: str,
                position: str | None = None) -> dict[str, Any]:
    """Read one generated image (float [0, 1] or uint8) against what its prompt asked for."""
    verdict = image_verdict(image)["label"]
    pixels = image if image.dtype == np.uint8 else as_uint8(image)
    reading = colour_check.read_colours(pixels)
    mask = foreground_mask(pixels, reading.background)
    read_shape, iou = classify_shape(mask) if reading.foreground is not None else (None, 0.0)
    row: dict[str, Any] = {
        "read_background": reading.background,
        "read_foreground": reading.foreground,
        "foreground_fraction": round(reading.foreground_fraction, 4),
        "read_shape": read_shape,
        "shape_iou": round(iou, 4),
        "read_position": nearest_position(mask) if reading.foreground is not None else None,
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
        pixels = image if np.asarray(image).dtype == np.uint8 else as_uint8(image)
        tile = Image.fromarray(pixels).resize((side, side), Image.Resampling.NEAREST)
        grid.paste(tile, (x0 + pad, y0 + pad))
        for j, line in enumerate(lines):
            width = pen.textlength(line, font=font)
            pen.text((x0 + (cell_w - width) / 2, y0 + pad + side + 4 + j * line_height), line,
                     fill=(30, 30, 30), font=font)
    return grid
