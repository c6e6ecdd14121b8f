"""Tiny, randomly initialised pipelines built offline from configs, for loader and engine tests."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import torch
from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

from ghostviewer.engine.loading.demo_model.tokenizer_files import write_tokenizer_files

TOKENIZER_WORDS = ["a", "red", "blue", "green", "circle", "square", "on", "background"]
MAX_LENGTH = 77


def build_tiny_tokenizer() -> CLIPTokenizer:
    with tempfile.TemporaryDirectory() as folder:
        write_tokenizer_files(Path(folder), TOKENIZER_WORDS)
        return CLIPTokenizer.from_pretrained(folder, model_max_length=MAX_LENGTH)


def build_tiny_text_encoder(tokenizer: CLIPTokenizer) -> CLIPTextModel:
    eos_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=MAX_LENGTH,
        bos_token_id=tokenizer.convert_tokens_to_ids(tokenizer.bos_token),
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        projection_dim=32,
    )
    return CLIPTextModel(config).eval()


def build_tiny_unet() -> UNet2DConditionModel:
    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(32, 64),
        layers_per_block=1,
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    )


def build_tiny_vae() -> AutoencoderKL:
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(32, 64),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=8,
        sample_size=16,
    )


def build_tiny_sd(seed: int = 0) -> StableDiffusionPipeline:
    """A StableDiffusionPipeline of ~1M random parameters; same seed, same weights."""
    torch.manual_seed(seed)
    tokenizer = build_tiny_tokenizer()
    pipe = StableDiffusionPipeline(
        vae=build_tiny_vae(),
        text_encoder=build_tiny_text_encoder(tokenizer),
        tokenizer=tokenizer,
        unet=build_tiny_unet(),
        scheduler=DDIMScheduler(steps_offset=1, clip_sample=False, set_alpha_to_one=False),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_tiny_sd(folder: Path, seed: int = 0) -> Path:
    """Save a tiny SD pipeline in diffusers' layout (safetensors) and return the folder."""
    folder = Path(folder)
    build_tiny_sd(seed).save_pretrained(folder, safe_serialization=True)
    return folder


# --- the original ("LDM") single-file layout, the inverse of diffusers' single_file_utils conversions ------

_RESNET_TO_LDM = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "time_emb_proj": "emb_layers.1",
    "conv_shortcut": "skip_connection",
}
_VAE_ATTENTION_TO_LDM = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def _rename_head(rest: str, table: dict[str, str]) -> str:
    for new, old in table.items():
        if rest.startswith(new + "."):
            return old + rest[len(new) :]
    return rest


def _unet_key_to_ldm(key: str, unet: UNet2DConditionModel) -> str:
    span = unet.config.layers_per_block + 1  # LDM numbers resnets, attentions and the resampler together
    if key in _UNET_FIXED:
        return _UNET_FIXED[key]
    if m := re.fullmatch(r"down_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", key):
        block, layer, rest = int(m[1]), int(m[2]), m[3]
        return f"input_blocks.{span * block + layer + 1}.0.{_rename_head(rest, _RESNET_TO_LDM)}"
    if m := re.fullmatch(r"down_blocks\.(\d+)\.attentions\.(\d+)\.(.*)", key):
        return f"input_blocks.{span * int(m[1]) + int(m[2]) + 1}.1.{m[3]}"
    if m := re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)", key):
        return f"input_blocks.{span * (int(m[1]) + 1)}.0.op.{m[2]}"
    if m := re.fullmatch(r"mid_block\.resnets\.(\d+)\.(.*)", key):
        return f"middle_block.{2 * int(m[1])}.{_rename_head(m[2], _RESNET_TO_LDM)}"
    if m := re.fullmatch(r"mid_block\.attentions\.0\.(.*)", key):
        return f"middle_block.1.{m[1]}"
    if m := re.fullmatch(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", key):
        return f"output_blocks.{span * int(m[1]) + int(m[2])}.0.{_rename_head(m[3], _RESNET_TO_LDM)}"
    if m := re.fullmatch(r"up_blocks\.(\d+)\.attentions\.(\d+)\.(.*)", key):
        return f"output_blocks.{span * int(m[1]) + int(m[2])}.1.{m[3]}"
    if m := re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)", key):
        block = int(m[1])
        slot = 2 if hasattr(unet.up_blocks[block], "attentions") else 1
        return f"output_blocks.{span * block + span - 1}.{slot}.conv.{m[2]}"
    raise KeyError(f"no LDM name for UNet key {key}")


def _vae_key_to_ldm(key: str, vae: AutoencoderKL) -> str:
    last_up = len(vae.config.up_block_types) - 1  # LDM numbers decoder blocks from the bottom up
    if key in _VAE_FIXED:
        return _VAE_FIXED[key]
    if m := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", key):
        return f"encoder.down.{m[1]}.block.{m[2]}.{m[3].replace('conv_shortcut', 'nin_shortcut')}"
    if m := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)", key):
        return f"encoder.down.{m[1]}.downsample.conv.{m[2]}"
    if m := re.fullmatch(r"(encoder|decoder)\.mid_block\.resnets\.(\d+)\.(.*)", key):
        return f"{m[1]}.mid.block_{int(m[2]) + 1}.{m[3]}"
    if m := re.fullmatch(r"(encoder|decoder)\.mid_block\.attentions\.0\.(.*)", key):
        return f"{m[1]}.mid.attn_1.{_rename_head(m[2], _VAE_ATTENTION_TO_LDM)}"
    if m := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", key):
        rest = m[3].replace("conv_shortcut", "nin_shortcut")
        return f"decoder.up.{last_up - int(m[1])}.block.{m[2]}.{rest}"
    if m := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)", key):
        return f"decoder.up.{last_up - int(m[1])}.upsample.conv.{m[2]}"
    raise KeyError(f"no LDM name for VAE key {key}")


def _clip_key_to_ldm(key: str) -> str:
    # transformers ≥5.6 flattened CLIPTextModel (no `text_model.` level); the LDM layout keeps it.
    return "cond_stage_model.transformer." + (key if key.startswith("text_model.") else "text_model." + key)


def to_ldm_state_dict(pipe: StableDiffusionPipeline) -> dict[str, torch.Tensor]:
    """The pipeline's weights named as in an original SD 1.x checkpoint (e.g. v1-5-pruned.safetensors)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in pipe.unet.state_dict().items():
        out["model.diffusion_model." + _unet_key_to_ldm(key, pipe.unet)] = value
    for key, value in pipe.vae.state_dict().items():
        if ".mid_block.attentions." in key and key.endswith(".weight") and value.ndim == 2:
            value = value[:, :, None, None]  # LDM's VAE attention projections are 1×1 convolutions
        out["first_stage_model." + _vae_key_to_ldm(key, pipe.vae)] = value
    for key, value in pipe.text_encoder.state_dict().items():
        out[_clip_key_to_ldm(key)] = value
    return {key: value.detach().clone().contiguous() for key, value in out.items()}


def save_tiny_sd_single_file(path: Path, seed: int = 0) -> tuple[Path, StableDiffusionPipeline]:
    """Save a tiny SD pipeline as one original-layout .safetensors checkpoint; return it and the pipeline."""
    pipe = build_tiny_sd(seed)
    save_file(to_ldm_state_dict(pipe), str(path))
    return Path(path), pipe


_UNET_FIXED = DIFFUSERS_TO_LDM_MAPPING["unet"]["layers"]
_VAE_FIXED = DIFFUSERS_TO_LDM_MAPPING["vae"]
