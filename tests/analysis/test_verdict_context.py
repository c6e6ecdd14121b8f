"""The verdict in context: an 'ok' image relabelled color_cast against the baseline, or off_prompt against its
prompt; a ghost the image verdict found keeps its label."""

from __future__ import annotations

import numpy as np
import pytest

from ghostviewer.analysis.baseline import Baseline
from ghostviewer.analysis.envelope import Envelope
from ghostviewer.analysis.image_stats import COLOUR_STATS, colour_stats
from ghostviewer.analysis.verdict_context import verdict_in_context
from ghostviewer.analysis.verdicts import image_verdict
from ghostviewer.demo import shapes
from tests.analysis.records import BASELINE_SETTINGS, IDENTITY

PROMPT = "a red circle on a white background"


def _drawn(colour: str = "red", background: str = "white") -> np.ndarray:
    return shapes.draw(shapes.Scene("circle", colour, background, 0.5, 0.5, 0.3, 0.0, None)).astype(np.float64) / 255


def _baseline(names: tuple[str, ...] = COLOUR_STATS, extra: dict[str, float] | None = None) -> Baseline:
    """Healthy colour statistics = those of the red-on-white drawing, scale 0.01 (colour margin 3: ± 0.03)."""
    stats = {**colour_stats(_drawn()), **(extra or {})}
    values = tuple(stats[n] for n in names)
    image = (names, Envelope(values, (0.01,) * len(names), values, values))
    return Baseline(IDENTITY, BASELINE_SETTINGS, 2, {}, image)


def _judge(image: np.ndarray, prompt: str = PROMPT, **kwargs: object) -> dict:
    return verdict_in_context(image_verdict(image), image, prompt, **kwargs)  # type: ignore[arg-type]


def test_an_image_inside_its_baseline_and_prompt_stays_ok() -> None:
    result = _judge(_drawn(), baseline=_baseline(), demo=True)
    assert result["label"] == "ok" and "reason" not in result
    assert result["scores"]["color_z"] == 0.0 and result["scores"]["off_prompt"] == 0.0


def test_no_baseline_and_no_demo_adds_nothing() -> None:
    verdict = image_verdict(_drawn())
    assert verdict_in_context(verdict, _drawn(), PROMPT) == verdict
    assert verdict_in_context(verdict, _drawn(), PROMPT) is not verdict  # a new dict


def test_a_shift_out_of_the_baselines_range_is_a_color_cast() -> None:
    shifted = np.clip(_drawn() - np.array([0.0, 0.1, 0.0]), 0, 1)  # the greens dimmed: still ok on its own
    assert image_verdict(shifted)["label"] == "ok"
    result = _judge(shifted, baseline=_baseline())
    assert result["label"] == "color_cast"
    assert result["scores"]["color_z"] < -3
    assert result["reason"].endswith("robust z-units off this pipeline's healthy range")
    assert result["reason"].split()[0].endswith("_g")  # a green statistic is named


def test_a_shape_of_another_colour_is_off_prompt_on_the_demo() -> None:
    blue = _drawn("blue")
    result = _judge(blue, demo=True)
    assert result["label"] == "off_prompt" and result["scores"]["off_prompt"] == 0.5
    assert result["reason"] == "the shape reads blue, the prompt asks for red"
    assert _judge(blue, demo=False)["label"] == "ok"  # the colour check is the demo's only


def test_color_cast_wins_over_off_prompt_and_its_reason_is_the_one_given() -> None:
    result = _judge(_drawn("blue"), baseline=_baseline(), demo=True)
    assert result["label"] == "color_cast" and "prompt asks" not in result["reason"]
    assert result["scores"]["off_prompt"] == 0.5  # the score is still there


def test_a_ghost_keeps_its_label_and_gets_the_scores() -> None:
    black = np.zeros((64, 64, 3))
    result = _judge(black, baseline=_baseline(), demo=True)
    assert result["label"] == "blank" and "reason" not in result
    assert result["scores"]["color_z"] != 0.0 and result["scores"]["off_prompt"] == 1.0


def test_a_clip_score_below_its_healthy_range_is_off_prompt() -> None:
    baseline = _baseline((*COLOUR_STATS, "clip_score"), {"clip_score": 0.30})
    low = _judge(_drawn(), baseline=baseline, extra_image_stats={"clip_score": 0.10})
    assert low["label"] == "off_prompt" and low["reason"].startswith("CLIP image–text score -20.0 robust z-units")
    assert low["scores"]["color_z"] == pytest.approx(-20.0)
    # Without a measured CLIP score (no local CLIP model) that statistic is never out of range.
    assert _judge(_drawn(), baseline=baseline)["label"] == "ok"
