"""Stat rows and real run records for the analysis tests, shaped as the tracer and the runner make them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ghostviewer.analysis.baseline import Baseline
from ghostviewer.analysis.envelope import Envelope
from ghostviewer.record import RunWriter, StatRow, StepInfo

IDENTITY = {"class": "StableDiffusionPipeline", "weight_hashes": {"unet": "0123456789abcdef"}}
BASELINE_SETTINGS = {"scheduler": "ddim", "steps": 2, "width": 64, "height": 64, "dtype": "float32", "guidance": 7.5}


def stat(phase: str, step: int | None, module: str, seq: int, *, call: int = 0, mean: float = 0.0,
         std: float = 1.0, absmax: float = 3.0, nan: int = 0, inf: int = 0, shape: tuple[int, ...] = (1, 4, 8, 8),
         fingerprint: int | None = None, dtype: str = "float32") -> StatRow:
    """One module output's statistics (min/max from absmax)."""
    return StatRow(phase, step, module, call, seq, shape, dtype, -absmax, absmax, mean, std, absmax, nan, inf,
                   fingerprint)


def pipeline_rows(steps: int = 2, denoiser: Iterable[str] = ("unet.down", "unet.mid", "unet.up"),
                  bad: Mapping[tuple[int | None, str], Mapping[str, Any]] | None = None) -> list[StatRow]:
    """A run in execution order: text_encoder (encode), the denoiser's blocks each step, vae.decoder (decode).
    `bad[(step, module)]`: fields to override in that output (e.g. {"nan": 4})."""
    bad = bad or {}
    rows: list[StatRow] = []

    def add(phase: str, step: int | None, module: str) -> None:
        rows.append(stat(phase, step, module, len(rows), **bad.get((step, module), {})))

    add("encode", None, "text_encoder")
    for step in range(steps):
        for module in denoiser:
            add("denoise", step, module)
    add("decode", None, "vae.decoder")
    return rows


def write_run(runs_dir: Path, rows: Iterable[StatRow], *, settings: Mapping[str, Any] | None = None,
              verdict: Mapping[str, Any] | None = None, first_anomaly: Mapping[str, Any] | None = None,
              image: np.ndarray | None = None, run_id: str | None = None, steps: int = 0,
              environment: Mapping[str, Any] | None = None, events: Iterable[tuple[str, str, dict]] = (),
              status: str = "done") -> Path:
    """A real, finished run folder (SQLite + safetensors + PNG) written with the record's own writer."""
    run_settings = {"prompt": "a red circle", "seed": 0, "steps": steps, **(settings or {})}
    writer = RunWriter.create(runs_dir, run_settings, dict(environment or {}), run_id=run_id)
    for kind, message, data in events:
        writer.event(kind, message, **data)
    writer.add_stats(list(rows))
    for step in range(steps):
        latents = np.full((1, 4, 8, 8), step, np.float32)
        info = StepInfo(step, 999.0 - step, 1.0, 0.01, None, None, None, "rss")
        writer.add_step(info, tensors={"latents": latents, "x0": latents})
    if image is not None:
        writer.save_image("final", image)
    writer.set_verdict(dict(verdict or {"label": "ok", "scores": {}}), None if first_anomaly is None else
                       dict(first_anomaly))
    writer.finish(status, 0.5)
    return writer.path


def baseline_for(rows: Iterable[StatRow], steps: int, spread: float = 0.05, **kwargs: Any) -> Baseline:
    """A baseline whose envelopes sit tightly around these rows' stats (call 0): scale `spread`, lo = hi = the value,
    so a value drifts when it leaves by more than margin × spread (0.3 at the default margin of 6)."""
    modules = {}
    for row in rows:
        if row.call == 0:
            values = (row.mean, row.std, row.absmax)
            modules[(row.phase, row.step, row.module)] = (row.shape, Envelope(values, (spread,) * 3, values, values))
    return Baseline(IDENTITY, {**BASELINE_SETTINGS, "steps": steps}, max(steps, 1), modules, None, **kwargs)
