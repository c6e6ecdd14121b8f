"""The checks of a run's spec (spec/run_spec.py) that need the loaded pipeline: capture patterns against the traced
modules, the run's memory against the device's."""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.spec import RunSpec
from ghostviewer.spec.checks import (
    DenoiserShape,
    SettingsError,
    check_capture,
    check_memory,
)

PROBES = ("pipeline.prepare_latents", "pipeline.noise_pred")  # pipeline-level tensors the tracer records too


def validate_for_pipeline(pipe: Any, device: str, settings: RunSpec) -> None:
    """The checks against the loaded pipeline, on settings with their sizes filled in: capture patterns match a
    traced module, and the run fits the device's free memory (unless settings.memory_check is off)."""
    from ghostviewer.engine.tracing.tracer import traced_modules  # the walk the tracer makes, cached per pipeline

    try:
        if settings.capture:
            modules = [path for path, _ in traced_modules(pipe, settings.trace_depth)]  # type: ignore[arg-type]
            check_capture(settings.capture, [*modules, *PROBES])
        if settings.memory_check and settings.width and settings.height:
            available, where = available_memory(device)
            check_memory(settings.height, settings.width, float(settings.guidance), denoiser_shape(pipe),
                         available, where)
    except SettingsError as exc:
        raise GhostError(str(exc)) from None


def denoiser_shape(pipe: Any) -> DenoiserShape:
    """The widths and dtypes the memory estimate scales the demo's measure by."""
    from ghostviewer.engine.families import adapter_for
    from ghostviewer.engine.families.base import denoiser_of

    denoiser, vae = denoiser_of(pipe), getattr(pipe, "vae", None)
    config = dict(getattr(denoiser, "config", None) or {})
    vae_config = dict(getattr(vae, "config", None) or {})
    if config.get("block_out_channels"):
        width = int(max(config["block_out_channels"]))
    elif config.get("num_attention_heads") and config.get("attention_head_dim"):  # a DiT: tokens are patches
        packed = "Flux" in type(denoiser).__name__  # Flux packs 2×2 latent pixels into a token (patch_size 1)
        patch = 2 if packed else int(config.get("patch_size") or 1)
        width = int(config["num_attention_heads"]) * int(config["attention_head_dim"]) // max(1, patch * patch)
    else:
        width = DenoiserShape.denoiser_width
    decoder = vae_config.get("block_out_channels") or [DenoiserShape.decoder_width]
    return DenoiserShape(
        latent_channels=int(vae_config.get("latent_channels") or config.get("in_channels") or 4),
        vae_scale=int(adapter_for(pipe).vae_scale(pipe)),
        denoiser_width=width,
        decoder_width=int(decoder[0]),
        denoiser_bytes=_element_size(denoiser),
        decoder_bytes=_element_size(vae),
    )


def _element_size(module: Any) -> int:
    try:
        return int(next(module.parameters()).element_size())
    except (AttributeError, StopIteration, TypeError):
        return 4


def available_memory(device: str) -> tuple[int, str]:
    """(bytes free, where): the GPU's free memory for cuda, the machine's available memory otherwise."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            free, _total = torch.cuda.mem_get_info(torch.device(device))
            return int(free), device
    import psutil

    return int(psutil.virtual_memory().available), "this machine" if device == "cpu" else device
