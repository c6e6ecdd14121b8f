"""Run settings: everything needed to re-create a run exactly, validated with messages a user can act on."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ghostviewer.analysis.settings_check import (
    MAX_SEED,
    DenoiserShape,
    SettingsError,
    check_capture,
    check_memory,
    check_values,
)
from ghostviewer.engine.errors import GhostError

PROBES = ("pipeline.prepare_latents", "pipeline.noise_pred")  # pipeline-level tensors the tracer records too


@dataclass(frozen=True)
class RunSettings:
    prompt: str
    negative_prompt: str = ""
    seed: int = 0
    steps: int = 20
    guidance: float | None = None  # None: the family's usual guidance (7.5 for SD and the demo), resolved by
    # runner.prepare_settings, so a record always holds the guidance actually used
    width: int | None = None  # None: the pipeline's native size
    height: int | None = None
    scheduler: str | None = None  # None: the pipeline's own
    device: str = "auto"
    dtype: str | None = None
    bypass: tuple[str, ...] = ()
    capture: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    trace_depth: str = "block"
    capture_attention: bool = False  # cross-attention maps per token and self-attention entropy, every step
    source: str = "demo"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def memory_check(self) -> bool:
        """False when the user turned the memory estimate off (kept in `extra`, so a replay keeps it too)."""
        return self.extra.get("memory_check", True) is not False

    @property
    def config(self) -> str | None:
        """The configs folder a single-file checkpoint was loaded with (kept in `extra`: a replay reloads it so)."""
        value = self.extra.get("config")
        return str(value) if value else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("bypass", "capture", "faults"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSettings:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key in ("bypass", "capture", "faults"):
            values[key] = tuple(values.get(key) or ())
        return cls(**values)


def resolve_seed(seed: int | None) -> tuple[int, str | None]:
    """-1 (or None) means "pick one", as in A1111: return the seed actually used and a note saying so."""
    if seed is None or seed == -1:
        chosen = random.SystemRandom().randrange(0, 2**32)
        return chosen, f"seed -1 means random: using seed {chosen}"
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise GhostError(f"seed must be a whole number, not {seed!r}")
    if seed < 0 or seed > MAX_SEED:
        raise GhostError(f"seed must be between 0 and {MAX_SEED} (or -1 for a random one), not {seed}")
    return seed, None


def validate(settings: RunSettings) -> None:
    """The checks that need no pipeline (analysis/settings_check.py, shared with the GUI's form): one line each."""
    try:
        check_values(settings.to_dict())
    except SettingsError as exc:
        raise GhostError(str(exc)) from None
    if settings.trace_depth not in ("block", "leaf"):
        raise GhostError(f"trace depth must be 'block' or 'leaf', not {settings.trace_depth!r}")


def validate_for_pipeline(pipe: Any, device: str, settings: RunSettings) -> None:
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


def names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Module paths, fault names or patterns as given to the API: one string is one name, not its letters."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)
