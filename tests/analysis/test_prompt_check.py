"""The demo's colour check: which colours a caption names, and whether the image shows them."""

from __future__ import annotations

import numpy as np
import pytest

from ghostviewer.analysis.prompt_check import CAST_LEVELS, NamedColours, named_colours, outside_judgement, prompt_check
from ghostviewer.demo import shapes


def _drawn(colour: str, background: str, shape: str = "circle") -> np.ndarray:
    return shapes.draw(shapes.Scene(shape, colour, background, 0.5, 0.5, 0.3, 0.0, None))


@pytest.mark.parametrize(("prompt", "named"), [
    ("a red circle on a blue background", NamedColours("red", "blue")),
    ("A large GREEN star on a white background, top left", NamedColours("green", "white")),
    ("a small circle on a black background", NamedColours(None, "black")),
    ("a purple cross", NamedColours("purple", None)),
    ("a circle", NamedColours(None, None)),
    ("red and blue", NamedColours(None, None)),  # a colour word before no shape or background names nothing
    ("a red circle and a blue square on an orange background", NamedColours("red", "orange")),  # the first one
    ("a crimson circle", NamedColours(None, None)),  # not a palette colour
])
def test_named_colours(prompt: str, named: NamedColours) -> None:
    assert named_colours(prompt) == named
    assert named.any == (named.shape is not None or named.background is not None)


def test_an_image_that_shows_what_the_prompt_asks() -> None:
    check = prompt_check(_drawn("red", "blue"), "a red circle on a blue background")
    assert check == {"ok": True, "score": 0.0, "reason": "", "read": {"shape": "red", "background": "blue"},
                     "named": {"shape": "red", "background": "blue"}, "cast": None, "colour_shift": 0.0,
                     "background_offset": [0.0, 0.0, 0.0]}
    float_image = _drawn("red", "blue").astype(np.float64) / 255  # a pipeline's output_type="np"
    assert prompt_check(float_image, "a red circle on a blue background")["ok"] is True  # type: ignore[index]


def test_each_colour_missed_counts_half() -> None:
    image = _drawn("yellow", "blue")
    half = prompt_check(image, "a red circle on a blue background")
    assert half is not None and half["ok"] is False and half["score"] == 0.5
    assert half["reason"] == "the shape reads yellow, the prompt asks for red"
    both = prompt_check(image, "a red circle on a white background")
    assert both is not None and both["score"] == 1.0
    assert both["reason"] == ("background reads blue, the prompt asks for white; "
                              "the shape reads yellow, the prompt asks for red")


def test_a_missing_shape_reads_nothing() -> None:
    flat = np.zeros((64, 64, 3), np.uint8)
    flat[:] = shapes.PALETTE["white"]
    check = prompt_check(flat, "a red circle on a white background")
    assert check is not None and check["reason"] == "the shape reads nothing, the prompt asks for red"


def test_a_prompt_without_colours_or_a_shape_colour_on_its_own_background_is_not_judged() -> None:
    assert prompt_check(_drawn("red", "blue"), "a circle") is None
    # Only the shape's colour is named and the background happens to be that colour: the shape cannot be told.
    ambiguous = prompt_check(_drawn("white", "red"), "a red circle")
    assert ambiguous is not None and ambiguous["ok"] is True and ambiguous["score"] == 0.0
    wrong = prompt_check(_drawn("white", "blue"), "a red circle")
    assert wrong is not None and wrong["score"] == 1.0  # one colour named, missed


def test_a_cast_moves_background_and_shape_alike() -> None:
    image = _drawn("red", "blue").astype(np.int16)
    image[..., 1] += int(CAST_LEVELS) + 10  # a stray bias on the whole image: both colours gain green
    check = prompt_check(np.clip(image, 0, 255).astype(np.uint8), "a red circle on a blue background")
    assert check is not None and check["ok"] is True  # the labels still read right
    assert "a colour cast" in str(check["cast"]) and check["colour_shift"] == int(CAST_LEVELS) + 10
    image = _drawn("red", "blue").astype(np.int16)
    image[..., 0][image[..., 2] > 150] += int(CAST_LEVELS) + 10  # only the background off: a colour's own error
    check = prompt_check(np.clip(image, 0, 255).astype(np.uint8), "a red circle on a blue background")
    assert check is not None and check["cast"] is None and check["colour_shift"] == 0.0


@pytest.mark.parametrize(("prompt", "reason"), [
    ("a red circle on a blue background", None),
    ("a photo of a cat", "names no palette colour"),
    ("", "empty caption"),
    ("a red circle on a blue background, photorealistic", "only the named colours are judged"),
])
def test_a_caption_outside_what_the_check_can_judge_says_so(prompt: str, reason: str | None) -> None:
    said = outside_judgement(prompt)
    assert (said is None) if reason is None else (reason in str(said))
