"""What the engine must know about a pipeline family, in one place: `FamilyAdapter`, and the shared rules.

A family adapter answers the questions whose answer differs between SD 1.x/2.x, SDXL, SD3, Flux and PixArt:
which tensor of a block's output is the image stream, how a block is bypassed (both streams of a dual-stream
block), how latents unpack to (C, H, W), how x0 is predicted, which attention processors can be observed,
the native size and usual guidance, and how steps are observed when the pipeline has no step callback.
The defaults here are the U-Net families' (SD 1.x/2.x); each family file overrides what differs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ghostviewer.engine.module_io import main_tensor

RGB = tuple[float, float, float]


def is_flow_matching(scheduler: Any) -> bool:
    """Rectified-flow schedulers (SD3, Flux): x_t = (1 − σ)·x0 + σ·noise, and the model predicts v = noise − x0."""
    return type(scheduler).__name__.startswith("FlowMatch")


def flow_x0(scheduler: Any, model_output: torch.Tensor, sample: torch.Tensor) -> torch.Tensor | None:
    """x0 = x_t − σ·v, σ of the step just taken (call after `scheduler.step`, which advanced `step_index`)."""
    index = getattr(scheduler, "step_index", None)
    sigmas = getattr(scheduler, "sigmas", None)
    if index is None or sigmas is None or not 1 <= index <= len(sigmas):
        return None
    sigma = sigmas[index - 1].to(sample.device, torch.float32)
    return (sample.float() - sigma * model_output.float()).to(sample.dtype)


def alphas_x0(scheduler: Any, model_output: torch.Tensor, timestep: Any, sample: torch.Tensor) -> torch.Tensor | None:
    """x0 for DDPM-style schedules (alphas_cumprod), by the scheduler's prediction type."""
    alphas = getattr(scheduler, "alphas_cumprod", None)
    if alphas is None:
        return None
    t = int(timestep.item() if isinstance(timestep, torch.Tensor) else timestep)
    alpha = alphas[t].to(sample.device, sample.dtype)
    beta = 1 - alpha
    kind = scheduler.config.get("prediction_type", "epsilon")
    if kind == "epsilon":
        return (sample - beta.sqrt() * model_output) / alpha.sqrt()
    if kind == "v_prediction":
        return alpha.sqrt() * sample - beta.sqrt() * model_output
    if kind == "sample":
        return model_output
    return None


def token_grid(tokens: int, latent_hw: tuple[int, int] | None) -> tuple[int, int] | None:
    """(h, w) of a token sequence laid over the latent grid at an integer downscale (patches), else None."""
    if latent_hw is None or tokens < 1:
        return None
    height, width = latent_hw
    factor = round(math.sqrt(height * width / tokens))
    if factor < 1 or height % factor or width % factor:
        return None
    grid = height // factor, width // factor
    return grid if grid[0] * grid[1] == tokens else None


def denoiser_of(pipe: Any) -> nn.Module | None:
    for name in ("transformer", "unet", "prior"):
        module = getattr(pipe, name, None)
        if isinstance(module, nn.Module):
            return module
    return None


def _input(args: tuple, kwargs: Mapping[str, Any], name: str, position: int) -> torch.Tensor | None:
    value = kwargs.get(name, args[position] if len(args) > position else None)
    return value if isinstance(value, torch.Tensor) else None


class FamilyAdapter:
    """The U-Net (SD 1.x/2.x) conventions; subclasses override what their family does differently."""

    name = "generic"
    label = "other diffusers pipeline"
    guidance = 7.5
    latent_rgb: tuple[RGB, ...] | None = None  # rows: latent channels; applied to VAE-scaled latents
    latent_rgb_bias: RGB = (0.0, 0.0, 0.0)
    dual_stream_kinds: frozenset[str] = frozenset()  # blocks taking and returning (encoder_hidden, hidden)
    joint_processor_kinds: frozenset[str] = frozenset()  # attention processors whose queries span both streams
    call_kwargs: Mapping[str, Any] = {}  # extra pipeline-call keywords the family needs

    def matches(self, pipe: Any) -> bool:
        return True

    # -- sizes, guidance, the pipeline call ---------------------------------------------------------------

    def vae_scale(self, pipe: Any) -> int:
        return int(getattr(pipe, "vae_scale_factor", 8) or 8)

    def native_size(self, pipe: Any) -> int:
        denoiser = denoiser_of(pipe)
        sample = denoiser.config.get("sample_size") if denoiser is not None else None
        sample = sample or getattr(pipe, "default_sample_size", None) or 64
        return int(sample if isinstance(sample, int) else sample[0]) * self.vae_scale(pipe)

    def latent_hw(self, pipe: Any, height: int, width: int) -> tuple[int, int]:
        """The latent grid of an image of this size: what token sequences are reshaped to."""
        scale = self.vae_scale(pipe)
        return height // scale, width // scale

    def negative_prompt(self, text: str) -> str | None:
        return text or None

    def has_step_callback(self, pipe: Any) -> bool:
        """Whether the pipeline's `__call__` takes `callback_on_step_end` (PixArt's swallows it silently)."""
        try:
            return "callback_on_step_end" in inspect.signature(type(pipe).__call__).parameters
        except (TypeError, ValueError):
            return False

    # -- block outputs and bypass -------------------------------------------------------------------------

    def is_dual_stream(self, module: nn.Module) -> bool:
        return type(module).__name__ in self.dual_stream_kinds

    def streams(self, module: nn.Module, output: object) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(image stream, text stream) of a block's output; the text stream is None for single-stream blocks."""
        if self.is_dual_stream(module) and isinstance(output, tuple) and len(output) == 2:
            text, image = output
            return (image if isinstance(image, torch.Tensor) else None), (
                text if isinstance(text, torch.Tensor) else None
            )
        return main_tensor(output), None

    def bypass_output(self, module: nn.Module, args: tuple, kwargs: Mapping[str, Any], output: object) -> object:
        """A dual-stream block's output as if it had not run, both streams: what SD3's `skip_layers` does
        (the block is skipped, so the text stream and the image stream go on as they came in). A text stream the
        block returns as None (SD3's last block) stays None. NotImplemented for other blocks."""
        if not self.is_dual_stream(module) or not isinstance(output, tuple) or len(output) != 2:
            return NotImplemented
        hidden = _input(args, kwargs, "hidden_states", 0)
        encoder = _input(args, kwargs, "encoder_hidden_states", 1)
        text, image = output
        if hidden is None or (text is not None and encoder is None):
            return NotImplemented
        return (None if text is None else encoder.to(text.dtype), hidden.to(image.dtype))

    # -- latents and x0 -----------------------------------------------------------------------------------

    def unpack_latents(self, pipe: Any, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Latents as (B, C, H, W), whatever layout the pipeline keeps them in."""
        return latents

    def x0(
        self, scheduler: Any, model_output: torch.Tensor, timestep: Any, sample: torch.Tensor, out: object
    ) -> torch.Tensor | None:
        """The step's predicted clean latents: the scheduler's own, else computed (call after the step)."""
        x0 = getattr(out, "pred_original_sample", None)
        if x0 is None and isinstance(out, tuple) and len(out) > 1 and isinstance(out[1], torch.Tensor):
            x0 = out[1]
        if x0 is not None:
            return x0
        if is_flow_matching(scheduler):
            return flow_x0(scheduler, model_output, sample)
        return alphas_x0(scheduler, model_output, timestep, sample)

    # -- attention ----------------------------------------------------------------------------------------

    def joint_attention_qk(
        self, attn: nn.Module, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None,
        image_rotary_emb: Any, text_len: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor, slice] | None:
        """Joint attention of the last batch item, as the family's processor computes it: the image queries
        (heads, image tokens, dim), every key (heads, keys, dim), and where the text keys lie among the keys.
        Scores are q·kᵀ/√dim. None where the family has no joint attention."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"family": self.name, "label": self.label, "guidance": self.guidance}
