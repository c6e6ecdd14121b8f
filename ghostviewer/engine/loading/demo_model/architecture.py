"""The demo pipeline's architecture: small enough to train on two CPU cores, real enough to debug.

A StableDiffusionPipeline: CLIP text encoder over the demo vocabulary, a UNet2DConditionModel on 16×16×4
latents (cross-attention only at 8×8 and 4×4, where it is cheap), an AutoencoderKL with ×4 downsampling,
and a cosine-β v-prediction schedule with trailing timesteps (what made shapes recognisable in trials).
"""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.loading.demo_model.tokenizer_files import MAX_LENGTH

LATENT_SIZE = 16


def vae_config() -> dict[str, Any]:
    return dict(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3,
        block_out_channels=(32, 48, 64),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=16,
        sample_size=64,
        mid_block_add_attention=False,
    )


def text_encoder_config(vocab_size: int, bos_id: int, eos_id: int) -> dict[str, Any]:
    return dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=MAX_LENGTH,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        projection_dim=64,
    )


def unet_config() -> dict[str, Any]:
    return dict(
        sample_size=LATENT_SIZE,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(48, 96, 128),
        layers_per_block=1,
        cross_attention_dim=64,
        attention_head_dim=8,
        norm_num_groups=16,
    )


def scheduler_config() -> dict[str, Any]:
    return dict(
        num_train_timesteps=1000,
        beta_schedule="squaredcos_cap_v2",
        prediction_type="v_prediction",
        timestep_spacing="trailing",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
