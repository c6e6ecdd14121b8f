"""One step of one run as the views show it (StepData), read from the record in one go, and the numpy needed
to colour it. No Qt: StepDataModel calls load_step_data on a worker thread.

A batch's step file also holds every sample's latents, x0 and previews (`sample_latents`… index = sample);
sample_step picks one sample's out of the step already read (a record made before them has none: None)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from ghostviewer.record import RecordError, RunRecord

NON_FINITE_RGBA = (255, 0, 255, 255)  # magenta: NaN and Inf are never mistaken for data
GAP_RGBA = (40, 40, 40, 255)
StepKey = tuple[str, int, int]  # (run folder, the record's step index, version)


@dataclass(frozen=True, eq=False)
class StepData:
    """What every view shows of one step. Shared by all of them: the arrays are read-only."""

    run_dir: str | None
    step: int  # the record's step index; -1 when nothing is selected
    version: int = 0  # bumped when a file of the step changes (a decode was written)
    tensors: Mapping[str, np.ndarray] = field(default_factory=dict)  # latents, x0, fm/*, attn/*, attn_entropy/*
    x0_preview: np.ndarray | None = None  # (H, W, 3) uint8: the cheap linear preview recorded with the step
    latents_preview: np.ndarray | None = None  # the noisy latents' cheap preview (recorded, else from channels)
    decoded: np.ndarray | None = None  # a full VAE decode of this step, when one was asked for
    error: str = ""  # why the step could not be read ("" when it was)
    latents_mosaic: tuple[np.ndarray, float] | None = None  # channel_mosaic(latents, lut) made by the reader

    @property
    def key(self) -> StepKey | None:
        return None if self.run_dir is None else (self.run_dir, self.step, self.version)

    @property
    def empty(self) -> bool:
        return self.run_dir is None or self.step < 0

    @property
    def latents(self) -> np.ndarray | None:
        return self.tensors.get("latents")

    @property
    def x0(self) -> np.ndarray | None:
        return self.tensors.get("x0")


NO_STEP = StepData(None, -1)
SAMPLE_TENSORS = {"latents": "sample_latents", "x0": "sample_x0"}  # a batch's per-sample step tensors (N, C, H, W)


def has_sample_tensors(data: StepData) -> bool:
    """The step holds every sample's latents (a batch recorded since they were kept)."""
    return isinstance(data.tensors.get("sample_latents"), np.ndarray)


def sample_step(data: StepData, sample: int) -> StepData | None:
    """The step as sample `sample` of a batch shows it: its own latents, x0 and previews, nothing else (feature maps
    are the last sample's; its on-demand decode is read by the step images). None when the step holds no tensors of
    that sample."""
    if not has_sample_tensors(data) or not 0 <= sample < len(data.tensors["sample_latents"]):
        return None
    tensors = {name: data.tensors[key][sample] for name, key in SAMPLE_TENSORS.items()
               if isinstance(data.tensors.get(key), np.ndarray) and sample < len(data.tensors[key])}

    def picked(key: str) -> np.ndarray | None:
        array = data.tensors.get(key)
        ok = isinstance(array, np.ndarray) and array.dtype == np.uint8 and array.ndim == 4 and sample < len(array)
        return array[sample] if ok else None

    latents_preview = picked("sample_latents_preview")
    if latents_preview is None:
        latents_preview = _frozen(channels_rgb(tensors["latents"]))
    return StepData(data.run_dir, data.step, data.version, tensors, picked("sample_preview"), latents_preview,
                    error=data.error)


def read_rgb(path: Path | None) -> np.ndarray | None:
    if path is None:
        return None
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except OSError:
        return None


def _frozen(array: np.ndarray | None) -> np.ndarray | None:
    if array is not None:
        array.setflags(write=False)
    return array


def load_step_data(record: RunRecord, step: int, version: int = 0, look_for_decode: bool = True,
                   mosaic_lut: np.ndarray | None = None) -> StepData:
    """The step's tensor file, the run's file list and the step's images, read once (look_for_decode=False skips
    the on-demand decode: none exists while the engine is still writing the run). mosaic_lut: colour the latent
    channels with it here (channel_mosaic), off the GUI thread. Never raises RecordError."""
    run_dir = str(record.path)
    try:
        tensors = record.step_tensors(step)
        images = {f["name"]: f["relpath"] for f in record.files() if f["kind"] == "image"}
    except RecordError as exc:
        return StepData(run_dir, step, version, error=str(exc))

    def recorded(name: str) -> np.ndarray | None:
        if isinstance(tensors.get(name), np.ndarray) and tensors[name].dtype == np.uint8:
            return tensors[name]  # previews recorded as RGB arrays in the step's tensors
        relpath = images.get(f"step_{step:04d}_{name}")
        if relpath is None:
            return None
        path = (record.path / relpath).resolve()
        return read_rgb(path) if path.is_relative_to(record.path.resolve()) else None

    latents = tensors.get("latents")
    latents_preview = recorded("latents_preview")
    if latents_preview is None and latents is not None:
        latents_preview = channels_rgb(latents)
    try:
        decoded = read_rgb(record.step_image_path(step, "decoded")) if look_for_decode else None
    except RecordError:
        decoded = None
    for array in tensors.values():
        _frozen(array)
    mosaic = None
    if mosaic_lut is not None and isinstance(latents, np.ndarray):
        image, limit = channel_mosaic(latents, mosaic_lut)
        mosaic = (_frozen(image), limit)
    return StepData(run_dir, step, version, tensors, _frozen(recorded("preview")), _frozen(latents_preview),
                    _frozen(decoded), latents_mosaic=mosaic)


def channels_rgb(latents: np.ndarray) -> np.ndarray:
    """A stand-in RGB preview: the first three channels, each stretched to mean ± 2.5 std; NaN in any channel
    magenta. A 2-D array (one channel, or latents still packed as tokens × channels) is shown as one grey picture."""
    z = np.asarray(latents, np.float32)
    z = z[None] if z.ndim == 2 else z.reshape(-1, *z.shape[-2:])
    channels = z[:3] if z.shape[0] >= 3 else np.repeat(z[:1], 3, axis=0)
    bad = ~np.isfinite(z).all(axis=0)  # NaN in any channel (of 16, say), not just the three shown
    out = np.empty(channels.shape[1:] + (3,), np.uint8)
    for i, channel in enumerate(channels):
        finite = channel[np.isfinite(channel)]
        mean, std = (float(finite.mean()), float(finite.std())) if finite.size else (0.5, 0.2)
        lo, hi = mean - 2.5 * std, mean + 2.5 * std
        scaled = (np.nan_to_num(channel, nan=lo, posinf=hi, neginf=lo) - lo) / max(hi - lo, 1e-6)
        out[..., i] = (np.clip(scaled, 0, 1) * 255).round().astype(np.uint8)
    out[bad] = NON_FINITE_RGBA[:3]
    return out


def channel_mosaic(latents: np.ndarray, lut: np.ndarray, gap: int = 1) -> tuple[np.ndarray, float]:
    """(C, H, W) → an RGBA grid of colour-mapped channels on one symmetric scale ±limit; returns (image, limit).

    lut: (N, 3|4) uint8 diverging colour map; its middle is zero. NaN and Inf show magenta.
    """
    z = np.asarray(latents, np.float32)
    if z.ndim == 2:
        z = z[None]
    count, height, width = z.shape[0], z.shape[-2], z.shape[-1]
    cols = math.ceil(math.sqrt(count))
    rows = math.ceil(count / cols)
    finite = z[np.isfinite(z)]
    limit = float(np.abs(finite).max()) if finite.size else 1.0
    limit = limit if limit > 0 else 1.0
    index = np.clip(((np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0) / limit + 1.0) / 2.0)
                    * (len(lut) - 1), 0, len(lut) - 1).round().astype(np.intp)
    table = lut if lut.shape[1] == 4 else np.concatenate([lut, np.full((len(lut), 1), 255, np.uint8)], axis=1)
    coloured = table[index]  # (C, H, W, 4)
    coloured[~np.isfinite(z)] = NON_FINITE_RGBA
    mosaic = np.empty((rows * height + (rows - 1) * gap, cols * width + (cols - 1) * gap, 4), np.uint8)
    mosaic[:] = GAP_RGBA
    for c in range(count):
        r, k = divmod(c, cols)
        top, left = r * (height + gap), k * (width + gap)
        mosaic[top:top + height, left:left + width] = coloured[c]
    return mosaic, limit
