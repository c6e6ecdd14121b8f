"""Baselines without torch: envelopes, drift (earliest first, with z and stat), the file, the prompt check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.analysis.anomaly import AnomalyDetector
from ghostviewer.analysis.baseline import BaselineError, deviation_grid
from ghostviewer.analysis.baseline_build import BaselineBuilder, worst_excess
from ghostviewer.analysis.baseline_file import baseline_to_json, load_baseline, save_baseline
from ghostviewer.analysis.envelope import Envelope, Subspace
from ghostviewer.analysis.prompt_check import named_colours, prompt_check
from ghostviewer.analysis.verdict_context import verdict_in_context
from ghostviewer.analysis.verdicts import image_verdict
from ghostviewer.demo import shapes
from ghostviewer.record import StatColumns, StatRow

IDENTITY = {"class": "StableDiffusionPipeline", "weight_hashes": {"unet": "0123456789abcdef"}}
SETTINGS = {"scheduler": "ddim", "steps": 4, "width": 64, "height": 64, "dtype": "float32", "guidance": 7.5}
MODULES = ("enc", "unet.a", "unet.b")


def _row(phase: str, step: int | None, module: str, seq: int, mean: float, std: float, absmax: float) -> StatRow:
    return StatRow(phase, step, module, 0, seq, (1, 8), "float32", -absmax, absmax, mean, std, absmax, 0, 0)


def _run(rng: np.random.Generator, scale_b: float = 1.0) -> list[StatRow]:
    rows = [_row("encode", None, "enc", 0, rng.normal(0, 0.1), 1 + rng.normal(0, 0.05), 3 + rng.normal(0, 0.1))]
    for step in range(4):
        for module in MODULES[1:]:
            gain = scale_b if module == "unet.b" else 1.0
            std = (1 + rng.normal(0, 0.05)) * gain
            rows.append(_row("denoise", step, module, len(rows), rng.normal(0, 0.1), std, 4 * std))
    return rows


def _image(colour: str, background: str) -> np.ndarray:
    return shapes.draw(shapes.Scene("circle", colour, background, 0.5, 0.5, 0.3, 0.0, None))


@pytest.fixture(scope="module")
def baseline():
    rng = np.random.default_rng(0)
    builder = BaselineBuilder(IDENTITY, SETTINGS)
    for i in range(40):
        combo = shapes.all_combos()[i * 7 % 280]
        builder.add_run(_run(rng), _image(combo[1], combo[2]), {("encode", "enc"): rng.normal(0, 0.1, size=8)})
    return builder.build()


def test_healthy_runs_stay_inside_and_a_scaled_block_drifts_first(baseline) -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        assert all(baseline.drift(row) is None for row in _run(rng))
    rows = _run(rng, scale_b=1.6)
    detector = AnomalyDetector(baseline)
    first = detector.feed(rows)
    assert first["kind"] == "drift" and first["module"] == "unet.b" and first["step"] == 0
    assert first["stat"] in ("std", "absmax") and first["z"] > baseline.margin
    assert AnomalyDetector().feed(rows) is None  # without a baseline nothing is flagged


def test_channel_means_drift_only_where_a_channel_moves(baseline) -> None:
    row = _run(np.random.default_rng(2))[0]
    assert baseline.drift(row, np.zeros(8)) is None
    shifted = np.zeros(8)
    shifted[3] = 5.0
    z, stat = baseline.drift(row, shifted)
    assert stat == "channel_mean[3]" and z > 0
    detector = AnomalyDetector(baseline, {("encode", "enc"): shifted})
    assert detector.feed([row])["stat"] == "channel_mean[3]"


def test_deviation_grid_and_headroom(baseline) -> None:
    rows = _run(np.random.default_rng(3), scale_b=2.0)
    grid = deviation_grid(rows, baseline)
    assert set(grid) == {("enc", None)} | {(m, s) for m in MODULES[1:] for s in range(4)}
    assert grid[("unet.b", 2)] > baseline.margin > grid[("unet.a", 2)]
    worst = worst_excess(baseline, rows, None, None)
    assert worst["module"][0] > baseline.margin and "unet.b" in worst["module"][1]


def test_file_round_trip_and_validation(baseline, tmp_path: Path) -> None:
    path = save_baseline(baseline, tmp_path / f"{baseline.key}.json")
    assert path.stat().st_size < 50_000
    loaded = load_baseline(path)
    assert loaded.key == baseline.key and baseline_to_json(loaded) == baseline_to_json(baseline)
    data = json.loads(path.read_text())
    data["settings"]["steps"] = 50  # edited by hand: the key no longer matches
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="key"):
        load_baseline(path)
    for broken in ("not json", json.dumps({"format": "x"}), json.dumps({**baseline_to_json(baseline), "version": 9})):
        path.write_text(broken)
        with pytest.raises(BaselineError):
            load_baseline(path)
    bad = baseline_to_json(baseline)
    next(iter(bad["modules"].values()))["scale"][0] = -1.0
    path.write_text(json.dumps(bad))
    with pytest.raises(BaselineError, match="positive"):
        load_baseline(path)


def test_too_few_runs_make_no_baseline() -> None:
    builder = BaselineBuilder(IDENTITY, SETTINGS)
    builder.add_run(_run(np.random.default_rng(0)), None)
    with pytest.raises(BaselineError, match="at least"):
        builder.build()


def test_prompt_check_reads_the_named_colours() -> None:
    assert named_colours("a small red circle on a blue background, top left") == named_colours("red circle on blue "
                                                                                               "background")
    assert named_colours("a red circle").background is None and named_colours("hello").any is False
    assert prompt_check(_image("red", "blue"), "a red circle on a blue background")["ok"]
    miss = prompt_check(_image("red", "green"), "a red circle on a blue background")
    assert not miss["ok"] and miss["score"] == 0.5 and "background reads green" in miss["reason"]
    assert prompt_check(_image("red", "blue"), "a circle") is None


def test_verdict_in_context_only_relabels_ok_images(baseline) -> None:
    image = _image("red", "green")
    plain = image_verdict(image)
    judged = verdict_in_context(plain, image, "a red circle on a blue background", demo=True)
    assert plain["label"] == "ok" and judged["label"] == "off_prompt" and judged["scores"]["off_prompt"] == 0.5
    assert verdict_in_context(plain, image, "a red circle on a blue background")["label"] == "ok"  # not the demo
    cast = np.clip(_image("white", "black").astype(float) / 255 + [0.0, 0.0, 0.45], 0, 1)
    judged = verdict_in_context(image_verdict(cast), cast, "a white circle on a black background", baseline)
    assert judged["label"] == "color_cast" and judged["scores"]["color_z"] > 0 and "q02_b" in judged["reason"]


def test_a_shift_off_the_healthy_subspace_is_caught_though_every_channel_stays_in_range() -> None:
    rng = np.random.default_rng(4)
    directions = rng.normal(size=(2, 16))
    healthy = rng.uniform(-3, 3, size=(200, 2)) @ directions + rng.normal(0, 0.01, size=(200, 16))
    subspace = Subspace.fit(healthy, floor=1e-3)
    env = Envelope.of(healthy, 1e-3)
    probe = np.array([0.5, -0.5]) @ directions + 0.4 * np.array([1, -1] * 8)  # a stray alternating bias
    assert max(env.excess(list(probe))) == 0.0  # each channel alone looks healthy ...
    assert subspace.residual.excess([subspace.residual_of(probe)])[0] > 6  # ... together they do not
    held_out = rng.uniform(-3, 3, size=(50, 2)) @ directions + rng.normal(0, 0.01, size=(50, 16))
    assert max(subspace.residual.excess([subspace.residual_of(v)])[0] for v in held_out) < 2
    assert Subspace.fit(healthy[:10], floor=1e-3) is None  # too few runs to tell


def _columns(rows: list[StatRow]) -> StatColumns:
    columns = StatColumns()
    for row in rows:
        for name in StatColumns.__dataclass_fields__:
            getattr(columns, name).append(getattr(row, name))
    return columns


@pytest.mark.parametrize("fault", ["none", "nan", "inf", "overflow", "zeros", "collapse", "explode", "drift"])
def test_columns_find_the_same_first_anomaly_as_rows(baseline, fault: str) -> None:
    """The recorder checks a step's outputs column by column: the first anomaly must be the one feed() finds."""
    rows = _run(np.random.default_rng(4), scale_b=1.6 if fault == "drift" else 1.0)
    i = 5  # a denoise row of step 2 (the references come from step 0)
    r = rows[i]
    changed = {
        "nan": dict(nan_count=3, min=float("nan"), max=float("nan"), mean=float("nan"), std=float("nan")),
        "inf": dict(inf_count=1, max=float("inf"), absmax=float("inf")),
        "overflow": dict(max=7e4, absmax=7e4),
        "zeros": dict(min=0.0, max=0.0, mean=0.0, std=0.0, absmax=0.0),
        "collapse": dict(std=r.std * 1e-6),
        "explode": dict(max=3e4, absmax=3e4),  # past 1e3 × its first reading, inside float16
    }.get(fault)
    if changed:
        rows[i] = StatRow(**{**{name: getattr(r, name) for name in StatColumns.__dataclass_fields__}, **changed})
    for base in (baseline, None):
        expected = AnomalyDetector(base).feed(rows)
        got = AnomalyDetector(base).feed_columns(_columns(rows))
        assert got == expected
        if fault == "none" or (fault == "drift" and base is None):
            assert got is None
        else:
            assert got is not None and got["kind"] == {"zeros": "collapse"}.get(fault, fault)
    # Fed step by step, the detector keeps its first finding.
    detector = AnomalyDetector(baseline)
    for start in range(0, len(rows), 2):
        detector.feed_columns(_columns(rows[start:start + 2]))
    assert detector.first == AnomalyDetector(baseline).feed(rows)
