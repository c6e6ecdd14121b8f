"""Tiny LoRAs made with PEFT on a copy of a pipeline's U-Net (its attention projections), saved as diffusers saves
them (safetensors): `zero` as PEFT initialises one (lora_B all zeros: no effect), `good` with a random lora_B."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def save_lora(state: dict[str, Any], folder: Path, name: str) -> Path:
    from diffusers import StableDiffusionPipeline

    StableDiffusionPipeline.save_lora_weights(folder, unet_lora_layers=state, weight_name=name,
                                              safe_serialization=True)
    return folder / name


def lora_states(unet: Any, b_scale: float = 0.3, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """(zero, good): the PEFT state dict of a rank-4 LoRA on `unet`'s attention projections as initialised, and the
    same with lora_B drawn at random (× b_scale)."""
    import torch
    from peft import LoraConfig, get_peft_model_state_dict

    unet = copy.deepcopy(unet)
    unet.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=TARGETS))
    state = get_peft_model_state_dict(unet)
    generator = torch.Generator().manual_seed(seed)
    good = {k: torch.randn(v.shape, generator=generator) * b_scale if "lora_B" in k else v for k, v in state.items()}
    return state, good
