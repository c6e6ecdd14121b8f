"""Colour statistics of a final image, read as the stored uint8 PNG reads."""

from __future__ import annotations

import numpy as np
import pytest

from ghostviewer.analysis.image_stats import COLOUR_STATS, as_uint8, colour_stats


def test_as_uint8_quantises_clips_and_blackens_nan() -> None:
    image = np.array([[[0.0, 0.5, 1.0], [np.nan, np.inf, -np.inf], [-0.2, 1.7, 0.002]]])
    assert as_uint8(image).tolist() == [[[0, 128, 255], [0, 255, 0], [0, 255, 1]]]
    assert as_uint8(image).dtype == np.uint8


def test_as_uint8_keeps_uint8_and_drops_alpha_and_the_batch() -> None:
    pixels = np.arange(2 * 2 * 4, dtype=np.uint8).reshape(2, 2, 4)
    assert np.array_equal(as_uint8(pixels), pixels[:, :, :3])
    assert np.array_equal(as_uint8(pixels[None]), pixels[:, :, :3])
    for shape in [(4, 4), (4, 4, 1), (4, 4, 2), (2, 4, 4, 3)]:
        with pytest.raises(ValueError, match="expected an"):
            as_uint8(np.zeros(shape))


def test_the_names_in_their_order() -> None:
    assert COLOUR_STATS == ("mean_r", "mean_g", "mean_b", "std_r", "std_g", "std_b", "q02_r", "q02_g", "q02_b",
                            "q98_r", "q98_g", "q98_b")


def test_a_flat_colour_and_a_half_black_half_white_image() -> None:
    red = np.zeros((8, 8, 3), np.uint8)
    red[..., 0] = 255
    stats = colour_stats(red)
    assert list(stats) == list(COLOUR_STATS)
    assert (stats["mean_r"], stats["mean_g"], stats["std_r"], stats["q02_r"], stats["q98_b"]) == (1, 0, 0, 1, 0)
    halves = np.zeros((8, 8, 3))
    halves[:, 4:] = 1.0
    stats = colour_stats(halves)
    assert stats["mean_g"] == pytest.approx(0.5) and stats["std_b"] == pytest.approx(0.5)
    assert stats["q02_r"] == 0.0 and stats["q98_r"] == 1.0


def test_a_channel_offset_lifts_the_dark_end_and_float_matches_its_png() -> None:
    rng = np.random.default_rng(0)
    image = rng.random((16, 16, 3)) * 0.5
    lifted = colour_stats(image + np.array([0.4, 0.0, 0.0]))
    base = colour_stats(image)
    assert lifted["q02_r"] - base["q02_r"] == pytest.approx(0.4, abs=2 / 255)
    assert lifted["q02_g"] == base["q02_g"]
    assert colour_stats(as_uint8(image)) == base  # a recorded final.png reads the same numbers
    assert all(type(v) is float for v in base.values())
