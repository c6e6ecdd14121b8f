"""The demo pipeline draws what it is asked on caption combinations it never saw in training."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer.demo import shapes
from ghostviewer.demo.shape_check import shape_classifier_accuracy
from ghostviewer.engine.loading.demo_model.evaluate import make_grid

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
def demo_pipe():  # noqa: ANN201
    if not (DEMO_PIPELINE / "model_index.json").exists():
        pytest.skip(f"demo pipeline not trained: {DEMO_PIPELINE} missing (scripts/train_demo.py makes it)")
    diffusers = pytest.importorskip("diffusers")
    pipe = diffusers.DiffusionPipeline.from_pretrained(DEMO_PIPELINE)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def held_out_result(demo_pipe) -> dict:  # noqa: ANN001
    from ghostviewer.engine.loading.demo_model.evaluate import evaluate_demo

    combos = shapes.held_out_combos()
    assert len(combos) >= 24
    # one batch: the same images as one call per seed (each sample has its own generator), at ~70 % of the CPU.
    # 10 steps, half the demo's default, at half the CPU: the accuracies hold with room (measured on the 60 images:
    # background and colour 1.0, shape 0.93, position 1.0 — at 20 steps shape 0.98) and every verdict score stays
    # well inside its threshold (lowest std 0.061 vs 0.02, highest cast 0.22 vs 0.3); at 8 steps a bad verdict
    # appears. The seed-spread test below keeps 20: its spread halves at 10 steps.
    return evaluate_demo(demo_pipe, combos, seeds=SEEDS, steps=10, batch_size=len(combos) * len(SEEDS))


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


@pytest.mark.slow
def test_held_out_shapes_and_positions(held_out_result: dict) -> None:
    """The shape and the named position are drawn, on caption combinations training never saw."""
    r = held_out_result
    wrong_place = [(row["prompt"], row["seed"], row["read_position"]) for row in r["rows"] if not row["position_ok"]]
    assert r["shape_accuracy"] >= 0.75, r["shape_by_kind"]
    assert r["position_accuracy"] >= 0.60, wrong_place


@pytest.mark.slow
def test_without_a_position_word_the_seed_changes_the_drawing(demo_pipe) -> None:  # noqa: ANN001
    """No position word: the seed moves the shape (it stays near the centre — classifier-free guidance seeks the
    most common placement, and the centre is that — but not at one spot) and changes its outline."""
    import numpy as np
    import torch

    from ghostviewer.analysis.image_stats import as_uint8
    from ghostviewer.demo.shape_check import foreground_mask

    seeds = range(8)
    with torch.no_grad():
        images = demo_pipe(["a yellow square on a purple background"] * len(seeds), num_inference_steps=20,
                           output_type="np", generator=[torch.Generator().manual_seed(s) for s in seeds]).images
    centres, masks = [], []
    for image in images:
        mask = foreground_mask(as_uint8(image), "purple")
        ys, xs = np.nonzero(mask)
        assert len(xs) > 40, "no shape drawn"
        centres.append((xs.mean() / 64, ys.mean() / 64))
        masks.append(mask)
    spread = np.ptp(np.array(centres), axis=0)
    assert spread.max() > 0.05, centres  # a few pixels at least, not one placement for every seed
    assert len({mask.tobytes() for mask in masks}) == len(seeds)  # every seed draws its own outline
