"""The ghost lab: fault presets that reproduce real bug classes on any pipeline, so their cause is known.

Each fault is one file — a config dataclass, an intervention with apply/remove — registered here by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.faults.dead_text_conditioning import DeadTextConditioning
from ghostviewer.engine.faults.decoder_color_shift import DecoderColorShift
from ghostviewer.engine.faults.fp16_vae_overflow import Fp16VaeOverflow
from ghostviewer.engine.faults.inf_trigger_word import InfTriggerWord
from ghostviewer.engine.faults.nan_latents import NanLatents
from ghostviewer.engine.faults.oom_at_step import OomAtStep
from ghostviewer.engine.faults.scaled_block import ScaledBlock
from ghostviewer.engine.faults.short_prompt_attention import ShortPromptAttention
from ghostviewer.engine.faults.unseeded_noise import UnseededNoise


@dataclass(frozen=True)
class FaultInfo:
    name: str
    description: str
    injected_at: str  # the module path (or pipeline probe) where the fault lives
    factory: Any


FAULTS: dict[str, FaultInfo] = {
    cls.name: FaultInfo(cls.name, cls.description, cls.injected_at, cls)
    for cls in (ShortPromptAttention, NanLatents, Fp16VaeOverflow, InfTriggerWord, UnseededNoise,
                # silent ghosts: no NaN, no inf; only a baseline or the prompt tells them
                DecoderColorShift, DeadTextConditioning, ScaledBlock,
                OomAtStep)  # not a ghost: a device error, to check the engine survives one
}


def make_fault(name: str) -> Any:
    if name not in FAULTS:
        raise GhostError(f"unknown fault {name!r}; known faults: {', '.join(FAULTS)}")
    return FAULTS[name].factory()


def list_faults() -> list[dict[str, str]]:
    return [{"name": f.name, "description": f.description, "module": f.injected_at} for f in FAULTS.values()]
