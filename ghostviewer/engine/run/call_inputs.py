"""The inputs of GhostViewer's own img2img and inpaint calls: the init image and mask read from their files and
checked before anything runs (one line each), the keywords of the call for its kind, the PNG copies kept with the
run, and the pipeline class for the kind, made the diffusers way (`AutoPipelineFor….from_pipe`: the same
components, no weights reloaded)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.spec import RunSpec
from ghostviewer.spec.checks import SettingsError, check_size

INPUT_IMAGES = {"init_image": "input_init_image", "mask": "input_mask"}  # spec field -> the record's image name


@dataclass(frozen=True)
class CallInputs:
    """The images a call of one kind takes (none for text-to-image), as read from their files."""

    init_image: Image.Image | None = None
    mask: Image.Image | None = None
    init_path: str | None = None
    mask_path: str | None = None

    def __bool__(self) -> bool:
        return self.init_image is not None

    def size(self, width: int | None, height: int | None) -> tuple[int, int]:
        """The run's (width, height): the init image's; a size asked for that differs from it is refused (diffusers'
        img2img has no width/height and would quietly make the image's size)."""
        assert self.init_image is not None
        w, h = self.init_image.size
        if (width is not None and width != w) or (height is not None and height != h):
            raise GhostError(f"the init image {self.init_path} is {w}×{h} but the run asks for "
                             f"{width or w}×{height or h}: resize the image, or leave --width/--height out")
        try:
            check_size("the init image's width", w)
            check_size("the init image's height", h)
        except SettingsError as exc:
            raise GhostError(f"{exc} ({self.init_path} is {w}×{h})") from None
        return w, h

    def paths(self) -> dict[str, str | None]:
        """The files as absolute paths, so the record (and a replay from elsewhere) names them unambiguously."""
        return {"init_image": self.init_path, "mask": self.mask_path}

    def call_kwargs(self, settings: RunSpec) -> dict[str, Any]:
        if settings.kind == "img2img":  # its size is the image's
            return {"image": self.init_image, "strength": settings.strength}
        size = {"width": settings.width, "height": settings.height}
        if settings.kind == "inpaint":
            return {"image": self.init_image, "mask_image": self.mask, "strength": settings.strength, **size}
        return size

    def save(self, writer: Any) -> None:
        """The input images as the call got them, PNG beside the run's own (images/input_init_image.png, …)."""
        for name, image in (("init_image", self.init_image), ("mask", self.mask)):
            if image is not None:
                writer.save_image(INPUT_IMAGES[name], np.asarray(image))


def _read(path: str, flag: str, mode: str) -> Image.Image:
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert(mode)
    except FileNotFoundError:
        raise GhostError(f"{flag} {path}: no such file") from None
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise GhostError(f"{flag} {path}: cannot read it as an image ({reason})") from None


def read_inputs(settings: RunSpec) -> CallInputs | None:
    """The spec's input images, read and checked (readable, the mask the init image's size); None: text-to-image.
    Also refuses a CUDA generator where there is no CUDA device."""
    if settings.generator_device == "cuda" and not torch.cuda.is_available():
        raise GhostError("--generator-device cuda needs a CUDA device, and torch sees none on this machine")
    if settings.init_image is None:
        return None
    init = _read(settings.init_image, "--init-image", "RGB")
    mask = _read(settings.mask, "--mask", "L") if settings.mask is not None else None
    if mask is not None and mask.size != init.size:
        raise GhostError(f"the mask {settings.mask} is {mask.width}×{mask.height} but the init image is "
                         f"{init.width}×{init.height}: they must be the same size")
    return CallInputs(init, mask, str(Path(settings.init_image).resolve()),
                      str(Path(settings.mask).resolve()) if settings.mask is not None else None)


def pipeline_for(loaded: LoadedPipeline, kind: str) -> LoadedPipeline:
    """`loaded` with its pipeline in diffusers' class for the kind, sharing every component (text2img: itself)."""
    if kind == "text2img":
        return loaded
    from diffusers import AutoPipelineForImage2Image, AutoPipelineForInpainting

    auto = AutoPipelineForImage2Image if kind == "img2img" else AutoPipelineForInpainting
    try:
        pipe = auto.from_pipe(loaded.pipe)
    except (ValueError, KeyError, TypeError) as exc:
        reason = " ".join(str(exc).split())
        raise GhostError(f"this pipeline ({type(loaded.pipe).__name__}) has no {kind} form in diffusers: "
                         f"{reason}") from None
    pipe.set_progress_bar_config(disable=True)
    return replace(loaded, pipe=pipe)
