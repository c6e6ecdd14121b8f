"""Comparing two runs: the first divergence in execution order, per-module deltas, settings and environment
differences, on plain rows and on real records (rows_differ itself: test_compare_rows.py)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.analysis.compare import (
    compare,
    compare_records,
    compare_runs,
    delta_grid,
    describe_divergence,
    environment_diff,
    first_divergence,
    first_stat_divergence,
    module_deltas,
    relative_delta,
    same_bits,
    settings_diff,
)
from ghostviewer.record import RunRecord
from tests.analysis.records import pipeline_rows, stat, write_run


def test_identical_rows_do_not_diverge() -> None:
    rows = pipeline_rows(steps=2)
    assert first_stat_divergence(rows, list(rows)) is None


def test_the_first_divergence_is_the_earliest_output_that_differs() -> None:
    a = pipeline_rows(steps=3)
    b = [replace(r, std=2.0) if r.module in ("unet.mid", "unet.up") and r.step and r.step >= 1 else r for r in a]
    assert first_stat_divergence(a, b) == {"phase": "denoise", "step": 1, "module": "unet.mid", "call": 0,
                                           "what": "std"}
    shaped = [replace(r, shape=(1, 4, 4, 4)) if r.module == "vae.decoder" else r for r in a]
    assert first_stat_divergence(a, shaped)["what"] == "shape"  # type: ignore[index]


def test_missing_outputs_on_either_side() -> None:
    a = pipeline_rows(steps=2)
    assert first_stat_divergence(a, a[:-1]) == {"phase": "decode", "step": None, "module": "vae.decoder", "call": 0,
                                                "what": "missing in the second run"}
    extra = [*a, stat("denoise", 1, "unet.extra", 50), stat("denoise", 0, "unet.extra2", 40)]
    assert first_stat_divergence(a, extra) == {"phase": "denoise", "step": 0, "module": "unet.extra2", "call": 0,
                                               "what": "missing in the first run"}  # the earliest of B's extras


def test_relative_delta() -> None:
    assert relative_delta(2.0, 2.0) == 0.0 and relative_delta(math.nan, math.nan) == 0.0
    assert relative_delta(1.0, 2.0) == 0.5 and relative_delta(-4.0, 4.0) == 2.0
    assert relative_delta(0.0, 1e-15) == pytest.approx(1e-3)  # scaled by at least 1e-12
    assert relative_delta(1.0, math.inf) == math.inf and relative_delta(math.nan, 1.0) == math.inf


def test_module_deltas_take_each_modules_worst_step_of_its_first_call() -> None:
    a = [*pipeline_rows(steps=3), stat("denoise", 0, "unet.mid", 99, call=1, std=1.0)]
    b = [replace(r, std={0: 1.0, 1: 1.5, 2: 1.25}[r.step]) if r.module == "unet.mid" and r.call == 0 else
         replace(r, std=100.0) if r.call == 1 else r for r in a]
    deltas = module_deltas(a, b)
    assert deltas["unet.mid"] == pytest.approx(1 / 3) and deltas["unet.down"] == 0.0
    assert module_deltas(a, b, stat="mean")["unet.mid"] == 0.0


def test_settings_and_environment_differences() -> None:
    assert settings_diff({"seed": 1, "steps": 4, "source": "demo"}, {"seed": 2, "steps": 4, "source": "/x"}) == {
        "seed": [1, 2]}  # where the pipeline came from is not a difference
    assert settings_diff({"a": 1}, {"b": 2}) == {"a": [1, None], "b": [None, 2]}
    a = {"device": "cpu", "versions": {"torch": "2.3"}, "determinism": {"deterministic": True, "threads": 2}}
    b = {"device": "cuda", "versions": {"torch": "2.4"}, "determinism": {"deterministic": True, "threads": 4}}
    assert environment_diff(a, b) == {"device": ["cpu", "cuda"], "threads": [2, 4]}  # flags flattened, nested dicts off


def test_describe_divergence() -> None:
    assert describe_divergence({"phase": "denoise", "step": 3, "module": "unet.mid_block", "what": "fingerprint"}) == (
        "unet.mid_block (fingerprint) at denoise step 3")
    assert describe_divergence({"phase": "decode", "step": None, "module": None, "what": "final image"}) == (
        "final image at decode")


def test_delta_grid() -> None:
    a = pipeline_rows(steps=2)
    b = [replace(r, std=2.0) if (r.module, r.step) == ("unet.mid", 1) else
         replace(r, fingerprint=1) if r.module == "unet.up" else r for r in a[:-1]]
    modules, columns, values, differs = delta_grid(a, b)
    assert modules == ["text_encoder", "unet.down", "unet.mid", "unet.up", "vae.decoder"]
    assert columns == [("encode", None), ("denoise", 0), ("denoise", 1), ("decode", None)]
    assert values[2, 2] == 0.5 and differs[2, 2]
    assert values[3, 1] == 0.0 and not differs[3, 1]  # a fingerprint on one side only: compared by statistics
    assert np.isnan(values[4, 3]) and not differs[4, 3]  # the decoder is missing in B
    assert np.isnan(values[0, 1])  # the encoder has no step
    assert int(differs.sum()) == 1


def test_same_bits() -> None:
    x = np.arange(4, dtype=np.float32)
    assert same_bits(x, x.copy()) and same_bits(None, None)
    assert not same_bits(x, x.astype(np.float64)) and not same_bits(x, None) and not same_bits(x, x.reshape(2, 2))
    assert same_bits(np.array([np.nan]), np.array([np.nan]))  # bit for bit, NaN equals itself


def _image(value: int) -> np.ndarray:
    image = np.full((8, 8, 3), 100, np.uint8)
    image[0, 0] = value
    return image


def test_real_records_that_match_and_that_differ(tmp_path: Path) -> None:
    env = {"device": "cpu", "fingerprint": "weighted32"}
    rows = [replace(r, fingerprint=r.seq * 7) for r in pipeline_rows(steps=2)]
    a = write_run(tmp_path, rows, steps=2, image=_image(1), environment=env, settings={"source": "demo"})
    same = write_run(tmp_path, rows, steps=2, image=_image(1), environment=env, settings={"source": "elsewhere"})
    result = compare(a, same)
    assert result["same"] is True and result["first_divergence"] is None and result["settings_diff"] == {}
    assert result["steps"] == [2, 2] and result["verdicts"] == ["ok", "ok"] and result["module_deltas"]["unet.mid"] == 0
    replay = compare_runs(a, same)
    assert replay["reproduced"] is True and replay["steps"] == 2 and replay["seed"] == 0

    flipped = [replace(r, fingerprint=1) if (r.module, r.step) == ("unet.down", 1) else r for r in rows]
    other = write_run(tmp_path, flipped, steps=2, image=_image(1), environment=env, settings={"seed": 3})
    result = compare_records(RunRecord(a), RunRecord(other))
    assert result["first_divergence"] == {"phase": "denoise", "step": 1, "module": "unet.down", "call": 0,
                                          "what": "fingerprint"}
    assert result["same"] is False and result["settings_diff"] == {"seed": [0, 3]}
    assert compare_runs(a, other)["reproduced"] is False


def test_fingerprints_made_another_way_compare_by_statistics_then_by_the_image(tmp_path: Path) -> None:
    rows = pipeline_rows(steps=1)
    a = write_run(tmp_path, [replace(r, fingerprint=5) for r in rows], steps=1, image=_image(1),
                  environment={"fingerprint": "weighted32"})
    older = write_run(tmp_path, [replace(r, fingerprint=9) for r in rows], steps=1, image=_image(1),
                      environment={"fingerprint": "sum"})
    assert first_divergence(RunRecord(a), RunRecord(older)) is None
    repainted = write_run(tmp_path, rows, steps=1, image=_image(2))
    assert first_divergence(RunRecord(a), RunRecord(repainted)) == {"phase": "decode", "step": None, "module": None,
                                                                   "what": "final image"}


def test_a_step_only_one_run_has(tmp_path: Path) -> None:
    rows = pipeline_rows(steps=1)
    short = write_run(tmp_path, rows, steps=1, image=_image(1))
    longer = write_run(tmp_path, rows, steps=2, image=_image(1))
    assert first_divergence(RunRecord(short), RunRecord(longer)) == {
        "phase": "denoise", "step": 1, "module": None, "what": "step missing in the first run"}
    backwards = first_divergence(RunRecord(longer), RunRecord(short))
    assert backwards is not None and backwards["what"] == "step missing in the second run"
