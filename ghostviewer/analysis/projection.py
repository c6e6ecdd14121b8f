"""2-D projections of embedding vectors for display (numpy only, so the GUI can call it without torch).

PCA is exact and deterministic: the same vector always lands on the same point. UMAP and t-SNE are used only
when `umap` / `sklearn` are installed and there are enough points; otherwise PCA, and the method actually used
is returned with the points. Rows with NaN or Inf are left out of the fit and come back as NaN points.
"""

from __future__ import annotations

import importlib.util

import numpy as np

METHODS = ("pca", "umap", "tsne")
_MIN_POINTS_NONLINEAR = 5  # UMAP/t-SNE need neighbours; below this PCA says as much


def _pca(x: np.ndarray) -> np.ndarray:
    centered = x - x.mean(axis=0, keepdims=True)
    _, singular, vt = np.linalg.svd(centered, full_matrices=False)
    components = vt[:2]
    # Fix each axis's sign (largest loading positive) so projections are stable across calls.
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    components = components * np.where(signs == 0, 1.0, signs)[:, None]
    points = centered @ components.T
    points[:, singular[: points.shape[1]] <= 1e-12 * max(singular.max(initial=0.0), 1.0)] = 0.0
    if points.shape[1] < 2:  # one vector, or one dimension
        points = np.pad(points, ((0, 0), (0, 2 - points.shape[1])))
    return points


def _nonlinear(x: np.ndarray, method: str) -> np.ndarray:
    neighbours = min(15, len(x) - 1)
    if method == "umap":
        import umap

        return np.asarray(umap.UMAP(n_components=2, n_neighbors=neighbours, random_state=0).fit_transform(x))
    from sklearn.manifold import TSNE

    perplexity = float(min(30, (len(x) - 1) / 3))
    return np.asarray(TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=0).fit_transform(x))


def available_methods() -> tuple[str, ...]:
    found = {"umap": importlib.util.find_spec("umap"), "tsne": importlib.util.find_spec("sklearn")}
    return ("pca", *(m for m, spec in found.items() if spec is not None))


def project_2d(vectors: np.ndarray, method: str = "pca") -> tuple[np.ndarray, str]:
    """`(n, d)` vectors to `(n, 2)` float32 points; returns the points and the method actually used."""
    if method not in METHODS:
        raise ValueError(f"unknown projection {method!r} (have: {', '.join(METHODS)})")
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected (n, d) vectors, got shape {x.shape}")
    points = np.full((len(x), 2), np.nan)
    finite = np.isfinite(x).all(axis=1)
    fit = x[finite]
    if len(fit) < _MIN_POINTS_NONLINEAR or method not in available_methods():
        method = "pca"
    if len(fit):
        points[finite] = _pca(fit) if method == "pca" else _nonlinear(fit, method)
    return points.astype(np.float32), method
