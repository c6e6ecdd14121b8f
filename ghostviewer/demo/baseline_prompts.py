"""The prompts the demo pipeline's baseline is built from: every form a user types, not only full captions.

Full captions (with and without a position or a size word), a shape with its colour only, a shape on a named
background only, and two-word prompts ("red circle"), so that the text encoder's healthy envelope covers short
prompts too. Held-out checks (benchmarks/false_alarms.py) draw their prompts with another generator and seed.
"""

from __future__ import annotations

import random

from ghostviewer.demo import shapes

FORMS = ("full", "full-position", "full-size", "colour-shape", "short", "shape-background")


def baseline_prompts(count: int, seed: int = 5) -> list[str]:
    """`count` demo prompts, cycling through FORMS, over random shape × colour × background combinations."""
    rng = random.Random(seed)
    combos = shapes.all_combos()
    positions = list(shapes.POSITIONS)
    prompts = []
    for i in range(count):
        shape, colour, background = rng.choice(combos)
        form = FORMS[i % len(FORMS)]
        if form == "full":
            prompts.append(shapes.caption(shape, colour, background))
        elif form == "full-position":
            prompts.append(shapes.caption(shape, colour, background, rng.choice(positions)))
        elif form == "full-size":
            size = rng.choice(list(shapes.SIZE_WORDS))
            prompts.append(shapes.caption(shape, colour, background, rng.choice([None, *positions]), size))
        elif form == "colour-shape":
            prompts.append(f"a {colour} {shape}")
        elif form == "short":
            prompts.append(f"{colour} {shape}")
        else:
            prompts.append(f"a {shape} on a {background} background")
    return prompts
