"""The demo pipeline draws what it is asked on caption combinations it never saw in training."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.demo import shapes
from ghostviewer.demo.evaluate import make_grid, shape_classifier_accuracy

DEMO_PIPELINE = Path(__file__).resolve().parents[2] / "resources" / "demo-pipeline"
SEEDS = (0, 1)


def test_shape_classifier_on_ground_truth() -> None:
    result = shape_classifier_accuracy(count=60, seed=5)
    assert result["accuracy"] >= 0.95, result


def test_grid_has_captions_under_images() -> None:
    import numpy as np

    images = [np.zeros((64, 64, 3), dtype=np.uint8) for _ in range(5)]
    grid = make_grid(images, ["a red circle on a blue background, top left"] * 5, columns=4)
    assert grid.width == 4 * (128 + 16)
    assert grid.height > 2 * 128


@pytest.fixture(scope="module")
def held_out_result() -> dict:
    if not (DEMO_PIPELINE / "model_index.json").exists():
        pytest.skip(f"demo pipeline not trained: {DEMO_PIPELINE} missing (scripts/train_demo.py makes it)")
    diffusers = pytest.importorskip("diffusers")
    from ghostviewer.demo.evaluate import evaluate_demo

    pipe = diffusers.DiffusionPipeline.from_pretrained(DEMO_PIPELINE)
    pipe.set_progress_bar_config(disable=True)
    combos = shapes.held_out_combos()
    assert len(combos) >= 24
    return evaluate_demo(pipe, combos, seeds=SEEDS, steps=20)


@pytest.mark.slow
def test_held_out_colours(held_out_result: dict) -> None:
    r = held_out_result
    assert r["images"] == len(shapes.held_out_combos()) * len(SEEDS)
    misses = [(row["prompt"], row["seed"], row["read_background"], row["read_foreground"])
              for row in r["rows"] if not (row["background_ok"] and row["foreground_ok"])]
    assert r["background_accuracy"] >= 0.90, misses
    assert r["foreground_accuracy"] >= 0.80, misses


@pytest.mark.slow
def test_held_out_images_are_not_ghosts(held_out_result: dict) -> None:
    rows = held_out_result["rows"]
    assert held_out_result["bad_verdicts"] == 0, [
        (row["prompt"], row["seed"], row["verdict"]) for row in rows if row["verdict"] != "ok"
    ]
