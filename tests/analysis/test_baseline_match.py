"""Baselines that match by architecture: which baseline judges a run of other weights or settings, what it says
differs, and how the judging view compares (normalised time, per-pixel statistics, phases left out)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ghostviewer.analysis.baseline_build import BaselineBuilder
from ghostviewer.analysis.baseline_file import load_baseline, save_baseline
from ghostviewer.analysis.baseline_match import (
    ARCH_MARGIN,
    judging_view,
    nearest,
    plan_match,
    structure_mismatch,
)
from ghostviewer.record import StatRow

IDENTITY = {"class": "StableDiffusionPipeline", "weight_hashes": {"unet": "0" * 16, "vae": "1" * 16}}
OTHER_VAE = {"class": "StableDiffusionPipeline", "weight_hashes": {"unet": "0" * 16, "vae": "2" * 16}}
SETTINGS = {"scheduler": "ddim", "steps": 4, "width": 64, "height": 64, "dtype": "float32", "guidance": 7.5}
ARCH = {"class": "StableDiffusionPipeline", "components": {
    "unet": {"class": "UNet2DConditionModel", "structure": "a" * 16, "config": {"sample_size": 16}},
    "vae": {"class": "AutoencoderKL", "structure": "b" * 16, "config": {"scaling_factor": 0.7}},
    "text_encoder": {"class": "CLIPTextModel", "structure": "d" * 16, "config": {}}}}


def _row(phase: str, step: int | None, module: str, seq: int, mean: float, std: float,
         shape: tuple[int, ...] = (2, 4, 8, 8)) -> StatRow:
    return StatRow(phase, step, module, 0, seq, shape, "float32", -4 * std, 4 * std, mean, std, 4 * std, 0, 0)


def _run(rng: np.random.Generator, steps: int = 4, gain: float = 1.0, shape: tuple[int, ...] = (2, 4, 8, 8),
         absmax_gain: float = 1.0) -> list[StatRow]:
    rows = [_row("encode", None, "text_encoder", 0, rng.normal(0, 0.01), 1 + rng.normal(0, 0.01), (2, 8, 16))]
    for step in range(steps):
        t = step / steps  # the healthy std falls with denoising time
        std = (2 - t) * (1 + rng.normal(0, 0.02)) * gain
        row = _row("denoise", step, "unet.mid", len(rows), rng.normal(0, 0.01), std, shape)
        rows.append(replace(row, absmax=row.absmax * absmax_gain))
    return rows


def _baseline(tmp_path: Path, name: str = "b.json", identity: dict = IDENTITY, settings: dict = SETTINGS,
              architecture: dict = ARCH) -> Path:
    rng = np.random.default_rng(0)
    builder = BaselineBuilder(identity, settings)
    for _ in range(24):
        builder.add_run(_run(rng, settings["steps"]), None)
    return save_baseline(builder.build(architecture=architecture), tmp_path / name)


def test_the_architecture_travels_with_the_file(tmp_path: Path) -> None:
    baseline = load_baseline(_baseline(tmp_path))
    assert baseline.architecture == ARCH
    assert plan_match(baseline, IDENTITY, ARCH, SETTINGS).match == "exact"  # type: ignore[union-attr]


def test_other_weights_are_judged_by_architecture_and_said(tmp_path: Path) -> None:
    baseline = load_baseline(_baseline(tmp_path))
    plan = plan_match(baseline, OTHER_VAE, ARCH, SETTINGS)
    assert not isinstance(plan, str)
    assert plan.match == "architecture" and plan.differences == ("weights of vae differ from the baseline's",)
    view = judging_view(baseline, plan)
    assert view.margin >= ARCH_MARGIN and view.key == baseline.key
    config = {**ARCH, "components": {**ARCH["components"], "vae": {**ARCH["components"]["vae"],
                                                                    "config": {"scaling_factor": 0.5}}}}
    plan = plan_match(baseline, OTHER_VAE, config, SETTINGS)
    assert "config of vae: scaling_factor 0.5 vs 0.7" in plan.differences  # type: ignore[union-attr]


def test_another_structure_or_none_recorded_is_refused_with_a_reason(tmp_path: Path) -> None:
    baseline = load_baseline(_baseline(tmp_path))
    unet = {**ARCH["components"]["unet"], "structure": "c" * 16}
    wider = {**ARCH, "components": {**ARCH["components"], "unet": unet}}
    assert plan_match(baseline, OTHER_VAE, wider, SETTINGS) == "unet's tensors (names and shapes) differ from the " \
                                                                "baseline's"
    assert "no architecture" in str(structure_mismatch({}, ARCH))
    assert "pipeline class" in str(structure_mismatch(ARCH, {**ARCH, "class": "StableDiffusionXLPipeline"}))
    old = load_baseline(_baseline(tmp_path, "old.json", architecture={}))
    assert "no architecture" in str(plan_match(old, OTHER_VAE, ARCH, SETTINGS))
    assert plan_match(old, IDENTITY, ARCH, SETTINGS).match == "exact"  # type: ignore[union-attr]


def test_other_steps_are_compared_on_normalised_time(tmp_path: Path) -> None:
    baseline = load_baseline(_baseline(tmp_path))
    plan = plan_match(baseline, IDENTITY, ARCH, {**SETTINGS, "steps": 6})
    assert not isinstance(plan, str) and plan.run_steps == 6
    assert "steps 6 vs 4: compared on normalised time" in plan.differences
    view = judging_view(baseline, plan)
    assert [view.bucket(k) for k in range(6)] == [0, 0, 1, 2, 2, 3]
    rng = np.random.default_rng(5)
    assert all(view.drift(row) is None for row in _run(rng, steps=6))  # step 4 of 6 is judged where step 2-3 of 4 is
    assert any(view.drift(row) is not None for row in _run(rng, steps=6, gain=1.6))


def test_steps_too_far_apart_leave_only_the_text_encoder(tmp_path: Path) -> None:
    baseline = load_baseline(_baseline(tmp_path))
    plan = plan_match(baseline, IDENTITY, ARCH, {**SETTINGS, "steps": 2})
    assert not isinstance(plan, str) and plan.phases == {"encode"}
    assert "too far apart for normalised time" in plan.differences[0]


def test_another_size_is_compared_on_per_pixel_statistics(tmp_path: Path) -> None:
    baseline = load_baseline(_baseline(tmp_path))
    plan = plan_match(baseline, IDENTITY, ARCH, {**SETTINGS, "width": 128, "height": 128})
    assert not isinstance(plan, str) and plan.per_pixel
    view = judging_view(baseline, plan)
    rng = np.random.default_rng(6)
    bigger = _run(rng, shape=(2, 4, 16, 16), absmax_gain=1.5)  # more pixels, larger extremes: healthy
    assert all(view.drift(row) is None for row in bigger)
    assert any(view.drift(row) is not None for row in _run(rng, shape=(2, 4, 16, 16), gain=1.6))
    assert all(baseline.drift(row) is None for row in _run(rng, shape=(2, 4, 16, 16), gain=1.6))  # shapes differ


def test_scheduler_and_guidance_refuse_what_they_change(tmp_path: Path) -> None:
    baseline = load_baseline(_baseline(tmp_path))
    plan = plan_match(baseline, IDENTITY, ARCH, {**SETTINGS, "scheduler": "euler"})
    assert not isinstance(plan, str) and "denoise" not in plan.phases and "decode" in plan.phases
    view = judging_view(baseline, plan)
    sick = _run(np.random.default_rng(7), gain=1.6)
    assert all(view.drift(row) is None for row in sick)  # denoising steps not compared
    plan = plan_match(baseline, IDENTITY, ARCH, {**SETTINGS, "guidance": 3.0})
    assert plan.phases == {"encode"}  # type: ignore[union-attr]
    assert any("only the text encoder compared" in d for d in plan.differences)  # type: ignore[union-attr]
    no_text = {**ARCH, "components": {k: v for k, v in ARCH["components"].items() if k != "text_encoder"}}
    assert plan_match(baseline, IDENTITY, no_text, {**SETTINGS, "guidance": 3.0}) == "nothing left to compare"


def test_nearest_prefers_exact_then_fewest_refusals(tmp_path: Path) -> None:
    exact = load_baseline(_baseline(tmp_path, "exact.json"))
    other_steps = load_baseline(_baseline(tmp_path, "steps.json", settings={**SETTINGS, "steps": 5}))
    other_scheduler = load_baseline(_baseline(tmp_path, "sched.json", settings={**SETTINGS, "scheduler": "euler"}))
    foreign = load_baseline(_baseline(tmp_path, "foreign.json", architecture={**ARCH, "components": {}}))
    choice, _ = nearest([other_scheduler, exact, other_steps], IDENTITY, ARCH, SETTINGS)
    assert choice is not None and choice.source is exact and choice.plan.match == "exact"
    choice, refused = nearest([other_scheduler, other_steps, foreign], OTHER_VAE, ARCH, SETTINGS)
    assert choice is not None and choice.source is other_steps
    assert choice.to_json()["match"] == "architecture" and choice.to_json()["file"].endswith("steps.json")
    assert "weights of vae differ" in choice.describe() and "steps 4 vs 5" in choice.describe()
    assert any(r.startswith("foreign.json") for r in refused)
    assert nearest([foreign], OTHER_VAE, ARCH, SETTINGS)[0] is None


def test_a_recorded_run_is_re_judged_by_the_view_that_judged_it(tmp_path: Path) -> None:
    from ghostviewer.analysis.baseline_store import BASELINES_FOLDER, recorded_judging, run_baseline
    from ghostviewer.record.types import Event

    folder = tmp_path / BASELINES_FOLDER
    folder.mkdir()
    baseline = load_baseline(_baseline(tmp_path))
    path = save_baseline(baseline, folder / f"{baseline.key}.json")
    plan = plan_match(load_baseline(path), IDENTITY, ARCH, {**SETTINGS, "steps": 6})
    judging = plan.to_json()  # type: ignore[union-attr]
    event = Event(0.0, "info", "baseline", "using …", {"baseline": baseline.key, "judged_by": judging})
    judged = recorded_judging([event])
    assert judged is not None and judged["run_steps"] == 6
    view = run_baseline(tmp_path / "run", baseline.key, judged)
    plain = run_baseline(tmp_path / "run", baseline.key)
    assert view is not None and plain is not None and view.bucket(3) == 2 and plain.bucket(3) == 3
