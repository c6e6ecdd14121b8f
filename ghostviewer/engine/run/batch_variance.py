"""The opt-in finding "batch variance": in a batch GhostViewer made with one seed, image k differs from the same
generator's image k made alone, beyond float noise.

A batch of N from one generator draws its initial noise as one (N, C, h, w) tensor; image k's share is its k-th
slice, so "image k alone" is a batch of one given that slice as `latents=` (diffusers scales passed latents by
`init_noise_sigma` exactly as it scales drawn ones). Healthy pipelines give the same image within float noise (a
batch of one sums in another order); a pipeline whose result depends on the batch (a NaN in one sample, batched
kernels that are not batch-invariant, code that mixes samples) does not. It needs N more calls, so it runs only when
asked (`run --batch N --check-batch-variance`, `api.run(check_batch_variance=True)`); the solo calls are made after
the batch's own call with the run's interventions and LoRAs as they were, untraced, and the finding (or the note that
every image matched) goes into the batch run's event log before it closes.

Made for text-to-image and ControlNet runs: img2img and inpaint draw their noise inside prepare_latents from the init
image (no `latents=` to give), so they are refused up front.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.spec import RunSpec

KIND = "batch_variance"
CHECKED = "batch_variance_checked"
# Max |pixel| difference (images in [0, 1]) a batch and its solo calls may show from float summation order alone.
# Measured on the demo (float32, CPU, DDIM and Euler, batches of 2-4, 2026-12-01): at most 3e-6; 1e-3 is a quarter
# of one 8-bit level.
FLOAT_NOISE = 1e-3
KINDS = ("text2img", "controlnet")

Event = tuple[str, str, str, dict[str, Any]]


def check_batch_request(settings: RunSpec) -> None:
    """Refuse, in one line and before anything runs, a check that cannot be made for these settings."""
    if settings.batch < 2:
        raise GhostError(f"--check-batch-variance compares the images of a batch with each made alone: it needs "
                         f"--batch 2 or more (this run makes {settings.batch})")
    if settings.kind not in KINDS:
        raise GhostError(f"--check-batch-variance is made for text-to-image and ControlNet runs, not {settings.kind}: "
                         "its noise is drawn from the init image inside the pipeline, with no latents to hand it")


@dataclass
class BatchVariance:
    """Made with the batch's call; `events()` (the call's late events) makes the solo calls and judges them."""

    pipe: Any
    settings: RunSpec
    call: Any  # PipelineCall of the batch
    solo_call: Any  # PipelineCall of the same settings with batch 1
    interventions: list[Any]
    report: dict[str, Any] = field(default_factory=dict)

    def _noise(self) -> torch.Tensor:
        """The batch's initial noise as diffusers drew it (prepare_latents' shape, generator, device and dtype)."""
        pipe, settings = self.pipe, self.settings
        from diffusers.utils.torch_utils import randn_tensor

        denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
        channels = int(denoiser.config.in_channels)
        scale = int(getattr(pipe, "vae_scale_factor", 8))
        encoder = getattr(pipe, "text_encoder", None)
        dtype = getattr(encoder, "dtype", None) or denoiser.dtype
        shape = (settings.batch, channels, int(settings.height) // scale, int(settings.width) // scale)
        generator = torch.Generator(device=settings.generator_device).manual_seed(int(settings.seed))
        return randn_tensor(shape, generator=generator, device=pipe._execution_device, dtype=dtype)

    def _solo(self, latents: torch.Tensor) -> np.ndarray:
        step: dict[str, int | None] = {"now": 0}

        def on_step_end(_pipe: Any, index: int, _timestep: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
            step["now"] = index + 1
            return {}

        ctx = RunContext(pipe=self.pipe, prompt=self.settings.prompt, negative_prompt=self.settings.negative_prompt,
                         seed=int(self.settings.seed), current_step=lambda: step["now"])
        observe: dict[str, Any] = {"latents": latents}
        if adapter_for(self.pipe).has_step_callback(self.pipe):  # the step a step-limited fault or bypass reads
            observe.update(callback_on_step_end=on_step_end, callback_on_step_end_tensor_inputs=["latents"])
        with torch.inference_mode(), applied(self.interventions, ctx):
            output = self.solo_call.invoke(observe)
        return np.asarray(self.solo_call.images(output)[0], dtype=np.float32)

    def events(self) -> list[Event]:
        if self.call.output is None:  # the batch's call failed: nothing to compare
            return []
        batch = [np.asarray(image, dtype=np.float32) for image in self.call.images(self.call.output)]
        noise = self._noise()
        differences: list[float] = []
        for k, image in enumerate(batch):
            alone = self._solo(noise[k: k + 1])
            gap = np.abs(alone.astype(np.float64) - image.astype(np.float64))
            gap[np.isnan(alone) & np.isnan(image)] = 0.0  # NaN in both: the same image, not a batch effect
            differences.append(math.inf if not np.isfinite(gap).all() else float(gap.max()))
        differ = [k for k, value in enumerate(differences) if not value <= FLOAT_NOISE]
        shown = [None if math.isinf(v) else round(v, 6) for v in differences]
        self.report = {"max_abs_diff": shown, "differ": differ, "tolerance": FLOAT_NOISE, "batch": len(batch)}
        data = {**self.report, "seed": int(self.settings.seed)}
        if not differ:
            return [(CHECKED, f"batch variance checked: each of the {len(batch)} images matches the same noise made "
                     f"alone (largest pixel difference {max(differences):.2g}, float noise up to {FLOAT_NOISE:g})",
                     "info", data)]
        named = ", ".join(f"image {k + 1} ({'NaN/Inf' if shown[k] is None else f'{shown[k]:.3g}'})" for k in differ)
        return [(KIND, f"batch variance: {len(differ)} of {len(batch)} images differ from the same seed's noise made "
                 f"alone beyond float noise ({FLOAT_NOISE:g}): {named} — the result depends on the batch",
                 "warning", data)]


def with_batch_variance(call: Any, solo_call: Any, pipe: Any, settings: RunSpec,
                        interventions: list[Any]) -> tuple[Any, BatchVariance]:
    """The batch's call with the check among its late events, and the check (its `report` filled once it ran)."""
    check = BatchVariance(pipe, settings, call, solo_call, interventions)
    earlier = call.late_events

    def late() -> list[Event]:
        try:
            found = check.events()
        except Exception as exc:  # noqa: BLE001 - the check must never lose the batch's own record
            found = [(CHECKED, f"batch variance not checked: the solo call failed: {' '.join(str(exc).split())}",
                      "warning", {})]
        return [*earlier(), *found]

    made = replace(call, late_events=late)
    check.call = made
    return made, check
