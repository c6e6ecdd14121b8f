"""A tiny ControlNet built offline from a pipeline's own U-Net (diffusers' ControlNetModel.from_unet), for the
ControlNet tests: watched calls, GhostViewer's own ControlNet runs, the "no effect" finding.

`from_unet` copies the U-Net's encoder and starts the ControlNet's output ("zero") convolutions at zero, as
training does: such a ControlNet changes nothing. `effect` gives them small random weights instead, as a trained one
has, so the control image changes the image; 0 keeps them zero (an untrained ControlNet).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import AutoPipelineForText2Image, ControlNetModel
from PIL import Image

EFFECT = 0.05  # std of the zero convolutions' weights: the control moves the demo's image a few levels


def zero_convolutions(controlnet: ControlNetModel) -> list[tuple[str, torch.nn.Conv2d]]:
    """The convolutions that hand the control to the U-Net: the conditioning embedding's last, each down residual's
    and the mid block's."""
    return [(name, module) for name, module in controlnet.named_modules() if isinstance(module, torch.nn.Conv2d)
            and (name.startswith(("controlnet_down_blocks.", "controlnet_mid_block"))
                 or name == "controlnet_cond_embedding.conv_out")]


def build_controlnet(pipe: Any, seed: int = 0, effect: float = EFFECT) -> ControlNetModel:
    """A ControlNet for `pipe`'s U-Net; its conditioning embedding shrinks the control image as the VAE does."""
    torch.manual_seed(seed)
    halvings = int(np.log2(pipe.vae_scale_factor))
    widths = tuple(8 * 2**i for i in range(halvings + 1))  # len - 1 stride-2 convolutions
    controlnet = ControlNetModel.from_unet(pipe.unet, conditioning_embedding_out_channels=widths)
    with torch.no_grad():
        for _name, conv in zero_convolutions(controlnet):
            torch.nn.init.normal_(conv.weight, std=effect) if effect else torch.nn.init.zeros_(conv.weight)
            torch.nn.init.zeros_(conv.bias)
    return controlnet.to(pipe.unet.device).eval()


def controlnet_pipeline(pipe: Any, controlnet: ControlNetModel) -> Any:
    """`pipe`'s components with the ControlNet, in diffusers' ControlNet pipeline class (no weights copied)."""
    made = AutoPipelineForText2Image.from_pipe(pipe, controlnet=controlnet)
    made.set_progress_bar_config(disable=True)
    return made


def control_image(size: int = 64) -> Image.Image:
    """A scribble: a white square on black, off the image's centre."""
    pixels = np.zeros((size, size, 3), np.uint8)
    pixels[size // 8 : size // 2, size // 2 : size - size // 8] = 255
    return Image.fromarray(pixels)


def save_controlnet(controlnet: ControlNetModel, folder: Path) -> Path:
    controlnet.save_pretrained(folder, safe_serialization=True)
    return folder


def call_input_files(pipe: Any, root: Path) -> dict[str, Path]:
    """A tiny ControlNet's folder and the images of every ControlNet kind on the demo (64 px): control, an init
    image (a green square on yellow) and an inpaint mask (the right half)."""
    paths = {"controlnet": save_controlnet(build_controlnet(pipe), root / "controlnet"),
             "control": root / "control.png", "init": root / "init.png", "mask": root / "mask.png"}
    control_image().save(paths["control"])
    init = np.full((64, 64, 3), (230, 220, 40), np.uint8)
    init[12:36, 12:36] = (20, 160, 40)
    Image.fromarray(init).save(paths["init"])
    mask = np.zeros((64, 64), np.uint8)
    mask[:, 32:] = 255
    Image.fromarray(mask).save(paths["mask"])
    return paths
