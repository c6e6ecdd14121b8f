"""Envelopes (median, robust scale, healthy extremes) and the healthy subspace of channel means, on known data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ghostviewer.analysis.envelope import (
    MAD_TO_SIGMA,
    MIN_SUBSPACE_RUNS,
    BaselineError,
    Envelope,
    Subspace,
    finite_number,
)


def test_an_envelope_of_known_values() -> None:
    env = Envelope.of(np.array([[1.0], [2.0], [3.0], [4.0], [100.0]]), floor=1e-6)
    # median 3; |x - 3| = 2, 1, 0, 1, 97 → MAD 1: the outlier moves neither the median nor the scale
    assert env.median == (3.0,) and env.scale == (pytest.approx(MAD_TO_SIGMA),)
    assert (env.lo, env.hi) == ((1.0,), (100.0,))
    assert env.z([6.0])[0] == pytest.approx(3 / MAD_TO_SIGMA)
    assert env.excess([50.0]) == [0.0] and env.excess([103.0])[0] == pytest.approx(3 / MAD_TO_SIGMA)
    assert env.excess([-2.0])[0] == pytest.approx(3 / MAD_TO_SIGMA)
    lower, upper = env.limits(2.0)
    assert lower[0] == pytest.approx(1 - 2 * MAD_TO_SIGMA) and upper[0] == pytest.approx(100 + 2 * MAD_TO_SIGMA)


def test_a_constant_statistic_gets_the_floor_as_its_scale() -> None:
    env = Envelope.of(np.full((10, 3), 0.25), floor=0.01)
    assert env.scale == (0.01, 0.01, 0.01) and env.lo == env.hi == env.median == (0.25, 0.25, 0.25)
    assert env.z([0.35, 0.25, 0.15]) == pytest.approx([10.0, 0.0, -10.0])


def test_values_are_kept_to_six_significant_digits() -> None:
    env = Envelope.of(np.array([[1 / 3], [1 / 3]]), floor=1e-9)
    assert env.median == (0.333333,)


def test_json_round_trip_is_plain_json() -> None:
    env = Envelope.of(np.random.default_rng(0).normal(size=(20, 3)), floor=1e-3)
    text = json.dumps(env.to_json(), allow_nan=False)
    assert Envelope.from_json(json.loads(text), 3, "here") == env
    assert Envelope.from_json(env.to_json(), None, "any k") == env


@pytest.mark.parametrize(("data", "message"), [
    ([], "baseline entry e is not an object"),
    ({"median": [0.0], "scale": [1.0], "lo": [0.0]}, "hi must be 1 finite numbers"),
    ({"median": [0.0, 1.0], "scale": [1.0], "lo": [0.0], "hi": [0.0]}, "median must be 1 finite numbers"),
    ({"median": [float("nan")], "scale": [1.0], "lo": [0.0], "hi": [0.0]}, "median must be 1 finite"),
    ({"median": [True], "scale": [1.0], "lo": [0.0], "hi": [0.0]}, "median must be 1 finite"),  # bool: no number
    ({"median": ["0"], "scale": [1.0], "lo": [0.0], "hi": [0.0]}, "median must be 1 finite"),
    ({"median": [0.0], "scale": [0.0], "lo": [0.0], "hi": [0.0]}, "scales must be positive and lo ≤ hi"),
    ({"median": [0.0], "scale": [1.0], "lo": [1.0], "hi": [0.0]}, "scales must be positive and lo ≤ hi"),
])
def test_a_bad_entry_is_refused_in_one_line(data: object, message: str) -> None:
    with pytest.raises(BaselineError, match=message):
        Envelope.from_json(data, 1, "e")


def test_finite_number() -> None:
    assert finite_number(1) and finite_number(-2.5) and finite_number(0)
    assert not any(finite_number(v) for v in (float("inf"), float("nan"), True, "1", None))


def _line_vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    """Healthy 6-channel means that vary along one direction only (plus a little noise)."""
    direction = np.array([1.0, 2.0, 0.0, -1.0, 0.5, 0.0])
    return rng.normal(size=(n, 1)) * direction + 0.01 * rng.normal(size=(n, 6)) + 3.0


def test_a_subspace_fits_the_direction_healthy_vectors_share() -> None:
    rng = np.random.default_rng(0)
    subspace = Subspace.fit(_line_vectors(64, rng), floor=1e-4)
    assert subspace is not None
    assert np.allclose(subspace.basis.T @ subspace.basis, np.eye(subspace.basis.shape[1]), atol=1e-9)
    on_line = 3.0 + 2.5 * np.array([1.0, 2.0, 0.0, -1.0, 0.5, 0.0])
    assert subspace.residual.excess([subspace.residual_of(on_line)]) == [0.0]  # as near as healthy vectors
    # Every channel within its healthy range, the vector off the healthy line: a large residual.
    off = 3.0 + np.array([0.5, -0.5, 0.5, -0.5, 0.5, -0.5])
    residual = subspace.residual_of(off)
    assert residual > 0.5 and subspace.residual.excess([residual])[0] > 100
    held_out = [subspace.residual_of(v) for v in _line_vectors(20, rng)]
    assert max(subspace.residual.excess(held_out)) < 1.0  # new healthy vectors stay near the held-out extremes


def test_too_few_runs_or_channels_tell_no_subspace() -> None:
    rng = np.random.default_rng(1)
    assert Subspace.fit(_line_vectors(MIN_SUBSPACE_RUNS - 1, rng), floor=1e-4) is None
    assert Subspace.fit(rng.normal(size=(64, 2)), floor=1e-4) is None
    assert Subspace.fit(_line_vectors(MIN_SUBSPACE_RUNS, rng), floor=1e-4) is not None


def test_subspace_json_round_trip_and_refusals() -> None:
    subspace = Subspace.fit(_line_vectors(32, np.random.default_rng(2)), floor=1e-4)
    assert subspace is not None
    data = json.loads(json.dumps(subspace.to_json()))
    back = Subspace.from_json(data, 6, "s")
    assert np.allclose(back.center, subspace.center, rtol=1e-5) and np.allclose(back.basis, subspace.basis, atol=1e-5)
    assert back.residual == subspace.residual
    with pytest.raises(BaselineError, match="its subspace is not an object"):
        Subspace.from_json([1], 6, "s")
    with pytest.raises(BaselineError, match="the subspace basis must have 6 rows"):
        Subspace.from_json({**data, "basis": data["basis"][:5]}, 6, "s")
    with pytest.raises(BaselineError, match="center must be 4 finite numbers"):
        Subspace.from_json(data, 4, "s")
    ragged = [list(row) for row in data["basis"]]
    ragged[3] = ragged[3] + [0.0]
    with pytest.raises(BaselineError, match="row must be"):
        Subspace.from_json({**data, "basis": ragged}, 6, "s")
