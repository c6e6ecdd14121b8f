"""Building a baseline from healthy runs: step buckets, which modules get an envelope, channels, the image."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ghostviewer.analysis.baseline_build import MIN_RUNS, BaselineBuilder, worst_excess
from ghostviewer.analysis.envelope import BaselineError
from ghostviewer.analysis.image_stats import COLOUR_STATS
from tests.analysis.records import BASELINE_SETTINGS, IDENTITY, pipeline_rows


def _healthy(rng: np.random.Generator, steps: int = 4) -> list:  # type: ignore[type-arg]
    return [replace(r, mean=float(rng.normal(0, 0.1)), std=float(1 + rng.normal(0, 0.05))) for r in
            pipeline_rows(steps=steps)]


def _builder(runs: int = MIN_RUNS, steps: int = 4, **kwargs: object) -> BaselineBuilder:
    rng = np.random.default_rng(0)
    builder = BaselineBuilder(IDENTITY, {**BASELINE_SETTINGS, "steps": steps, "prompt": "ignored"}, **kwargs)
    for _ in range(runs):
        image = rng.random((16, 16, 3))
        builder.add_run(_healthy(rng, steps), image, {("decode", "vae.decoder"): rng.normal(0, 0.1, 4)})
    return builder


def test_too_few_healthy_runs_make_no_baseline() -> None:
    with pytest.raises(BaselineError, match=f"a baseline needs at least {MIN_RUNS} healthy runs, got {MIN_RUNS - 1}"):
        _builder(MIN_RUNS - 1).build()


def test_an_envelope_per_phase_step_and_module() -> None:
    baseline = _builder().build(meta={"seeds": "0-7"})
    assert baseline.settings == {**BASELINE_SETTINGS, "steps": 4}  # only the settings that change activations
    assert baseline.buckets == 4 and baseline.meta == {"runs": MIN_RUNS, "seeds": "0-7"}
    denoise = {("denoise", s, m) for s in range(4) for m in ("unet.down", "unet.mid", "unet.up")}
    assert set(baseline.modules) == {("encode", None, "text_encoder"), ("decode", None, "vae.decoder"), *denoise}
    shape, env = baseline.modules[("denoise", 2, "unet.mid")]
    assert shape == (1, 4, 8, 8) and env.lo[1] < 1.0 < env.hi[1] and env.median[2] == 3.0
    assert env.scale[2] == pytest.approx(0.01 * 3.0)  # absmax never varied: its scale is REL_FLOOR × its median
    assert set(baseline.channels) == {("decode", None, "vae.decoder")}
    assert baseline.channels[("decode", None, "vae.decoder")][1] is None  # 8 runs: too few for a subspace
    assert baseline.image is not None and baseline.image[0] == COLOUR_STATS


def test_many_steps_share_buckets() -> None:
    builder = _builder(steps=40)
    assert builder.buckets == 20
    baseline = builder.build()
    assert {k[1] for k in baseline.modules if k[0] == "denoise"} == set(range(20))
    assert baseline.bucket(0) == baseline.bucket(1) == 0 and baseline.bucket(39) == 19
    assert _builder(steps=4, buckets=2).build().bucket(3) == 1


def test_what_gets_no_envelope() -> None:
    rng = np.random.default_rng(1)
    builder = BaselineBuilder(IDENTITY, BASELINE_SETTINGS)  # 2 steps
    for i in range(MIN_RUNS):
        rows = _healthy(rng, steps=2)
        rows = [replace(r, shape=(1, 4, 8, 8 + 8 * (i % 2))) if r.module == "unet.up" else r for r in rows]
        if i < 3:  # a module most healthy runs never call
            rows.append(replace(rows[0], module="rare", seq=99))
        rows.append(replace(rows[1], call=1, seq=100))  # later calls are not enveloped
        rows = [replace(r, std=float("nan")) if r.module == "vae.decoder" else r for r in rows]  # never finite
        builder.add_run(rows, None, {("decode", "text_encoder"): [np.nan, 0.0]})  # non-finite channel means dropped
    baseline = builder.build()
    modules = {k[2] for k in baseline.modules}
    assert modules == {"text_encoder", "unet.down", "unet.mid"}  # unet.up's shape varies
    assert baseline.image is None and baseline.channels == {}


def test_extra_image_statistics_join_the_colour_envelope() -> None:
    rng = np.random.default_rng(2)
    builder = BaselineBuilder(IDENTITY, BASELINE_SETTINGS)
    for i in range(MIN_RUNS):
        builder.add_run(_healthy(rng, 2), rng.random((8, 8, 3)), extra_image_stats={"clip_score": 0.3 + 0.01 * i})
    baseline = builder.build()
    assert baseline.image is not None and baseline.image[0] == (*COLOUR_STATS, "clip_score")
    assert baseline.image[1].lo[-1] == 0.3 and baseline.image[1].hi[-1] == pytest.approx(0.37)


def test_subspace_from_enough_runs_and_worst_excess() -> None:
    rng = np.random.default_rng(3)
    builder = BaselineBuilder(IDENTITY, BASELINE_SETTINGS)
    direction = np.array([1.0, -1.0, 0.5, 2.0])
    for _ in range(32):
        means = {("decode", "vae.decoder"): rng.normal() * direction + 0.001 * rng.normal(size=4)}
        builder.add_run(_healthy(rng, 2), rng.random((8, 8, 3)) * 0.1 + 0.45, means)
    baseline = builder.build()
    env, subspace = baseline.channels[("decode", None, "vae.decoder")]
    assert subspace is not None and subspace.basis.shape == (4, 1)
    healthy = worst_excess(baseline, _healthy(rng, 2), {("decode", "vae.decoder"): 0.5 * direction}, None)
    assert healthy["module"][0] < 6 and healthy["subspace"][0] < 1 and healthy["colour"] == (0.0, "")  # no image
    off = worst_excess(baseline, [replace(r, std=3.0) if r.module == "unet.mid" else r for r in _healthy(rng, 2)],
                       {("decode", "vae.decoder"): np.array([0.2, 0.2, -0.2, 0.0])}, np.zeros((8, 8, 3)))
    assert off["module"][0] > 6 and off["module"][1].endswith("unet.mid")
    assert off["subspace"][0] > 6 and off["subspace"][1] == "decode vae.decoder"
    assert off["colour"][0] > 3 and off["colour"][1].startswith(("mean_", "q02_", "q98_"))
