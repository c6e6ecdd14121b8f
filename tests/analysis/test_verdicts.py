"""The image verdict's labels on plain arrays: black, noise, NaN, saturated, cast and healthy; the scores behind."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ghostviewer.analysis.verdicts import LABELS, SCORES, Thresholds, image_scores, image_verdict, thresholds_dict
from ghostviewer.demo import shapes

SIDE = 64


def _healthy() -> np.ndarray:
    """A red circle on a white background, as the demo draws it (uint8 → float in [0, 1])."""
    return shapes.draw(shapes.Scene("circle", "red", "white", 0.5, 0.5, 0.3, 0.0, None)).astype(np.float64) / 255


def _label(image: np.ndarray, thresholds: Thresholds | None = None) -> str:
    return image_verdict(image, thresholds or Thresholds())["label"]


def test_the_four_images_every_verdict_must_tell_apart() -> None:
    rng = np.random.default_rng(0)
    nan = _healthy()
    nan[10, 20] = np.nan
    assert _label(np.zeros((SIDE, SIDE, 3))) == "blank"
    assert _label(rng.random((SIDE, SIDE, 3))) == "noise"
    assert _label(nan) == "nan"
    assert _label(_healthy()) == "ok"


def test_saturated_and_color_cast() -> None:
    assert _label(np.clip(_healthy() * 4.0, 0, 1)) == "saturated"
    cast = _healthy() * 0.5 + np.array([0.0, 0.0, 0.5])  # blended halfway toward blue: white turns pale blue
    assert _label(cast) == "color_cast"


def test_the_scores_on_known_images() -> None:
    black = image_scores(np.zeros((8, 8, 3)))
    assert black == {"nan_fraction": 0.0, "std": 0.0, "noise": 0.0, "saturated": 1.0, "color_cast": 0.0}
    halves = np.zeros((8, 8, 3))
    halves[:, 4:] = 1.0
    assert image_scores(halves)["std"] == pytest.approx(0.5)  # root of the per-channel variance (0.25)
    one_nan = np.full((10, 10, 3), 0.5)
    one_nan[3, 3, 1] = np.inf  # one non-finite channel makes the pixel non-finite
    assert image_scores(one_nan)["nan_fraction"] == pytest.approx(0.01)
    assert set(image_scores(_healthy())) == set(SCORES)


def test_labels_go_by_priority() -> None:
    black_with_nan = np.zeros((SIDE, SIDE, 3))
    black_with_nan[0, 0] = np.nan
    assert _label(black_with_nan) == "nan"  # nan > blank
    all_nan = np.full((4, 4, 3), np.nan)
    assert image_verdict(all_nan) == {"label": "nan", "scores": {"nan_fraction": 1.0, "std": 0.0, "noise": 0.0,
                                                                 "saturated": 0.0, "color_cast": 0.0}}
    # A black image with the blank threshold off is judged by the next rules: every value clipped.
    assert _label(np.zeros((SIDE, SIDE, 3)), Thresholds(blank_std=0.0)) == "saturated"
    assert _label(_healthy(), Thresholds(noise=0.0)) == "noise"


def test_static_at_the_latents_scale_is_noise() -> None:
    rng = np.random.default_rng(1)
    blotches = rng.random((17, 17, 3)).repeat(4, axis=0).repeat(4, axis=1)  # one blotch per latent pixel, 68 px
    assert image_scores(blotches)["noise"] > 0.7 and _label(blotches) == "noise"
    assert image_scores(blotches[:66, :66])["noise"] > 0.7  # pooled after cropping to a multiple of 4
    # Below 16 pooled pixels a side, 4x pooling is not tried: small blotchy static scores lower, still noise.
    small = blotches[:40, :40]
    assert 0.4 < image_scores(small)["noise"] < 0.7 and _label(small) == "noise"


def test_accepted_layouts_give_the_same_scores() -> None:
    image = _healthy()
    as_uint8 = (image * 255).round().astype(np.uint8)
    assert image_scores(as_uint8) == pytest.approx(image_scores(image))
    assert image_scores(image[None]) == image_scores(image)  # a batch of one
    rgba = np.concatenate([image, np.ones((SIDE, SIDE, 1))], axis=2)
    assert image_scores(rgba) == image_scores(image)
    grey = image.mean(axis=2)
    assert image_scores(grey) == image_scores(np.repeat(grey[:, :, None], 3, axis=2))
    assert image_scores(grey[:, :, None]) == image_scores(grey)


@pytest.mark.parametrize("shape", [(0, 8, 3), (8, 0, 3), (8, 8, 2), (8, 8, 5), (8,), (2, 8, 8, 3)])
def test_other_shapes_are_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="expected"):
        image_verdict(np.zeros(shape))


def test_thresholds_dict_names_every_threshold() -> None:
    assert thresholds_dict() == {"nan_fraction": 0.0, "blank_std": 0.02, "noise": 0.4, "saturated": 0.3,
                                 "color_cast": 0.3}


_images = hnp.arrays(np.float64, hnp.array_shapes(min_dims=3, max_dims=3, min_side=1, max_side=12).map(
    lambda s: (s[0], s[1], 3)), elements=st.floats(allow_nan=True, allow_infinity=True, width=32))


@settings(max_examples=50, deadline=None)
@given(_images)
def test_any_image_gets_a_known_label_and_json_safe_scores(image: np.ndarray) -> None:
    verdict = image_verdict(image)
    assert verdict["label"] in LABELS
    scores = verdict["scores"]
    assert set(scores) == set(SCORES)
    assert all(type(v) is float and math.isfinite(v) for v in scores.values())
    assert 0.0 <= scores["nan_fraction"] <= 1.0 and 0.0 <= scores["saturated"] <= 1.0
    assert (verdict["label"] == "nan") == (not np.isfinite(image).all())
