"""The stats heat map's numbers: a module × (encode | steps | decode) grid, log display, colours, summary lines."""

from __future__ import annotations

import numpy as np
import pytest

from ghostviewer.analysis.stat_grid import (
    BAD_RGBA,
    MISSING_RGBA,
    array_summary,
    display_values,
    fmt,
    grid_rgba,
    grid_values,
    row_summary,
    stat_grid,
    stat_value,
    summary_line,
)
from ghostviewer.record.types import FP16_MAX
from tests.analysis.records import pipeline_rows, stat


def test_rows_and_columns_in_execution_and_phase_order() -> None:
    rows = pipeline_rows(steps=3)
    grid = stat_grid(list(reversed(rows)))  # any order in: modules by first seq, columns by phase then step
    assert grid.modules == ["text_encoder", "unet.down", "unet.mid", "unet.up", "vae.decoder"]
    assert grid.columns == [("encode", None), ("denoise", 0), ("denoise", 1), ("denoise", 2), ("decode", None)]
    assert grid.steps == [0, 1, 2]
    assert [grid.label(j) for j in range(5)] == ["enc", "0", "1", "2", "dec"]
    assert grid.phase_spans() == [("encode", 0, 0), ("denoise", 1, 3), ("decode", 4, 4)]
    assert grid.cell("unet.mid", 2) == (2, 3) and grid.step_column(1) == 2
    assert grid.cell("text_encoder", None, "encode") == (0, 0)
    assert grid.cell("text_encoder", 1) is None and grid.cell("nope", 1) is None and grid.cell("unet.mid", 7) is None
    assert grid.home_column("vae.decoder") == 4 and grid.home_column("unet.mid") is None
    assert grid.home_column("nope") is None
    assert not grid.bad.any() and grid.bad.shape == (5, 5)


def test_a_bad_later_call_is_shown_rather_than_a_healthy_first_one() -> None:
    rows = [stat("encode", None, "text_encoder", 0), stat("encode", None, "text_encoder", 1, call=1, nan=2),
            stat("denoise", 0, "unet", 2), stat("denoise", 0, "unet", 3, call=1, absmax=9.0)]
    grid = stat_grid(rows)
    assert grid.rows[(0, 0)].call == 1 and grid.bad[0, 0]
    assert grid.rows[(1, 1)].call == 0 and not grid.bad[1, 1]  # both healthy: the first call
    assert grid.anomaly_cell({"phase": "encode", "step": None, "module": "text_encoder"}) == (0, 0)
    assert grid.anomaly_cell({"step": 0, "module": "unet"}) == (1, 1)  # phase defaults to denoise
    assert grid.anomaly_cell(None) is None and grid.anomaly_cell({"module": None}) is None


def test_a_run_without_text_encoder_or_vae_has_only_step_columns() -> None:
    grid = stat_grid([r for r in pipeline_rows(steps=2) if r.phase == "denoise"])
    assert grid.columns == [("denoise", 0), ("denoise", 1)] and grid.phase_spans() == [("denoise", 0, 1)]
    assert grid.column("encode", None) is None


def test_values_and_their_log_display() -> None:
    rows = pipeline_rows(steps=2, bad={(1, "unet.mid"): {"absmax": 100.0, "nan": 3}})
    grid = stat_grid(rows)
    values = grid_values(grid, "absmax")
    assert values[2, 2] == 100.0 and values[0, 0] == 3.0 and np.isnan(values[0, 1])  # the encoder has no step
    assert grid_values(grid, "nan_count")[2, 2] == 3
    assert grid_values(grid, "fp16_headroom")[2, 2] == pytest.approx(100.0 / FP16_MAX)
    shown = display_values(values, "absmax", log=True)
    assert shown[2, 2] == pytest.approx(2.0) and np.isnan(shown[0, 1])
    assert np.array_equal(display_values(values, "absmax", log=False), values, equal_nan=True)
    counts = grid_values(grid, "nan_count")
    assert np.array_equal(display_values(counts, "nan_count", log=True), counts, equal_nan=True)  # not a log stat
    zero = display_values(np.array([[0.0, -1.0, 10.0]]), "std", log=True)
    assert np.isnan(zero[0, 0]) and np.isnan(zero[0, 1]) and zero[0, 2] == 1.0  # no log of 0 or less: blank
    assert stat_value(rows[0], "fp16_headroom") == pytest.approx(3.0 / FP16_MAX)


def test_grid_colours() -> None:
    lut = np.stack([np.arange(256)] * 3, axis=1).astype(np.uint8)  # grey ramp
    shown = np.array([[0.0, 5.0, 10.0], [np.nan, 10.0, 2.5]])
    bad = np.array([[False, False, False], [False, True, False]])
    rgba, levels = grid_rgba(shown, bad, lut)
    assert levels == (0.0, 10.0) and rgba.shape == (2, 3, 4)
    assert rgba[0, 0].tolist() == [0, 0, 0, 255] and rgba[0, 2].tolist() == [255, 255, 255, 255]
    assert rgba[0, 1, 0] == 128  # halfway up the ramp
    assert tuple(rgba[1, 0]) == MISSING_RGBA and tuple(rgba[1, 1]) == BAD_RGBA  # a bad cell is red whatever its value
    flat, levels = grid_rgba(np.full((1, 2), np.nan), np.zeros((1, 2), bool), lut)
    assert levels == (0.0, 1.0) and all(tuple(p) == MISSING_RGBA for p in flat[0])


def test_lovely_tensor_lines() -> None:
    assert fmt(0.012345) == "0.0123" and fmt(12345.0) == "1.23e+04" and fmt(float("nan")) == "nan"
    assert fmt(float("-inf")) == "-inf"
    assert summary_line((2, 4, 8, 8), "f16", -3.1, 4.2, 0.01, 0.9, nan=1) == (
        "tensor[2,4,8,8] f16 x∈[-3.1, 4.2] μ=0.01 σ=0.9 NaN!")
    assert summary_line((3,), "f32", 0, 1, 0.5, 0.5, inf=2).endswith("σ=0.5 Inf!")
    assert row_summary(stat("denoise", 0, "m", 0, mean=0.5, std=2.0, absmax=7.0)) == (
        "tensor[1,4,8,8] float32 x∈[-7, 7] μ=0.5 σ=2")
    a = np.array([[1.0, np.nan], [np.inf, 3.0]], np.float32)
    assert array_summary(a) == "tensor[2,2] float32 x∈[1, 3] μ=2 σ=1 NaN! Inf!"  # statistics of the finite part
    assert array_summary(np.full(2, np.nan)) == "tensor[2] float64 x∈[nan, nan] μ=nan σ=nan NaN!"
