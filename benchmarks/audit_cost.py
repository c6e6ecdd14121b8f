"""What the weight audit costs (`ghostviewer audit`): seconds per GB of weights, on the demo and on a real-size
SD 1.5 U-Net (the architecture built from its config, random weights, saved as safetensors in a temporary folder).

    .venv/bin/python benchmarks/audit_cost.py [--dtype float16|float32] [--repeat 3] [--keep DIR]

Prints, for each: bytes audited, seconds (best of --repeat, page cache warm), seconds with the file's pages
dropped from the cache first (posix_fadvise DONTNEED: a cold read from disk, where the OS honours it), and the
same against a reference (a copy with one block changed). Goal: <= 2 s per GB on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from diffusers import UNet2DConditionModel
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.architectures import SD15_UNET  # noqa: E402 - the published config, with the other architectures
from ghostviewer.engine.judge_model.audit import audit_weights  # noqa: E402


def build_sd15_unet_folder(folder: Path, dtype: torch.dtype) -> Path:
    """A pipeline folder holding an SD 1.5 U-Net: the shapes from the real config (on the meta device, no
    compute), every tensor filled with random values of a trained model's scale."""
    with torch.device("meta"):
        unet = UNet2DConditionModel(**SD15_UNET)
    generator = torch.Generator().manual_seed(0)
    tensors = {name: (torch.randn(p.shape, generator=generator) * 0.02).to(dtype)
               for name, p in unet.state_dict().items()}
    (folder / "unet").mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "unet" / "diffusion_pytorch_model.safetensors"))
    (folder / "unet" / "config.json").write_text(json.dumps({"_class_name": "UNet2DConditionModel", **SD15_UNET}))
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline",
                                                         "unet": ["diffusers", "UNet2DConditionModel"]}))
    return folder


def drop_cache(folder: Path) -> None:
    for path in folder.rglob("*.safetensors"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def measure(source: str, reference: str | None, repeat: int, cold_folders: list[Path]) -> dict[str, float]:
    warm = []
    result = audit_weights(source, reference)  # warms the page cache
    for _ in range(repeat):
        started = time.perf_counter()
        result = audit_weights(source, reference)
        warm.append(time.perf_counter() - started)
    cold = None
    if cold_folders:
        for folder in cold_folders:
            drop_cache(folder)
        started = time.perf_counter()
        audit_weights(source, reference)
        cold = time.perf_counter() - started
    gb = result["bytes"] * (2 if reference else 1) / 1e9
    return {"gb_read": round(gb, 3), "warm_s": round(min(warm), 3), "warm_s_per_gb": round(min(warm) / gb, 3),
            "cold_s": None if cold is None else round(cold, 3),
            "cold_s_per_gb": None if cold is None else round(cold / gb, 3),
            "ok": result["ok"], "differs": result["differs"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", help="build the U-Net folder here and keep it")
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"threads: {torch.get_num_threads()} (the audit uses 1), load average: {os.getloadavg()[0]:.2f}")
    print("demo:", json.dumps(measure("demo", None, args.repeat, [])))
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="audit-cost-"))
    try:
        started = time.perf_counter()
        suspect = build_sd15_unet_folder(root / "sd15", getattr(torch, args.dtype))
        print(f"built the SD 1.5 U-Net ({args.dtype}) in {time.perf_counter() - started:.1f} s")
        print(f"sd15 unet {args.dtype}:", json.dumps(measure(str(suspect), None, args.repeat, [suspect])))
        reference = root / "sd15-reference"
        shutil.copytree(suspect, reference, dirs_exist_ok=True)
        print(f"sd15 unet {args.dtype} against a reference:",
              json.dumps(measure(str(suspect), str(reference), 1, [suspect, reference])))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
