"""Tiny, randomly initialised pipelines of the other families (SDXL, SD3, Flux, PixArt-Sigma), built offline.

Each builds from configs with random weights (same seed, same weights), renders 32×32 images in
milliseconds per step, and saves and reloads with `DiffusionPipeline.from_pretrained`. CLIP tokenizers are
written as BPE vocab/merges (as the SD one is); T5 tokenizers are `tokenizers` Unigram models. The PixArt T5
tokenizer is saved without `model_max_length` on purpose: real ones sometimes are, and the engine must cope.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from diffusers import (
    AutoencoderKL,
    DDIMScheduler,
    DiffusionPipeline,
    EulerDiscreteScheduler,
    FlowMatchEulerDiscreteScheduler,
    FluxPipeline,
    FluxTransformer2DModel,
    PixArtSigmaPipeline,
    PixArtTransformer2DModel,
    SD3Transformer2DModel,
    StableDiffusion3Pipeline,
    StableDiffusionXLPipeline,
    UNet2DConditionModel,
)
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTextModelWithProjection,
    T5Config,
    T5EncoderModel,
    T5Tokenizer,
)

from tests.engine.tiny_pipelines import TOKENIZER_WORDS, build_tiny_sd, build_tiny_tokenizer

FAMILIES = ("sd", "sdxl", "sd3", "flux", "pixart")
HIDDEN = 32  # every text encoder's width


def build_t5_tokenizer(max_length: int | None = 32) -> T5Tokenizer:
    """A Unigram T5 tokenizer: one piece per caption word, single letters for anything else."""
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    vocab += [("▁" + word, -1.0) for word in TOKENIZER_WORDS]
    vocab += [(chr(code), -5.0) for code in range(97, 123)]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    if max_length is not None:
        tokenizer.model_max_length = max_length
    return tokenizer


def build_t5_encoder(tokenizer: T5Tokenizer) -> T5EncoderModel:
    config = T5Config(
        vocab_size=len(tokenizer), d_model=HIDDEN, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
    )
    return T5EncoderModel(config).eval()


def _clip(projection: bool = False) -> CLIPTextModel | CLIPTextModelWithProjection:
    tokenizer = build_tiny_tokenizer()
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    config = CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=37, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=77, projection_dim=HIDDEN, hidden_act="gelu",
        bos_token_id=tokenizer.convert_tokens_to_ids(tokenizer.bos_token), eos_token_id=eos, pad_token_id=eos,
    )
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(config).eval()


def _vae(latent_channels: int, **flow: Any) -> AutoencoderKL:
    return AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), layers_per_block=1,
        latent_channels=latent_channels, norm_num_groups=8, sample_size=32, **flow,
    )


def _flow_vae(scaling: float, shift: float) -> AutoencoderKL:
    return _vae(16, scaling_factor=scaling, shift_factor=shift, use_quant_conv=False, use_post_quant_conv=False)


def build_tiny_sdxl() -> StableDiffusionXLPipeline:
    unet = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), use_linear_projection=True, addition_embed_type="text_time",
        addition_time_embed_dim=8, transformer_layers_per_block=(1, 1),
        projection_class_embeddings_input_dim=6 * 8 + HIDDEN, cross_attention_dim=2 * HIDDEN, norm_num_groups=8,
    )
    return StableDiffusionXLPipeline(
        vae=_vae(4, scaling_factor=0.13025), text_encoder=_clip(), text_encoder_2=_clip(projection=True),
        tokenizer=build_tiny_tokenizer(), tokenizer_2=build_tiny_tokenizer(), unet=unet,
        scheduler=EulerDiscreteScheduler(steps_offset=1, timestep_spacing="leading"),
    )


def build_tiny_sd3(with_t5: bool = True) -> StableDiffusion3Pipeline:
    transformer = SD3Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=16, out_channels=16, num_layers=3, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=HIDDEN, caption_projection_dim=HIDDEN,
        pooled_projection_dim=2 * HIDDEN, pos_embed_max_size=16,
    )
    t5 = build_t5_tokenizer() if with_t5 else None
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=_flow_vae(1.5305, 0.0609), text_encoder=_clip(projection=True), tokenizer=build_tiny_tokenizer(),
        text_encoder_2=_clip(projection=True), tokenizer_2=build_tiny_tokenizer(),
        text_encoder_3=build_t5_encoder(t5) if t5 is not None else None, tokenizer_3=t5,
    )


def build_tiny_flux() -> FluxPipeline:
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=2, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=HIDDEN, pooled_projection_dim=HIDDEN, guidance_embeds=True,
        axes_dims_rope=(4, 6, 6),
    )
    t5 = build_t5_tokenizer()
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    return FluxPipeline(
        scheduler=scheduler, vae=_flow_vae(0.3611, 0.1159), text_encoder=_clip(), tokenizer=build_tiny_tokenizer(),
        text_encoder_2=build_t5_encoder(t5), tokenizer_2=t5, transformer=transformer,
    )


def build_tiny_pixart() -> PixArtSigmaPipeline:
    transformer = PixArtTransformer2DModel(
        sample_size=16, num_layers=3, patch_size=2, attention_head_dim=8, num_attention_heads=4,
        caption_channels=HIDDEN, in_channels=4, cross_attention_dim=HIDDEN, out_channels=8,
    )
    tokenizer = build_t5_tokenizer(max_length=None)  # real T5 tokenizers may lack model_max_length
    return PixArtSigmaPipeline(
        tokenizer=tokenizer, text_encoder=build_t5_encoder(tokenizer), vae=_vae(4, scaling_factor=0.13025),
        transformer=transformer, scheduler=DDIMScheduler(steps_offset=1, clip_sample=False, set_alpha_to_one=False),
    )


BUILDERS: dict[str, Callable[[], DiffusionPipeline]] = {
    "sd": build_tiny_sd,
    "sdxl": build_tiny_sdxl,
    "sd3": build_tiny_sd3,
    "flux": build_tiny_flux,
    "pixart": build_tiny_pixart,
}


def build_tiny(family: str, seed: int = 0) -> DiffusionPipeline:
    """A tiny pipeline of `family` (one of FAMILIES); same seed, same weights."""
    torch.manual_seed(seed)
    pipe = BUILDERS[family]()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_tiny(family: str, folder: Path, seed: int = 0) -> Path:
    """Save a tiny pipeline of `family` in diffusers' layout (safetensors) and return the folder."""
    folder = Path(folder)
    build_tiny(family, seed).save_pretrained(folder, safe_serialization=True)
    return folder
