#!/usr/bin/env python
"""Train the embedded demo pipeline on procedurally drawn, captioned shapes. On 2 CPU cores the VAE and 4,000 U-Net
steps take about 40 minutes; the shipped weights took four stages (below), about two hours in all.

Stages, each resumable from checkpoints in --work (re-run the same command after an interruption):
  vae      AutoencoderKL on 32×32 crops, then briefly at full size (GroupNorm statistics differ on crops)
  latents  encode the training set once; the latent scaling factor is 1 / std of the latents
  unet     UNet2DConditionModel on a frozen, randomly initialised CLIP text encoder (or both jointly, --text-encoder
           joint), v-prediction, 10 % empty captions for CFG, EMA
  export   StableDiffusionPipeline.save_pretrained (safetensors) + the fitted latent→RGB preview map

Usage: python scripts/train_demo.py [--out resources/demo-pipeline] [--work scratch/demo-train] [--stage all]

Why the text encoder is frozen: trained jointly, it learned to squash the position words (top/bottom/left/right/
center) into nearly one vector — measured on a model trained that way: its outputs for "…, top left" and
"…, bottom right" differed by 0.3 in norm where two colour words differ by 8–13, and the U-Net's prediction moved
by 0.0002 between them — so position words were ignored (position accuracy at chance). A frozen random encoder
keeps every word distinct; with it the U-Net's sensitivity to position words grew 100× faster in a probe.

How the shipped weights were made (each stage's output is the next one's --init-from; about two hours in all):
  train_demo.py --text-encoder joint --an-share 0                       VAE, then U-Net + encoder, 4,000 steps
  train_demo.py --init-from A --text-encoder joint --an-share 0 --seed 1 --images 40000 --lr 4e-4
                --unet-steps 7000 --keep-position 0.85     (stopped at 3,500: shapes 31.7 % → 80 %, position 18 %)
  train_demo.py --init-from B --fresh-text-encoder --an-share 0 --seed 1 --images 40000 --lr 6e-4
                --unet-steps 6000 --keep-position 0.85                   (position 100 %)
  train_demo.py --init-from C --seed 1 --images 40000 --lr 2e-4 --unet-steps 2000 --keep-position 0.85
                --an-share 0.5                                           ("an orange" understood)

Training further: ``--init-from resources/demo-pipeline`` starts the UNet and text encoder from a saved pipeline
and keeps its VAE and latent scaling (so its latents mean the same), e.g. with ``--lr 4e-4 --unet-steps 6000``.
``--stage export`` while the UNet stage is still running exports the EMA weights of its newest checkpoint, so a
model can be evaluated (scripts/eval_demo.py) without stopping the training.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL, DDIMScheduler, DDPMScheduler, StableDiffusionPipeline, UNet2DConditionModel
from safetensors.torch import load_file, save_file
from tqdm import tqdm
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

from ghostviewer.demo import shapes
from ghostviewer.engine.loading.demo_model import architecture
from ghostviewer.engine.loading.demo_model.tokenizer_files import write_tokenizer_files


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("resources/demo-pipeline"))
    p.add_argument("--work", type=Path, default=Path("scratch/demo-train"))
    p.add_argument("--stage", choices=["all", "vae", "latents", "unet", "export"], default="all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--images", type=int, default=24000, help="training scenes")
    p.add_argument("--vae-crop-steps", type=int, default=900)
    p.add_argument("--vae-full-steps", type=int, default=250)
    p.add_argument("--unet-steps", type=int, default=4000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--init-from", type=Path, help="a saved demo pipeline to continue from (keeps its VAE)")
    p.add_argument("--keep-position", type=float, default=0.75, help="share of captions that name the position")
    p.add_argument("--text-encoder", choices=["frozen", "joint"], default="frozen",
                   help="frozen: never trained (a seeded random one, or --init-from's); joint: trained with the U-Net")
    p.add_argument("--an-share", type=float, default=0.5,
                   help='share of captions that write "an orange" where the canonical caption says "a orange"')
    p.add_argument("--fresh-text-encoder", action="store_true",
                   help="with --init-from: start from a seeded random text encoder instead of the saved one")
    return p.parse_args()


def step_generator(seed: int, step: int) -> torch.Generator:
    """Batches are a function of (seed, step), so a resumed run sees the same data as an uninterrupted one."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def save_checkpoint(path: Path, **state: object) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> dict | None:
    return torch.load(path, weights_only=True) if path.exists() else None


def lr_at(step: int, total: int, base: float, warmup: int = 100) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def to_tensor(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def dataset(args: argparse.Namespace) -> tuple[np.ndarray, list[shapes.Scene]]:
    t0 = time.time()
    images, scenes = shapes.make_dataset(args.images, args.seed, shapes.held_out_combos())
    print(f"drew {len(scenes)} scenes in {time.time() - t0:.0f} s ({len(shapes.held_out_combos())} combos held out)")
    return images, scenes


def train_vae(args: argparse.Namespace, images: np.ndarray) -> None:
    final = args.work / "vae.safetensors"
    if final.exists():
        return
    if args.init_from is not None:
        save_file(AutoencoderKL.from_pretrained(args.init_from / "vae").state_dict(), final)
        return
    torch.manual_seed(args.seed)
    vae = AutoencoderKL(**architecture.vae_config())
    opt = torch.optim.AdamW(vae.parameters(), lr=args.lr, weight_decay=0.0)
    ckpt_path = args.work / "vae.ckpt"
    start = 0
    if (ckpt := load_checkpoint(ckpt_path)) is not None:
        vae.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        start = int(ckpt["step"])
    total = args.vae_crop_steps + args.vae_full_steps
    bar = tqdm(range(start, total), initial=start, total=total, desc="vae", unit="step")
    for step in bar:
        gen = step_generator(args.seed, step)
        crop = step < args.vae_crop_steps
        batch = args.batch if crop else args.batch // 2
        index = torch.randint(0, len(images), (batch,), generator=gen).numpy()
        x = to_tensor(images[index])
        if crop:
            ox, oy = (int(v) for v in torch.randint(0, 33, (2,), generator=gen))
            x = x[:, :, oy : oy + 32, ox : ox + 32]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, args.lr)
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample(generator=gen)).sample
        mse = F.mse_loss(recon, x)
        loss = mse + 0.2 * F.l1_loss(recon, x) + 1e-6 * posterior.kl().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        psnr = 10 * math.log10(4.0 / max(mse.item(), 1e-10))
        bar.set_postfix(psnr=f"{psnr:.1f}dB", crop=crop)
        if (step + 1) % 100 == 0:
            save_checkpoint(ckpt_path, model=vae.state_dict(), opt=opt.state_dict(), step=step + 1)
    save_file(vae.state_dict(), final)


@torch.no_grad()
def encode_latents(args: argparse.Namespace, images: np.ndarray, scenes: list[shapes.Scene]) -> None:
    final = args.work / "latents.safetensors"
    if final.exists():
        return
    vae = AutoencoderKL(**architecture.vae_config())
    vae.load_state_dict(load_file(args.work / "vae.safetensors"))
    vae.eval()
    chunks = []
    for i in tqdm(range(0, len(images), 256), desc="encode", unit="chunk"):
        chunks.append(vae.encode(to_tensor(images[i : i + 256])).latent_dist.mean)
    latents = torch.cat(chunks)
    scale = 1.0 / latents.std().item()
    if args.init_from is not None:  # the UNet being continued was trained on latents at this scale
        scale = float(AutoencoderKL.load_config(args.init_from / "vae")["scaling_factor"])
    psnr = _vae_psnr(vae, images[:256])
    print(f"latents {tuple(latents.shape)}, std {1 / scale:.3f} → scaling factor {scale:.4f}, VAE PSNR {psnr:.1f} dB")
    save_file({"latents": latents.contiguous(), "scale": torch.tensor([scale])}, final)


def _vae_psnr(vae: AutoencoderKL, images: np.ndarray) -> float:
    x = to_tensor(images)
    recon = vae.decode(vae.encode(x).latent_dist.mean).sample.clamp(-1, 1)
    return 10 * math.log10(4.0 / F.mse_loss(recon, x).item())


def make_tokenizer(args: argparse.Namespace) -> CLIPTokenizer:
    folder = args.work / "tokenizer"
    write_tokenizer_files(folder, shapes.vocabulary())
    return CLIPTokenizer.from_pretrained(folder)


def text_encoder_for(tokenizer: CLIPTokenizer) -> CLIPTextModel:
    config = architecture.text_encoder_config(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)
    return CLIPTextModel(CLIPTextConfig(**config))


def train_unet(args: argparse.Namespace, scenes: list[shapes.Scene]) -> None:
    final = args.work / "unet_ema.safetensors"
    if final.exists():
        return
    tokenizer = make_tokenizer(args)
    data = load_file(args.work / "latents.safetensors")
    latents = data["latents"] * data["scale"].item()
    torch.manual_seed(args.seed + 1)
    unet = UNet2DConditionModel(**architecture.unet_config())
    text_encoder = text_encoder_for(tokenizer)
    frozen = args.text_encoder == "frozen"
    ema_unet = UNet2DConditionModel(**architecture.unet_config())
    ema_text = text_encoder_for(tokenizer)
    if args.init_from is not None:
        unet.load_state_dict(load_file(args.init_from / "unet" / "diffusion_pytorch_model.safetensors"))
        if not args.fresh_text_encoder:  # else the seeded random one: the U-Net learns to read it
            text_encoder.load_state_dict(load_file(args.init_from / "text_encoder" / "model.safetensors"))
    ema_unet.load_state_dict(unet.state_dict())
    ema_text.load_state_dict(text_encoder.state_dict())
    text_encoder.requires_grad_(not frozen)
    params = list(unet.parameters()) + ([] if frozen else list(text_encoder.parameters()))
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-4)
    noise_schedule = DDPMScheduler.from_config(architecture.scheduler_config())
    ckpt_path = args.work / "unet.ckpt"
    start = 0
    if (ckpt := load_checkpoint(ckpt_path)) is not None:
        unet.load_state_dict(ckpt["unet"])
        text_encoder.load_state_dict(ckpt["text"])
        ema_unet.load_state_dict(ckpt["ema_unet"])
        ema_text.load_state_dict(ckpt["ema_text"])
        opt.load_state_dict(ckpt["opt"])
        start = int(ckpt["step"])
    pairs = list(zip(unet.parameters(), ema_unet.parameters()))
    if not frozen:
        pairs += list(zip(text_encoder.parameters(), ema_text.parameters()))
    total = args.unet_steps
    # A continued model's EMA starts at full decay, unless its text encoder is new (the old U-Net cannot read it)
    start_of_ema = -1000 if args.init_from is not None and not args.fresh_text_encoder else 0
    bar = tqdm(range(start, total), initial=start, total=total, desc="unet+text", unit="step")
    smooth = None
    for step in bar:
        gen = step_generator(args.seed + 7, step)
        index = torch.randint(0, len(latents), (args.batch,), generator=gen)
        captions = []
        caption_rng = random.Random(args.seed * 31 + step)
        for i in index.tolist():
            empty = caption_rng.random() < 0.1
            text = "" if empty else shapes.caption_for(scenes[i], caption_rng, args.keep_position)
            if caption_rng.random() < args.an_share:  # people write "an orange"; "an" is not a vocabulary word
                text = text.replace("a orange", "an orange")
            captions.append(text)
        ids = tokenizer(
            captions, padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="pt"
        ).input_ids
        x0 = latents[index]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, noise_schedule.config.num_train_timesteps, (args.batch,), generator=gen)
        noisy = noise_schedule.add_noise(x0, noise, t)
        target = noise_schedule.get_velocity(x0, noise, t)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, args.lr, warmup=200)
        with torch.set_grad_enabled(not frozen):
            encoded = text_encoder(ids)[0]
        prediction = unet(noisy, t, encoded).sample
        loss = F.mse_loss(prediction, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        decay = min(0.999, (1 + step - start_of_ema) / (10 + step - start_of_ema))
        with torch.no_grad():
            for p, e in pairs:
                e.lerp_(p, 1 - decay)
        smooth = loss.item() if smooth is None else 0.98 * smooth + 0.02 * loss.item()
        bar.set_postfix(loss=f"{smooth:.4f}")
        if (step + 1) % 250 == 0:
            save_checkpoint(
                ckpt_path,
                unet=unet.state_dict(),
                text=text_encoder.state_dict(),
                ema_unet=ema_unet.state_dict(),
                ema_text=ema_text.state_dict(),
                opt=opt.state_dict(),
                step=step + 1,
            )
    save_file(ema_text.state_dict(), args.work / "text_ema.safetensors")
    save_file(ema_unet.state_dict(), final)


@torch.no_grad()
def fit_latent_preview(vae: AutoencoderKL, images: np.ndarray, scale: float) -> dict[str, list]:
    """Least-squares linear map from a (scaled) latent pixel to the RGB of the 4×4 image patch it covers."""
    x = to_tensor(images)
    z = vae.encode(x).latent_dist.mean * scale
    rgb = F.avg_pool2d(x, 4)
    zf = torch.cat([z.permute(0, 2, 3, 1).reshape(-1, 4), torch.ones(z.numel() // 4, 1)], 1)
    solution = torch.linalg.lstsq(zf, rgb.permute(0, 2, 3, 1).reshape(-1, 3)).solution  # (5, 3)
    return {"weights": solution[:4].T.tolist(), "bias": solution[4].tolist(), "value_range": [-1.0, 1.0]}


def export(args: argparse.Namespace, images: np.ndarray) -> None:
    tokenizer = make_tokenizer(args)
    scale = load_file(args.work / "latents.safetensors")["scale"].item()
    vae = AutoencoderKL(**architecture.vae_config(), scaling_factor=scale)
    vae.load_state_dict(load_file(args.work / "vae.safetensors"))
    text_encoder = text_encoder_for(tokenizer)
    unet = UNet2DConditionModel(**architecture.unet_config())
    if (args.work / "unet_ema.safetensors").exists():
        text_encoder.load_state_dict(load_file(args.work / "text_ema.safetensors"))
        unet.load_state_dict(load_file(args.work / "unet_ema.safetensors"))
    else:  # the UNet stage is still running: its newest checkpoint's EMA weights
        ckpt = load_checkpoint(args.work / "unet.ckpt")
        if ckpt is None:
            raise SystemExit(f"nothing to export: no UNet weights or checkpoint in {args.work}")
        text_encoder.load_state_dict(ckpt["ema_text"])
        unet.load_state_dict(ckpt["ema_unet"])
        print(f"exporting the EMA weights of the checkpoint at step {ckpt['step']}")
    pipe = StableDiffusionPipeline(
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=tokenizer,
        unet=unet.eval(),
        scheduler=DDIMScheduler(**architecture.scheduler_config()),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(args.out, safe_serialization=True)
    preview = fit_latent_preview(vae, images[:512], scale)
    (args.out / "latent_preview.json").write_text(json.dumps(preview, indent=2) + "\n", encoding="utf-8")
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"saved {args.out} ({size / 1e6:.1f} MB)")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    images, scenes = dataset(args)
    if args.stage in ("all", "vae"):
        train_vae(args, images)
    if args.stage in ("all", "latents"):
        encode_latents(args, images, scenes)
    if args.stage in ("all", "unet"):
        train_unet(args, scenes)
    if args.stage in ("all", "export"):
        export(args, images)


if __name__ == "__main__":
    main()
