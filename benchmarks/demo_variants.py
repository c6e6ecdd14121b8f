#!/usr/bin/env python
"""Copies of the demo pipeline for judging baselines across models: a differently-trained healthy copy, and
copies with one silent fault edited into their weights (no hooks).

`healthy_variant(folder)`: the demo's U-Net and text encoder fine-tuned for `steps` more steps (scripts/train_demo.py's
objective: v-prediction on the cosine schedule, 10 % empty captions) on scenes drawn with another seed, at a smaller
learning rate, without EMA — the kind of model a user has after their own fine-tune: every weight differs, it still
draws the same things. Cached in the folder (`variant.json` records how it was made).

`edited_copy(folder, edit)`: a copy of the demo with one weight edit of EDITS applied to its safetensors.

Usage: python benchmarks/demo_variants.py OUT_DIR [--steps 400] [--evaluate]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from ghostviewer.demo import shapes
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR

UNET_FILE = "unet/diffusion_pytorch_model.safetensors"
VAE_FILE = "vae/diffusion_pytorch_model.safetensors"
TEXT_FILE = "text_encoder/model.safetensors"


def _copy_demo(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(DEMO_PIPELINE_DIR, folder)
    return folder


def healthy_variant(folder: str | Path, steps: int = 400, seed: int = 11, lr: float = 1e-4, batch: int = 16,
                    scenes: int = 2048) -> Path:
    """The demo fine-tuned `steps` steps more (see the module docstring); reused when already made alike."""
    from diffusers import DDPMScheduler, StableDiffusionPipeline

    folder = Path(folder)
    recipe = {"steps": steps, "seed": seed, "lr": lr, "batch": batch, "scenes": scenes}
    marker = folder / "variant.json"
    if marker.exists() and json.loads(marker.read_text()).get("recipe") == recipe:
        return folder
    started = time.perf_counter()
    pipe = StableDiffusionPipeline.from_pretrained(DEMO_PIPELINE_DIR, safety_checker=None)
    images, drawn = shapes.make_dataset(scenes, seed, shapes.held_out_combos())
    with torch.no_grad():
        pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        latents = torch.cat([pipe.vae.encode(pixels[i:i + 256]).latent_dist.mean for i in range(0, len(pixels), 256)])
        latents = latents * pipe.vae.config.scaling_factor
    unet, text_encoder, tokenizer = pipe.unet, pipe.text_encoder, pipe.tokenizer
    unet.train()
    text_encoder.train()
    params = [*unet.parameters(), *text_encoder.parameters()]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-4)
    schedule = DDPMScheduler.from_config(pipe.scheduler.config)
    losses = []
    for step in range(steps):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
        rng = random.Random(seed * 31 + step)
        index = torch.randint(0, len(latents), (batch,), generator=gen)
        captions = ["" if rng.random() < 0.1 else shapes.caption_for(drawn[i], rng) for i in index.tolist()]
        ids = tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                        return_tensors="pt").input_ids
        x0 = latents[index]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, schedule.config.num_train_timesteps, (batch,), generator=gen)
        prediction = unet(schedule.add_noise(x0, noise, t), t, text_encoder(ids)[0]).sample
        loss = F.mse_loss(prediction, schedule.get_velocity(x0, noise, t))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
    _copy_demo(folder)
    save_file({k: v.contiguous() for k, v in unet.state_dict().items()}, folder / UNET_FILE)
    save_file({k: v.contiguous() for k, v in text_encoder.state_dict().items()}, folder / TEXT_FILE)
    marker.write_text(json.dumps({"recipe": recipe, "loss_first_50": sum(losses[:50]) / 50,
                                  "loss_last_50": sum(losses[-50:]) / 50,
                                  "seconds": round(time.perf_counter() - started, 1)}, indent=1))
    return folder


def _edit(path: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(path)
    change(tensors)
    save_file({k: v.contiguous() for k, v in tensors.items()}, path)


def _vae_bias(t: dict[str, torch.Tensor]) -> None:
    bias = t["decoder.conv_out.bias"]
    bias[0] += 0.4  # red up, blue down: ±51 levels (±0.25, 32 levels, is within a healthy model's own colour errors)
    bias[2] -= 0.4


def _zero_cross_attention(t: dict[str, torch.Tensor]) -> None:
    for name in [k for k in t if k.startswith("up_blocks.1.attentions.0.") and ".attn2.to_out.0." in k]:
        t[name].zero_()


def _scaled_resnet(t: dict[str, torch.Tensor]) -> None:
    t["mid_block.resnets.0.conv2.weight"] *= 10.0  # ×3 moves the block's output stats by < 0.1 scale units
    t["mid_block.resnets.0.conv2.bias"] *= 10.0


def _swapped_text_layer(t: dict[str, torch.Tensor]) -> None:
    """A conversion bug: the q and k projections of one text-encoder layer swapped."""
    for kind in ("weight", "bias"):
        q, k = f"encoder.layers.0.self_attn.q_proj.{kind}", f"encoder.layers.0.self_attn.k_proj.{kind}"
        t[q], t[k] = t[k].clone(), t[q].clone()


def _norm_gain(t: dict[str, torch.Tensor]) -> None:
    """A GroupNorm gain cut to a fifth in one down block's resnet (a bad merge; halved: excess 3.5 < margin 6)."""
    t["down_blocks.1.resnets.0.norm2.weight"] *= 0.2


def _vae_decoder_channels(t: dict[str, torch.Tensor]) -> None:
    """Two output channels of a decoder resnet's last conv swapped (a mis-ordered conversion)."""
    for kind in ("weight", "bias"):
        w = t[f"decoder.up_blocks.0.resnets.0.conv2.{kind}"]
        w[[0, 1]] = w[[1, 0]].clone()


# name -> (file, edit, the traced module where it sits, what it stands for)
EDITS: dict[str, tuple[str, Callable[[dict[str, torch.Tensor]], None], str, str]] = {
    "vae-output-bias": (VAE_FILE, _vae_bias, "vae.decoder.conv_out", "a VAE decoder output bias shifted"),
    "zero-cross-attention": (UNET_FILE, _zero_cross_attention, "unet.up_blocks.1.attentions.0",
                             "cross-attention output projections zeroed in one block"),
    "scaled-resnet": (UNET_FILE, _scaled_resnet, "unet.mid_block.resnets.0", "a U-Net resnet's last conv ×10"),
    "swapped-qk-text": (TEXT_FILE, _swapped_text_layer, "text_encoder.encoder.layers.0",
                        "q and k projections of a text-encoder layer swapped"),
    "norm-gain-cut": (UNET_FILE, _norm_gain, "unet.down_blocks.1.resnets.0", "a resnet's GroupNorm gain ×0.2"),
    "vae-swapped-channels": (VAE_FILE, _vae_decoder_channels, "vae.decoder.up_blocks.0.resnets.0",
                             "two output channels of a decoder resnet swapped"),
}


def edited_copy(folder: str | Path, edit: str) -> Path:
    """A copy of the demo pipeline with one of EDITS applied to its weight files."""
    file, change, _, _ = EDITS[edit]
    folder = _copy_demo(Path(folder))
    _edit(folder / file, change)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--evaluate", action="store_true", help="also score how well it draws (evaluate.py)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    folder = healthy_variant(args.out, steps=args.steps)
    print((folder / "variant.json").read_text())
    if args.evaluate:
        from diffusers import StableDiffusionPipeline

        from ghostviewer.engine.loading.demo_model.evaluate import evaluate_demo

        combos = shapes.held_out_combos()[:12]
        for name, source in (("demo", DEMO_PIPELINE_DIR), ("variant", folder)):
            pipe = StableDiffusionPipeline.from_pretrained(source, safety_checker=None)
            pipe.set_progress_bar_config(disable=True)
            report = evaluate_demo(pipe, combos, seeds=(0, 1))
            print(name, {k: v for k, v in report.items() if not isinstance(v, list)})


if __name__ == "__main__":
    main()
