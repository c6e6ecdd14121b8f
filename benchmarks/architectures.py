"""Real-architecture pipelines for benchmarks, built offline from the published configs with random weights.

    .venv/bin/python benchmarks/architectures.py sd15 [--dtype float32] [--keep DIR]

Each builder writes a diffusers folder (model_index.json, configs, safetensors) that GhostViewer loads as a user's
folder (`ghostviewer run --source DIR`). The shapes come from the published config.json files (diffusers 0.42 class
names); the weights are torch's default initialisation (norms at 1, biases at 0), so activations keep a trained
model's order of magnitude without any download. Tokenizers: the demo pipeline's CLIP BPE tokenizer (282 tokens; the
text encoders keep the real 49,408-token embedding table, random weights do not care which ids are used) with
CLIP's real 77-token length, and a small Unigram T5 tokenizer (real 32,128-token embedding table).

What is scaled, and why (ARCHITECTURES[name].scaled says it too; every width is the real one):
- sd15: nothing (U-Net 860M, CLIP ViT-L/14 123M, VAE 84M).
- sdxl: nothing (U-Net 2.6B, CLIP-L 123M, OpenCLIP bigG 695M, VAE 84M); built in bfloat16 by default (10 GiB in
  float32 would not fit beside the others on a 24 GiB machine).
- sd3: SD3-medium's MMDiT 24 → 6 joint blocks (the last one `context_pre_only`, as in the real model), CLIP-G 32 → 8
  layers, T5-XXL 24 → 2 layers; CLIP-L and the 16-channel VAE whole.
- flux: Flux.1-schnell's transformer 19 → 1 double-stream and 38 → 2 single-stream blocks (each block whole: 3,072
  wide, 24 heads of 128), T5-XXL 24 → 2 layers; CLIP-L and the VAE whole.
A block's cost and its tracing cost are both per block, so fewer blocks of the real width keep the traced/untraced
ratio of a block; only the text encoders' share of the run (encoded once) grows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
DEMO_TOKENIZER = ROOT / "resources" / "demo-pipeline" / "tokenizer"

SD15_UNET: dict[str, Any] = {  # runwayml/stable-diffusion-v1-5 unet/config.json
    "act_fn": "silu", "attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False, "cross_attention_dim": 768,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "downsample_padding": 1, "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4, "layers_per_block": 2,
    "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32, "out_channels": 4, "sample_size": 64,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
}
SDXL_UNET: dict[str, Any] = {  # stabilityai/stable-diffusion-xl-base-1.0 unet/config.json
    "act_fn": "silu", "addition_embed_type": "text_time", "addition_embed_type_num_heads": 64,
    "addition_time_embed_dim": 256, "attention_head_dim": [5, 10, 20], "block_out_channels": [320, 640, 1280],
    "center_input_sample": False, "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"], "downsample_padding": 1,
    "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4, "layers_per_block": 2, "mid_block_scale_factor": 1,
    "norm_eps": 1e-05, "norm_num_groups": 32, "out_channels": 4, "projection_class_embeddings_input_dim": 2816,
    "sample_size": 128, "transformer_layers_per_block": [1, 2, 10],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], "use_linear_projection": True,
}
SD3_TRANSFORMER: dict[str, Any] = {  # stabilityai/stable-diffusion-3-medium-diffusers transformer/config.json
    "sample_size": 128, "patch_size": 2, "in_channels": 16, "num_layers": 24, "attention_head_dim": 64,
    "num_attention_heads": 24, "joint_attention_dim": 4096, "caption_projection_dim": 1536,
    "pooled_projection_dim": 2048, "out_channels": 16, "pos_embed_max_size": 192,
}
FLUX_TRANSFORMER: dict[str, Any] = {  # black-forest-labs/FLUX.1-schnell transformer/config.json
    "patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 4096, "pooled_projection_dim": 768, "guidance_embeds": False,
    "axes_dims_rope": [16, 56, 56],
}
CLIP_L: dict[str, Any] = {  # openai/clip-vit-large-patch14 text_config (SD 1.5, SDXL, SD3, Flux)
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    "max_position_embeddings": 77, "vocab_size": 49408, "hidden_act": "quick_gelu", "projection_dim": 768,
}
CLIP_G: dict[str, Any] = {  # laion/CLIP-ViT-bigG-14 text_config (SDXL's and SD3's text_encoder_2)
    "hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_attention_heads": 20,
    "max_position_embeddings": 77, "vocab_size": 49408, "hidden_act": "gelu", "projection_dim": 1280,
}
T5_XXL: dict[str, Any] = {  # google/t5-v1_1-xxl encoder (SD3's text_encoder_3, Flux's text_encoder_2)
    "d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 24, "feed_forward_proj": "gated-gelu",
    "vocab_size": 32128, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
    "layer_norm_epsilon": 1e-06, "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
    "tie_word_embeddings": False,
}
VAE: dict[str, Any] = {  # the SD 1.5 / SDXL autoencoder (4 latent channels)
    "in_channels": 3, "out_channels": 3, "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4, "block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
    "latent_channels": 4, "norm_num_groups": 32, "act_fn": "silu",
}
FLOW_VAE: dict[str, Any] = {**VAE, "latent_channels": 16, "use_quant_conv": False, "use_post_quant_conv": False}
SD_BETAS: dict[str, Any] = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
                            "num_train_timesteps": 1000}
T5_WORDS = ("a", "an", "the", "red", "green", "blue", "yellow", "orange", "purple", "white", "black", "circle",
            "square", "triangle", "star", "cross", "on", "background", "top", "bottom", "left", "right", "photo")


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Parameters are created in `dtype` (an SDXL U-Net never exists in float32, 10 GiB)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def on_host(make: Callable[[], Any]) -> Any:
    """A scheduler: made on the CPU in float32 whatever the device and dtype the models are built with."""
    with torch.device("cpu"), default_dtype(torch.float32):
        return make()


def clip_tokenizer() -> Any:
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(DEMO_TOKENIZER)
    tokenizer.model_max_length = 77  # CLIP's real context (the demo's is 32)
    return tokenizer


def t5_tokenizer() -> Any:
    from transformers import T5Tokenizer

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    vocab += [("▁" + word, -1.0) for word in T5_WORDS] + [(chr(code), -5.0) for code in range(97, 123)]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    tokenizer.model_max_length = 512
    return tokenizer


def clip_text(config: dict[str, Any], tokenizer: Any, projection: bool, layers: int | None = None) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    settings = {**config, **({"num_hidden_layers": layers} if layers else {})}
    made = CLIPTextConfig(**settings, bos_token_id=tokenizer.convert_tokens_to_ids(tokenizer.bos_token),
                          eos_token_id=eos, pad_token_id=eos)
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(made).eval()


def t5_encoder(layers: int) -> Any:
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(**{**T5_XXL, "num_layers": layers})).eval()


def vae(config: dict[str, Any], **extra: Any) -> Any:
    from diffusers import AutoencoderKL

    return AutoencoderKL(**config, **extra)


def build_sd15() -> Any:
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel

    tokenizer = clip_tokenizer()
    return StableDiffusionPipeline(
        vae=vae(VAE, sample_size=512, scaling_factor=0.18215), text_encoder=clip_text(CLIP_L, tokenizer, False),
        tokenizer=tokenizer, unet=UNet2DConditionModel(**SD15_UNET),
        scheduler=on_host(lambda: EulerDiscreteScheduler(**SD_BETAS, steps_offset=1, timestep_spacing="leading")),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )


def build_sdxl() -> Any:
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel

    tokenizer = clip_tokenizer()
    return StableDiffusionXLPipeline(
        vae=vae(VAE, sample_size=1024, scaling_factor=0.13025), text_encoder=clip_text(CLIP_L, tokenizer, False),
        text_encoder_2=clip_text(CLIP_G, tokenizer, True), tokenizer=tokenizer, tokenizer_2=clip_tokenizer(),
        unet=UNet2DConditionModel(**SDXL_UNET),
        scheduler=on_host(lambda: EulerDiscreteScheduler(**SD_BETAS, steps_offset=1, timestep_spacing="leading")),
    )


SD3_BLOCKS, SD3_CLIP_G_LAYERS, T5_LAYERS = 6, 8, 2
FLUX_DOUBLE, FLUX_SINGLE = 1, 2


def build_sd3() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    tokenizer = clip_tokenizer()
    return StableDiffusion3Pipeline(
        transformer=SD3Transformer2DModel(**{**SD3_TRANSFORMER, "num_layers": SD3_BLOCKS}),
        scheduler=on_host(lambda: FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)),
        vae=vae(FLOW_VAE, sample_size=1024, scaling_factor=1.5305, shift_factor=0.0609),
        text_encoder=clip_text(CLIP_L, tokenizer, True), tokenizer=tokenizer,
        text_encoder_2=clip_text(CLIP_G, tokenizer, True, layers=SD3_CLIP_G_LAYERS), tokenizer_2=clip_tokenizer(),
        text_encoder_3=t5_encoder(T5_LAYERS), tokenizer_3=t5_tokenizer(),
    )


def build_flux() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    tokenizer = clip_tokenizer()
    config = {**FLUX_TRANSFORMER, "num_layers": FLUX_DOUBLE, "num_single_layers": FLUX_SINGLE}
    return FluxPipeline(
        transformer=FluxTransformer2DModel(**config),
        scheduler=on_host(lambda: FlowMatchEulerDiscreteScheduler(
            num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False, base_image_seq_len=256,
            max_image_seq_len=4096, base_shift=0.5, max_shift=1.15)),
        vae=vae(FLOW_VAE, sample_size=1024, scaling_factor=0.3611, shift_factor=0.1159),
        text_encoder=clip_text(CLIP_L, tokenizer, False), tokenizer=tokenizer,
        text_encoder_2=t5_encoder(T5_LAYERS), tokenizer_2=t5_tokenizer(),
    )


@dataclass(frozen=True)
class Architecture:
    name: str
    label: str
    build: Callable[[], Any]
    dtype: str  # what it is built in by default
    scaled: str  # what differs from the published model ("" when nothing)


ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("sd15", "SD 1.5", build_sd15, "float32", ""),
    Architecture("sdxl", "SDXL base 1.0", build_sdxl, "bfloat16", ""),
    Architecture("sd3", "SD3-medium (scaled)", build_sd3, "float32",
                 f"MMDiT 24 → {SD3_BLOCKS} joint blocks, CLIP-G 32 → {SD3_CLIP_G_LAYERS} layers, "
                 f"T5-XXL 24 → {T5_LAYERS} layers; widths real"),
    Architecture("flux", "Flux.1-schnell (scaled)", build_flux, "float32",
                 f"transformer 19 → {FLUX_DOUBLE} double-stream and 38 → {FLUX_SINGLE} single-stream blocks, "
                 f"T5-XXL 24 → {T5_LAYERS} layers; widths real"),
)}


def parameter_count(pipe: Any) -> dict[str, int]:
    return {name: sum(p.numel() for p in module.parameters()) for name, module in pipe.components.items()
            if isinstance(module, torch.nn.Module)}


def build_folder(name: str, folder: Path, dtype: str | None = None, seed: int = 0,
                 device: str = "cpu") -> dict[str, Any]:
    """Build architecture `name` with random weights (seeded) and save it as a diffusers folder; what was built.
    `device`: where the weights are initialised (cuda: seconds instead of minutes for SDXL; saved the same)."""
    arch = ARCHITECTURES[name]
    wanted = getattr(torch, dtype or arch.dtype)
    started = time.perf_counter()
    torch.manual_seed(seed)
    with torch.device(device), default_dtype(wanted), torch.no_grad():
        pipe = arch.build()
    pipe.to(dtype=wanted)  # buffers created in float32 whatever the default
    counts = parameter_count(pipe)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    del pipe
    size = sum(f.stat().st_size for f in folder.rglob("*.safetensors"))
    info = {"architecture": name, "label": arch.label, "dtype": str(wanted).removeprefix("torch."),
            "scaled": arch.scaled or "nothing", "parameters": counts, "total_parameters": sum(counts.values()),
            "bytes": size, "build_s": round(time.perf_counter() - started, 1), "folder": str(folder)}
    (folder / "architecture.json").write_text(json.dumps(info, indent=1))
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("architecture", choices=sorted(ARCHITECTURES))
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--device", default="cpu", help="where the weights are initialised (cpu or cuda)")
    parser.add_argument("--keep", type=Path, help="build the folder here and keep it (default: a temporary folder, "
                                                  "removed after the build: a dry run)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    folder = args.keep or Path(tempfile.mkdtemp(prefix=f"gv-{args.architecture}-"))
    try:
        print(json.dumps(build_folder(args.architecture, folder, args.dtype, device=args.device), indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
