"""Procedurally drawn 64×64 scenes — one coloured shape on a plain background — and their captions.

The demo pipeline is trained on these, so that a prompt such as "a red circle on a blue background, top left"
has a known right answer and a black, noisy or off-colour image is unmistakably a ghost.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

SIZE = 64
SUPERSAMPLE = 4

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 35),
    "orange": (245, 140, 20),
    "yellow": (245, 225, 40),
    "green": (40, 170, 60),
    "blue": (35, 75, 220),
    "purple": (140, 50, 180),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
SHAPES = ("circle", "square", "triangle", "star", "cross")
POSITIONS: dict[str, tuple[float, float]] = {
    "top left": (0.34, 0.34),
    "top right": (0.66, 0.34),
    "bottom left": (0.34, 0.66),
    "bottom right": (0.66, 0.66),
    "center": (0.5, 0.5),
}
# Radius as a fraction of the image side; a size word is only used when the radius falls in its band.
RADIUS_RANGE = (0.18, 0.36)
SIZE_WORDS = {"small": (0.18, 0.24), "large": (0.30, 0.36)}
POSITION_JITTER = 0.05


@dataclass(frozen=True)
class Scene:
    shape: str
    colour: str
    background: str
    cx: float
    cy: float
    radius: float
    angle: float
    position: str | None  # the named position it was placed at, or None for anywhere

    @property
    def combo(self) -> tuple[str, str, str]:
        return (self.shape, self.colour, self.background)

    def size_word(self) -> str | None:
        for word, (lo, hi) in SIZE_WORDS.items():
            if lo <= self.radius <= hi:
                return word
        return None


def caption(shape: str, colour: str, background: str, position: str | None = None, size: str | None = None) -> str:
    """The canonical caption: "a [small ]red circle on a blue background[, top left]"."""
    size_part = f"{size} " if size else ""
    text = f"a {size_part}{colour} {shape} on a {background} background"
    return f"{text}, {position}" if position else text


def caption_for(scene: Scene, rng: random.Random, keep_position: float = 0.75, keep_size: float = 0.6) -> str:
    """A caption for a drawn scene, sometimes leaving out position and size so the seed decides them."""
    position = scene.position if scene.position and rng.random() < keep_position else None
    size = scene.size_word() if rng.random() < keep_size else None
    return caption(scene.shape, scene.colour, scene.background, position, size)


def all_combos() -> list[tuple[str, str, str]]:
    return [(s, c, b) for s, c, b in itertools.product(SHAPES, PALETTE, PALETTE) if c != b]


def held_out_combos(count: int = 30, seed: int = 1234) -> list[tuple[str, str, str]]:
    """(shape, colour, background) triples that training never sees, for the generalisation check.

    Chosen so every shape, colour and background still appears in training many times.
    """
    rng = random.Random(seed)
    combos = all_combos()
    rng.shuffle(combos)
    return sorted(combos[:count])


def random_scene(rng: random.Random, combos: list[tuple[str, str, str]]) -> Scene:
    shape, colour, background = rng.choice(combos)
    radius = rng.uniform(*RADIUS_RANGE)
    if rng.random() < 0.8:
        position = rng.choice(list(POSITIONS))
        ax, ay = POSITIONS[position]
        cx = ax + rng.uniform(-POSITION_JITTER, POSITION_JITTER)
        cy = ay + rng.uniform(-POSITION_JITTER, POSITION_JITTER)
    else:
        position = None
        cx, cy = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7)
    angle = rng.uniform(-0.25, 0.25) if shape in ("square", "cross", "star", "triangle") else 0.0
    return Scene(shape, colour, background, cx, cy, radius, angle, position)


def _polygon(cx: float, cy: float, radii: list[float], angle: float, start: float) -> list[tuple[float, float]]:
    n = len(radii)
    return [
        (cx + r * math.cos(start + angle + 2 * math.pi * i / n), cy + r * math.sin(start + angle + 2 * math.pi * i / n))
        for i, r in enumerate(radii)
    ]


def draw(scene: Scene) -> np.ndarray:
    """Render a scene to a (64, 64, 3) uint8 array, anti-aliased by supersampling."""
    side = SIZE * SUPERSAMPLE
    image = Image.new("RGB", (side, side), PALETTE[scene.background])
    _paint(ImageDraw.Draw(image), scene, side, PALETTE[scene.colour])
    return np.asarray(image.resize((SIZE, SIZE), Image.Resampling.LANCZOS))


def draw_grey(scene: Scene) -> np.ndarray:
    """A scene of grey colours (white, black) in one band: (64, 64) uint8, exactly each channel of ``draw(scene)``
    at a third of its cost (one band resampled, not three) — for the shape check's templates."""
    background, colour = PALETTE[scene.background], PALETTE[scene.colour]
    if len(set(background)) != 1 or len(set(colour)) != 1:
        raise ValueError(f"draw_grey needs grey colours, not {scene.colour} on {scene.background}")
    side = SIZE * SUPERSAMPLE
    image = Image.new("L", (side, side), background[0])
    _paint(ImageDraw.Draw(image), scene, side, colour[0])
    return np.asarray(image.resize((SIZE, SIZE), Image.Resampling.LANCZOS))


def _paint(pen: ImageDraw.ImageDraw, scene: Scene, side: int, fill: int | tuple[int, ...]) -> None:
    cx, cy, r = scene.cx * side, scene.cy * side, scene.radius * side
    up = -math.pi / 2
    if scene.shape == "circle":
        pen.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif scene.shape == "square":
        pen.polygon(_polygon(cx, cy, [r * 1.05] * 4, scene.angle, math.pi / 4), fill=fill)
    elif scene.shape == "triangle":
        pen.polygon(_polygon(cx, cy + 0.15 * r, [r * 1.2] * 3, scene.angle, up), fill=fill)
    elif scene.shape == "star":
        pen.polygon(_polygon(cx, cy, [r * 1.15, r * 0.5] * 5, scene.angle, up), fill=fill)
    elif scene.shape == "cross":
        arm = r * 0.38
        for dx, dy in ((r, arm), (arm, r)):
            corners = [(-dx, -dy), (dx, -dy), (dx, dy), (-dx, dy)]
            cos, sin = math.cos(scene.angle), math.sin(scene.angle)
            pen.polygon([(cx + x * cos - y * sin, cy + x * sin + y * cos) for x, y in corners], fill=fill)
    else:
        raise ValueError(f"unknown shape {scene.shape!r}")


def make_dataset(count: int, seed: int, exclude: list[tuple[str, str, str]]) -> tuple[np.ndarray, list[Scene]]:
    """`count` scenes drawn from every combination except `exclude`: images (N, 64, 64, 3) uint8 and scenes."""
    rng = random.Random(seed)
    banned = set(exclude)
    combos = [c for c in all_combos() if c not in banned]
    scenes = [random_scene(rng, combos) for _ in range(count)]
    images = np.stack([draw(s) for s in scenes])
    return images, scenes


def vocabulary() -> list[str]:
    """Every word a caption can contain, for the demo tokenizer."""
    words = {"a", "on", "background", ","} | set(PALETTE) | set(SHAPES) | set(SIZE_WORDS)
    for position in POSITIONS:
        words |= set(position.split())
    return sorted(words)
