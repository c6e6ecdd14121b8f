"""The verdict on a run's final image: ok, or which ghost it is (blank, noise, nan, saturated, color_cast).

Numpy only (no torch), so the record and the GUI can re-judge a stored image. The input is what a diffusers
pipeline returns with ``output_type="np"``: float, (H, W, 3), nominally in [0, 1], possibly holding NaN/Inf.

Scores (plain finite floats, JSON-safe):

- ``nan_fraction``: fraction of pixels with a non-finite channel.
- ``std``: spatial standard deviation over the finite pixels (root of the channel-mean variance).
- ``noise``: high-frequency energy, mean |image − 3×3 box blur| divided by the spatial std, the largest over
  1×, 2× and 4× mean-pooled copies (static at the latent's scale is blotchy, not pixel-fine). I.i.d. static
  scores ~0.75; flat shapes with sharp edges ~0.04 at full resolution and up to ~0.2 at 4× pooling (only the
  edge pixels differ from their blur).
- ``saturated``: fraction of channel values clipped (≤ 1/255 or ≥ 254/255). The demo's "black" and "white"
  are (20, 20, 20) and (245, 245, 245), so a healthy image clips almost nothing.
- ``color_cast``: how strongly the pixels share one pale tint. Each pixel's chroma (RGB minus its grey level)
  is projected on the image's mean chroma direction (how far it leans toward the common hue); its smallest
  channel says how lifted (pale, washed out) it is; its cast is the smaller of the two, and the score is the
  median over pixels. A channel offset or a blend toward one hue turns white, grey and pastel regions into
  tinted-but-pale ones, which score high. A legit saturated pair such as a red shape on an orange background
  leans toward one hue too, but its colours are pure (smallest channel near 0) and score low. Deliberately
  conservative: a cast that turns a black background into a pure dark colour cannot be told, from the image
  alone, from a legit dark background, and is not flagged (an offset that clips shows up as ``saturated``);
  analysis/verdict_context.py judges such images against the pipeline's baseline and the prompt instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

LABELS = ("ok", "blank", "noise", "nan", "saturated", "color_cast")
SCORES = ("nan_fraction", "std", "noise", "saturated", "color_cast")
# Static is looked for at 1×, 2× and 4× mean-pooled resolution: pixel-level static and the blotchy static of a
# VAE decoding un-denoised latents (one blotch per latent pixel) both score ~0.75 at one of them.
NOISE_SCALES = (1, 2, 4)
_MIN_POOLED_SIDE = 16


@dataclass(frozen=True)
class Thresholds:
    """Where each score turns into a label.

    Calibrated with scripts/calibrate_verdicts.py (2026-11-30) on 280 healthy runs of the embedded demo
    pipeline: every shape × colour × background combination of ghostviewer.demo.shapes once, positions
    cycling, 20 DDIM steps, 64×64, guidance 7.5. Each threshold sits with a margin beyond the healthy extreme
    (0 false alarms) and inside the synthetic ghosts' scores. Figures at calibration, healthy → ghosts:
    std min 0.055 → 0 (black, gray); noise max 0.25 → ≥ 0.75 (static, pixel-fine or in 4×4 blotches);
    saturated max 0.18 (white shape on yellow) → ≥ 0.59 (healthy × 4, clipped); color_cast max 0.25
    (black shape on purple; red on orange ~0.1) → 0.31–0.41 (white backgrounds − 0.5 on red, or blended
    50 % toward blue). The color_cast margin is the thinnest: only strong, pale casts are flagged.
    """

    nan_fraction: float = 0.0  # nan when more than this fraction of pixels is non-finite: any NaN/Inf
    blank_std: float = 0.02  # blank when the spatial std is below this (healthy min 0.055)
    noise: float = 0.4  # noise when high-frequency energy over contrast is above this (healthy max 0.25)
    saturated: float = 0.3  # saturated when this fraction of channel values is clipped (healthy max 0.18)
    color_cast: float = 0.3  # color_cast when the median pixel's pale shared tint is above (healthy max 0.25)


THRESHOLDS = Thresholds()


def verdict_is_bad(label: str) -> bool:
    """True for every label but 'ok' (an unknown label counts as bad: a false alarm beats a silent ghost)."""
    return label != "ok"


def image_verdict(image: np.ndarray, thresholds: Thresholds = THRESHOLDS) -> dict:
    """``{"label": "ok|blank|noise|nan|saturated|color_cast", "scores": {...}}`` for one image.

    Labels by priority: nan > blank > noise > saturated > color_cast > ok.
    """
    scores = image_scores(image)
    t = thresholds
    if scores["nan_fraction"] > t.nan_fraction:
        label = "nan"
    elif scores["std"] < t.blank_std:
        label = "blank"
    elif scores["noise"] > t.noise:
        label = "noise"
    elif scores["saturated"] > t.saturated:
        label = "saturated"
    elif scores["color_cast"] > t.color_cast:
        label = "color_cast"
    else:
        label = "ok"
    return {"label": label, "scores": scores}


def image_scores(image: np.ndarray) -> dict[str, float]:
    """The scores behind the verdict, for an (H, W, 3) float image in [0, 1] (uint8 is accepted too)."""
    x = _as_image(image)
    finite_pixels = np.isfinite(x).all(axis=2)
    all_finite = bool(finite_pixels.all())
    nan_fraction = 0.0 if all_finite else 1.0 - float(finite_pixels.mean())
    values = x.reshape(-1, 3) if all_finite else x[finite_pixels]  # (N, 3)
    if values.shape[0] == 0:
        return {"nan_fraction": nan_fraction, "std": 0.0, "noise": 0.0, "saturated": 0.0, "color_cast": 0.0}

    std = float(np.sqrt(values.var(axis=0).mean()))
    # Non-finite pixels take the mean colour so that they add no edges (the nan label wins anyway).
    clean = x if all_finite else np.where(finite_pixels[:, :, None], x, values.mean(axis=0))
    side = min(x.shape[:2])
    scales = [k for k in NOISE_SCALES if k == 1 or side // k >= _MIN_POOLED_SIDE]
    noise = max(_high_frequency(_mean_pool(clean, k)) for k in scales)
    saturated = float(((values <= 1.0 / 255.0) | (values >= 254.0 / 255.0)).mean())
    color_cast = _color_cast(np.clip(values, 0.0, 1.0))

    scores = {"nan_fraction": nan_fraction, "std": std, "noise": noise, "saturated": saturated,
              "color_cast": color_cast}
    return {k: float(v) for k, v in scores.items()}


def thresholds_dict(thresholds: Thresholds = THRESHOLDS) -> dict[str, float]:
    return asdict(thresholds)


def _as_image(image: np.ndarray) -> np.ndarray:
    array = np.asarray(image)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"expected an (H, W, C) image, got shape {array.shape}")
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    elif array.shape[2] == 4:
        array = array[:, :, :3]
    elif array.shape[2] != 3:
        raise ValueError(f"expected 1, 3 or 4 channels, got shape {array.shape}")
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.float64) / 255.0
    return array.astype(np.float64)


def _box_blur3(channels: np.ndarray) -> np.ndarray:
    """3×3 mean of an (H, W, C) array, edges replicated."""
    padded = np.pad(channels, ((1, 1), (1, 1), (0, 0)), mode="edge")
    h, w = channels.shape[:2]
    rows = padded[:, :w] + padded[:, 1 : w + 1] + padded[:, 2 : w + 2]  # separable: 4 additions instead of 9
    return (rows[:h] + rows[1 : h + 1] + rows[2 : h + 2]) / 9.0


def _mean_pool(channels: np.ndarray, k: int) -> np.ndarray:
    if k == 1:
        return channels
    h, w, c = channels.shape
    h, w = h - h % k, w - w % k
    return channels[:h, :w].reshape(h // k, k, w // k, k, c).mean(axis=(1, 3))


def _high_frequency(channels: np.ndarray) -> float:
    """mean |x − 3×3 box blur(x)| over the spatial std: ~0.75 for i.i.d. static, ~0.05 for flat shapes."""
    std = float(np.sqrt(channels.reshape(-1, channels.shape[2]).var(axis=0).mean()))
    if std < 1e-6:
        return 0.0
    return float(np.abs(channels - _box_blur3(channels)).mean()) / std


def _color_cast(rgb: np.ndarray) -> float:
    """Median over (N, 3) pixels of min(lean toward the mean chroma direction, smallest channel)."""
    chroma = rgb - rgb.mean(axis=1, keepdims=True)
    mean_chroma = chroma.mean(axis=0)
    norm = float(np.linalg.norm(mean_chroma))
    if norm < 1e-6:
        return 0.0
    lean = chroma @ (mean_chroma / norm)
    lift = rgb.min(axis=1)
    return max(0.0, float(np.median(np.minimum(lean, lift))))
