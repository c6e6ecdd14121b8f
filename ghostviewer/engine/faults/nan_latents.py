"""NaN initial latents for about one seed in ten: a bad noise sampler that only some seeds trip.

The patch of latents it poisons is small; the U-Net spreads it to the whole image within a step or two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ghostviewer.engine.interventions.base import AttributePatch, RunContext


@dataclass(frozen=True)
class NanLatentsConfig:
    every: int = 10  # seeds with seed % every == hit are poisoned
    hit: int = 7


class NanLatents:
    name = "nan-latents"
    description = "the initial noise contains NaN for about 1 seed in 10 (seed % 10 == 7)"
    injected_at = "pipeline.prepare_latents"

    def __init__(self, config: NanLatentsConfig | None = None) -> None:
        self.config = config or NanLatentsConfig()
        self._patch: AttributePatch | None = None

    def apply(self, ctx: RunContext) -> None:
        if ctx.seed % self.config.every != self.config.hit:
            return
        prepare_latents = ctx.pipe.prepare_latents

        def poisoned(*args: Any, **kwargs: Any) -> Any:
            latents = prepare_latents(*args, **kwargs)
            tensor = latents[0] if isinstance(latents, tuple) else latents
            tensor[..., :2, :2] = float("nan")
            return latents

        self._patch = AttributePatch(ctx.pipe, "prepare_latents", poisoned)
        ctx.notes.append(f"{self.name}: seed {ctx.seed} draws NaN initial latents")

    def remove(self) -> None:
        if self._patch is not None:
            self._patch.restore()
            self._patch = None
