"""2-D projections for the embeddings view: numpy only, deterministic, honest about the method used."""

from __future__ import annotations

import numpy as np
import pytest

from ghostviewer.analysis.projection import available_methods, project_2d


def _vectors(n: int = 12, d: int = 16) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)


def test_pca_gives_two_coordinates_per_vector_with_the_variance_in_order() -> None:
    x = _vectors()
    x[:, 0] *= 10  # one dominant direction
    points, method = project_2d(x)
    assert method == "pca" and points.shape == (12, 2) and points.dtype == np.float32
    assert points[:, 0].var() > points[:, 1].var()
    centered = x - x.mean(axis=0)
    np.testing.assert_allclose(np.abs(points[:, 0]), np.abs(centered @ np.linalg.svd(centered)[2][0]), rtol=1e-4)


def test_identical_vectors_land_on_identical_points_every_time() -> None:
    x = _vectors()
    x[7] = x[2]
    points, _ = project_2d(x)
    np.testing.assert_array_equal(points[2], points[7])
    np.testing.assert_array_equal(points, project_2d(x.copy())[0])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_few_vectors_still_project(n: int) -> None:
    points, method = project_2d(_vectors(n), method="tsne")
    assert method == "pca" and points.shape == (n, 2) and np.isfinite(points).all()


def test_nonfinite_rows_come_back_as_nan_points() -> None:
    x = _vectors()
    x[3, 0] = np.nan
    points, _ = project_2d(x)
    assert np.isnan(points[3]).all() and np.isfinite(np.delete(points, 3, axis=0)).all()


def test_unavailable_methods_fall_back_to_pca() -> None:
    for method in ("umap", "tsne"):
        points, used = project_2d(_vectors(), method=method)
        assert points.shape == (12, 2)
        assert used == (method if method in available_methods() else "pca")
    with pytest.raises(ValueError, match="unknown projection"):
        project_2d(_vectors(), method="isomap")
