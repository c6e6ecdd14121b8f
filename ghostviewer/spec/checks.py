"""The torch-free half of settings validation: value checks and the memory estimate, in plain arithmetic, so the
GUI can pre-check a form and the engine (engine/run/settings.py) refuses the same values with the same words.

Every message is one line naming the setting and the value given. Nothing here needs a pipeline: the checks
against one (capture patterns, the device's memory) take what they need as plain numbers and names.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ghostviewer.spec.bypass import BypassSpec, BypassSpecError
from ghostviewer.spec.errors import SpecError
from ghostviewer.spec.loras import check_loras
from ghostviewer.spec.seeds import MAX_SEED

MAX_STEPS = 1000
MAX_GUIDANCE = 100.0  # beyond any pipeline's use; huge values only overflow the CFG sum (a user error, no ghost)
MIN_SIZE = 8
MAX_PROMPT_CHARS = 100_000  # text encoders read a few hundred tokens at most; past this a prompt is a mistake
MAX_SIZE = 65536  # a sanity cap even with the memory check off; the real cap is the memory estimate

# Peak memory of a run, per latent element (channels × height × width × CFG batch), in float32, measured on the
# demo pipeline (UNet widest level 128 channels, VAE ×4 with 32 channels at full size): ru_maxrss after one run
# minus RSS before it, a fresh process per size, 2026-11-30, 2 shared cores. KiB per element at 128/256/384/512/
# 640/768/896 px: 3.21, 4.56, 3.18, 2.80, 2.03, 2.39, 2.23 (the VAE decode at full size dominates). The factor is
# their middle, 3.1 KiB; the margin (×1.5 → 4.65 KiB) covers the largest. Other pipelines scale it by their own
# widths (DenoiserShape).
DEMO_BYTES_PER_ELEMENT = 3.1 * 1024
DEMO_DENOISER_WIDTH = 128
DEMO_DECODER_WIDTH = 32
DEMO_VAE_SCALE = 4
DEMO_LATENT_CHANNELS = 4
MEMORY_MARGIN = 1.5


class SettingsError(SpecError):
    """A setting the engine refuses before anything runs; the message is one line for the user."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_steps(steps: Any) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise SettingsError(f"steps must be a whole number, not {steps!r}")
    if steps < 1:
        raise SettingsError(f"steps must be at least 1, not {steps}")
    if steps > MAX_STEPS:
        raise SettingsError(f"steps must be at most {MAX_STEPS}, not {steps}")


def check_guidance(guidance: Any) -> None:
    if not _number(guidance) or not math.isfinite(guidance) or not 0 <= guidance <= MAX_GUIDANCE:
        raise SettingsError(f"guidance must be a number from 0 to {MAX_GUIDANCE:g}, not {guidance!r}")


def check_seed(seed: Any) -> None:
    """-1 (or None) asks for a random seed; else a whole number in 0..2**63-1."""
    if seed is None or (seed == -1 and not isinstance(seed, bool)):
        return
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise SettingsError(f"seed must be a whole number, not {seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise SettingsError(f"seed must be between 0 and {MAX_SEED} (or -1 for a random one), not {seed}")


def check_size(name: str, value: Any) -> None:
    """None: the pipeline's native size; else a positive multiple of 8 (its cap is the memory estimate)."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < MIN_SIZE or value % 8:
        raise SettingsError(f"{name} must be a positive multiple of 8, not {value!r}")
    if value > MAX_SIZE:
        raise SettingsError(f"{name} must be at most {MAX_SIZE}, not {value}")


def check_text(name: str, value: Any) -> None:
    """Any text, empty or with control characters (recorded as given), up to MAX_PROMPT_CHARS."""
    if not isinstance(value, str):
        raise SettingsError(f"the {name} must be text, not {type(value).__name__}")
    if len(value) > MAX_PROMPT_CHARS:
        raise SettingsError(f"the {name} is {len(value):,} characters long; at most {MAX_PROMPT_CHARS:,} are accepted "
                            "(the text encoder reads only its first few hundred tokens)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: bytes from a terminal or file that were not UTF-8
        raise SettingsError(f"the {name} is not valid text: character {exc.start + 1} is a byte that is not UTF-8 "
                            f"({value[exc.start].encode('utf-8', 'surrogateescape')!r}); save or type it as UTF-8"
                            ) from None


def check_strength(strength: Any, steps: int) -> None:
    """img2img/inpaint strength: in (0, 1], and high enough that int(steps × strength) — the denoising steps diffusers
    runs — is at least 1 (below that the pipeline runs no step, or raises an IndexError)."""
    if not _number(strength) or not math.isfinite(strength) or not 0 < strength <= 1:
        raise SettingsError(f"strength must be more than 0 and at most 1, not {strength!r}")
    if isinstance(steps, int) and steps >= 1 and int(steps * strength) == 0:
        needed = math.ceil(1 / strength)
        while int(needed * strength) < 1:  # float rounding: the smallest count diffusers turns into one step
            needed += 1
        raise SettingsError(f"strength {strength:g} with {steps} steps runs int({steps} × {strength:g}) = 0 denoising "
                            f"steps: raise the strength to at least {1 / steps:g} or the steps to at least {needed}")


def check_bypass(specs: Iterable[Any], steps: int) -> None:
    """Each spec reads as MODULE[@START:END], and its range holds at least one of the run's steps."""
    for spec in specs:
        if not isinstance(spec, str):
            raise SettingsError(f"a bypass is MODULE or MODULE@START:END, not {spec!r}")
        try:
            parsed = BypassSpec.parse(spec)
        except BypassSpecError as exc:
            raise SettingsError(str(exc)) from None
        if parsed.start is not None and parsed.start >= steps:
            raise SettingsError(f"--bypass {spec}: the run has {steps} steps (0 to {steps - 1}), "
                                f"so this range bypasses nothing")


def check_capture(patterns: Iterable[Any], modules: Iterable[str]) -> None:
    """Each capture pattern (a glob of module paths) matches at least one traced module."""
    names = list(modules)
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip():
            raise SettingsError(f"a capture pattern is a glob of module paths, not {pattern!r}")
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise SettingsError(f"--capture {pattern!r} matches no traced module (see 'ghostviewer blocks' "
                                "for the module paths)")


def check_values(settings: Mapping[str, Any]) -> None:
    """Everything that needs no pipeline: types, ranges, finiteness, bypass step ranges."""
    check_text("prompt", settings.get("prompt"))
    check_text("negative prompt", settings.get("negative_prompt", ""))
    check_seed(settings.get("seed", 0))
    check_steps(settings.get("steps", 20))
    if settings.get("guidance") is not None:  # None: the pipeline family's usual guidance
        check_guidance(settings.get("guidance"))
    check_size("width", settings.get("width"))
    check_size("height", settings.get("height"))
    for key in ("bypass", "capture", "faults"):
        value = settings.get(key, ())
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise SettingsError(f"{key} must be a list, not {value!r}")
    check_bypass(settings.get("bypass", ()), settings["steps"] if "steps" in settings else 20)
    if settings.get("strength") is not None:
        check_strength(settings["strength"], settings.get("steps", 20))
    try:  # LoRA entries (FILE[:SCALE]) and their files; a prompt list's row may name them too
        check_loras(settings.get("adapters", ()), settings.get("fuse_lora", False))
    except SpecError as exc:
        raise SettingsError(str(exc)) from None


@dataclass(frozen=True)
class DenoiserShape:
    """What the memory estimate needs to know of a pipeline, as plain numbers."""

    latent_channels: int = 4
    vae_scale: int = DEMO_VAE_SCALE
    denoiser_width: int = DEMO_DENOISER_WIDTH  # channels of the widest level (UNet); a DiT's width per latent pixel
    decoder_width: int = DEMO_DECODER_WIDTH  # the VAE decoder's channels at full size
    denoiser_bytes: int = 4  # element size of the denoiser's and the VAE's dtypes
    decoder_bytes: int = 4

    def activation_factor(self) -> float:
        """Bytes per latent element at the run's peak: the demo's measure scaled by the wider of the two parts
        (activations grow with a part's width and with the pixels behind each latent pixel; more latent channels
        mean fewer pixels per element)."""
        denoiser = self.denoiser_width / DEMO_DENOISER_WIDTH * self.denoiser_bytes / 4
        decoder = self.decoder_width / DEMO_DECODER_WIDTH * (self.vae_scale / DEMO_VAE_SCALE) ** 2
        per_pixel = max(denoiser, decoder * self.decoder_bytes / 4, 0.1)
        return DEMO_BYTES_PER_ELEMENT * per_pixel * DEMO_LATENT_CHANNELS / max(1, self.latent_channels)


def estimate_run_bytes(height: int, width: int, guidance: float, shape: DenoiserShape) -> int:
    """latent size × channels × batch (2 with classifier-free guidance) × the activation factor."""
    latent = math.ceil(height / shape.vae_scale) * math.ceil(width / shape.vae_scale) * shape.latent_channels
    batch = 2 if guidance > 1.0 else 1
    return int(latent * batch * shape.activation_factor())


def check_memory(height: int, width: int, guidance: float, shape: DenoiserShape, available: int, where: str) -> None:
    """Refuse a size whose estimate (with its margin) is more than the device has free."""
    needed = int(estimate_run_bytes(height, width, guidance, shape) * MEMORY_MARGIN)
    if needed > available:
        raise SettingsError(
            f"{width}x{height} needs about {format_bytes(needed)} on {where} but {format_bytes(available)} is free; "
            "choose a smaller size (or run it with --no-memory-check, memory_check=False in the API, to try anyway)"
        )


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"
