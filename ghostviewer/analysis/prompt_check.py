"""Does the demo's image show the colours its prompt names? The demo's own colour check, as part of the verdict.

`named_colours` reads the demo's caption grammar ("a [size] COLOUR SHAPE on a COLOUR background[, position]"):
the palette word right before a shape word is the shape's colour, the one right before "background" is the
background's. `prompt_check` reads the image with ghostviewer.demo.colour_check (each pixel labelled with its
nearest palette colour; the background is the commonest label on the border, the shape colour the commonest
among the rest) and says which named colour is not there. Geometry is not judged: the demo still draws some
shapes as blobs.

Calibration (benchmarks/false_alarms.py, 2026-12-01): on 100 healthy demo runs at 20 DDIM steps (prompts and
seeds not used to build the baseline) both colours were read right every time (0 false alarms). With fewer
steps the demo itself misdraws: 45 runs (15 prompts × 3 seeds) read off-prompt 23 times at 2 steps, 3 at 4,
1 at 6, 0 at 10 — so the check is made from MIN_STEPS steps on. A prompt that names a colour only for the
shape, when the image's background happens to be that colour, is not judged (the shape cannot be told from
the background). The check applies to any pipeline whose tokenizer has the demo's vocabulary (engine/run/judge.py);
`outside_judgement` says when a caption falls outside what it can judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ghostviewer.analysis.image_stats import as_uint8
from ghostviewer.demo import colour_check, shapes

_WORD = re.compile(r"[a-z]+")
MIN_STEPS = 10  # below this many denoising steps the demo does not draw its colours reliably
# A colour cast moves every colour the same way; a healthy model's colour errors are each colour's own. In 0-255
# levels, one channel: background and shape both this far off their palette colours, the same way (CAST_LEVELS), or
# — no shape to read — the background alone (BACKGROUND_CAST_LEVELS).
CAST_LEVELS = 36.0  # healthy worst 27 (a fine-tuned demo: a red background drawn orange-ish), the demo's own 20
BACKGROUND_CAST_LEVELS = 40.0


@dataclass(frozen=True)
class NamedColours:
    shape: str | None  # the colour the prompt gives the shape
    background: str | None

    @property
    def any(self) -> bool:
        return self.shape is not None or self.background is not None


def named_colours(prompt: str) -> NamedColours:
    """The shape and background colours a demo prompt names (None where it names none)."""
    words = _WORD.findall(prompt.lower())
    shape_colour = background = None
    for before, word in zip(words, words[1:]):
        if before not in shapes.PALETTE:
            continue
        if word == "background" and background is None:
            background = before
        elif word in shapes.SHAPES and shape_colour is None:
            shape_colour = before
    return NamedColours(shape_colour, background)


def outside_judgement(prompt: str) -> str | None:
    """Why the colour check cannot judge this caption (None: it can, at least in part): it names no palette colour
    of a shape or background, or (said alongside) it uses words the demo was never taught."""
    words = _WORD.findall(prompt.lower())
    known = set(shapes.vocabulary())
    unknown = sorted({w for w in words if w not in known})
    strange = f"words the demo was never taught: {', '.join(unknown[:6])}{' …' if len(unknown) > 6 else ''}"
    if not named_colours(prompt).any:
        if not words:
            return "an empty caption names no colour to check"
        return "the caption names no palette colour of a shape or background" + (f" ({strange})" if unknown else "")
    return f"only the named colours are judged ({strange})" if unknown else None


def prompt_check(image: np.ndarray, prompt: str) -> dict[str, object] | None:
    """None when the prompt names no colour; else {"ok", "score", "reason", "read": {...}, "named": {...}}.

    `score`: the fraction of the named colours the image does not show (0.0, 0.5 or 1.0).
    """
    named = named_colours(prompt)
    if not named.any:
        return None
    reading = colour_check.read_colours(as_uint8(image))
    misses = []
    if named.background is not None and reading.background != named.background:
        misses.append(f"background reads {reading.background}, the prompt asks for {named.background}")
    if named.shape is not None:
        ambiguous = named.background is None and reading.background == named.shape
        if not ambiguous and reading.foreground != named.shape:
            found = reading.foreground or "nothing"
            misses.append(f"the shape reads {found}, the prompt asks for {named.shape}")
    count = int(named.shape is not None) + int(named.background is not None)
    cast, shift = _cast(named, reading)
    return {
        "cast": cast,
        "colour_shift": shift,
        "background_offset": [round(v, 1) for v in reading.background_offset],
        "ok": not misses,
        "score": len(misses) / count,
        "reason": "; ".join(misses),
        "read": {"shape": reading.foreground, "background": reading.background},
        "named": {"shape": named.shape, "background": named.background},
    }



def _cast(named: NamedColours, reading: colour_check.ColourReading) -> tuple[str | None, float | None]:
    """(why the image reads as cast, or None; the shift measured, in levels: shared by the background and the shape
    where both read as named, else the background's own; None when the background is not the one named)."""
    if named.background is None or reading.background != named.background:
        return None, None
    bg = reading.background_offset
    fg = reading.foreground_offset
    if fg is not None and reading.foreground is not None and named.shape in (None, reading.foreground):
        joint = [min(abs(b), abs(f)) * (1 if b > 0 else -1) if b * f > 0 else 0.0 for b, f in zip(bg, fg)]
        channel = int(np.argmax(np.abs(joint)))
        level = joint[channel]
        if abs(level) > CAST_LEVELS:
            return (f"background and shape both {level:+.0f} levels off their colours in {'RGB'[channel]} "
                    "(a colour cast)"), round(abs(level), 1)
        return None, round(abs(level), 1)
    channel = int(np.argmax(np.abs(bg)))
    level = bg[channel]
    if abs(level) > BACKGROUND_CAST_LEVELS:
        return f"the {named.background} background is {level:+.0f} levels off its colour in {'RGB'[channel]} " \
               "(a colour cast)", round(abs(level), 1)
    return None, None
