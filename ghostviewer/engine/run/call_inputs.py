"""The inputs of GhostViewer's own img2img, inpaint and ControlNet calls: the init image, mask and control image read
from their files and checked before anything runs (one line each), the keywords of the call for its kind, the PNG
copies kept with the run (a re-run reads those: `recorded_inputs`), and the pipeline class for the kind, made the
diffusers way (`AutoPipelineFor….from_pipe`: the same components, no weights reloaded; a ControlNet joins them —
an img2img or inpaint run with a control image is diffusers' ControlNet img2img or inpaint pipeline)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.controlnets import COMPONENT, load_controlnet, own_controlnet
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.spec import RunSpec
from ghostviewer.spec.checks import SettingsError, check_size

# spec field -> the record's image name (images/<name>.png)
INPUT_IMAGES = {"init_image": "input_init_image", "mask": "input_mask", "control_image": "input_control_image"}


@dataclass(frozen=True)
class CallInputs:
    """The images a call of one kind takes (none for text-to-image), as read from their files."""

    init_image: Image.Image | None = None
    mask: Image.Image | None = None
    init_path: str | None = None
    mask_path: str | None = None
    control_image: Image.Image | None = None
    control_path: str | None = None

    def __bool__(self) -> bool:
        return self.init_image is not None or self.control_image is not None

    def size(self, width: int | None, height: int | None) -> tuple[int, int]:
        """The run's (width, height): the init image's; a size asked for that differs from it is refused (diffusers'
        img2img has no width/height and would quietly make the image's size). A ControlNet run's: the control
        image's unless asked otherwise (diffusers then resizes the control image to the run's size); a ControlNet
        img2img or inpaint run's: the init image's (the control image is resized to it)."""
        if self.init_image is None:
            assert self.control_image is not None
            w, h = self.control_image.size
            if width is None or height is None:
                try:
                    check_size("the control image's width", w)
                    check_size("the control image's height", h)
                except SettingsError as exc:
                    raise GhostError(f"{exc} ({self.control_path} is {w}×{h}): resize it, or give --width and "
                                     "--height (the control image is then resized to them)") from None
            return width or w, height or h
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
        paths = {"control_image": self.control_path} if self.control_image is not None else {}
        if self.init_image is not None:
            paths.update(init_image=self.init_path, mask=self.mask_path)
        return paths

    def call_kwargs(self, settings: RunSpec) -> dict[str, Any]:
        if self.control_image is not None and self.init_image is not None:  # ControlNet img2img or inpaint
            # the size given to both: diffusers would otherwise size the control image by itself (a mismatch mid-call)
            return {"image": self.init_image, "control_image": self.control_image, "strength": settings.strength,
                    "controlnet_conditioning_scale": float(settings.controlnet_scale or 0),
                    **({"mask_image": self.mask} if settings.kind == "inpaint" else {}),
                    "width": settings.width, "height": settings.height}
        if settings.kind == "img2img":  # its size is the image's
            return {"image": self.init_image, "strength": settings.strength}
        size = {"width": settings.width, "height": settings.height}
        if settings.kind == "inpaint":
            return {"image": self.init_image, "mask_image": self.mask, "strength": settings.strength, **size}
        if settings.kind == "controlnet":  # diffusers' ControlNet text-to-image call takes its control image as image
            return {"image": self.control_image, "controlnet_conditioning_scale": float(settings.controlnet_scale or 0),
                    **size}
        return size

    def save(self, writer: Any) -> None:
        """The input images as the call got them, PNG beside the run's own (images/input_init_image.png, …)."""
        for name, image in (("init_image", self.init_image), ("mask", self.mask),
                            ("control_image", self.control_image)):
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


def check_generator_device(generator_device: str, device: str | None = None) -> None:
    """Refuse, in one line, a CUDA generator where torch sees no CUDA device (called before the pipeline loads), or
    for a pipeline on another device (`device`: the one it runs on; diffusers would fail mid-call)."""
    if generator_device != "cuda":
        return
    if not torch.cuda.is_available():
        raise GhostError("--generator-device cuda needs a CUDA device, and torch sees none on this machine")
    if device is not None and not str(device).startswith("cuda"):
        raise GhostError(f"--generator-device cuda draws the noise on the GPU, but the pipeline runs on {device}: "
                         "give --device cuda too")


def batch_init_latents(pipe: Any, image: Image.Image, settings: RunSpec, generator: torch.Generator) -> Any:
    """For a batch of diffusers' SD img2img (or ControlNet img2img) call: the init image's latents once per image of
    the batch, encoded exactly as its prepare_latents would (the same preprocessing and dtype, the VAE's sample drawn
    once from the call's generator), so the call gets as many initial images as images to make — what diffusers'
    FutureWarning ("You have passed 2 text prompts (`prompt`), but only 1 initial images (`image`)…") asks for — and
    the result is bit for bit what one image duplicated by diffusers gave. Passing the PIL image N times would
    not: the VAE would draw N samples from the generator, and every later draw would move. None: pass the image."""
    from diffusers import StableDiffusionControlNetImg2ImgPipeline, StableDiffusionImg2ImgPipeline

    if settings.batch < 2 or not isinstance(pipe, (StableDiffusionImg2ImgPipeline,
                                                   StableDiffusionControlNetImg2ImgPipeline)):
        return None
    from diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img import retrieve_latents

    if isinstance(pipe, StableDiffusionControlNetImg2ImgPipeline):  # its __call__ sizes the image, then float32
        pixels = pipe.image_processor.preprocess(image, height=settings.height, width=settings.width)
        pixels = pixels.to(dtype=torch.float32)
    else:
        pixels = pipe.image_processor.preprocess(image)
    encoder = getattr(pipe, "text_encoder", None)
    dtype = encoder.dtype if encoder is not None else pipe.unet.dtype  # prompt_embeds' dtype, as diffusers has it
    with torch.no_grad():
        pixels = pixels.to(device=pipe._execution_device, dtype=dtype)
        latents = pipe.vae.config.scaling_factor * retrieve_latents(pipe.vae.encode(pixels), generator=generator)
    return torch.cat([latents] * settings.batch, dim=0)


def read_inputs(settings: RunSpec) -> CallInputs | None:
    """The spec's input images, read and checked (readable, the mask the init image's size); None: text-to-image.
    Also refuses a CUDA generator where there is no CUDA device."""
    check_generator_device(settings.generator_device)
    control = None
    if settings.control_image is not None:
        control = _read(settings.control_image, "--control-image", "RGB")
        controlled = CallInputs(control_image=control, control_path=str(Path(settings.control_image).resolve()))
        if settings.init_image is None:
            return controlled
    if settings.init_image is None:
        return None
    init = _read(settings.init_image, "--init-image", "RGB")
    mask = _read(settings.mask, "--mask", "L") if settings.mask is not None else None
    if mask is not None and mask.size != init.size:
        raise GhostError(f"the mask {settings.mask} is {mask.width}×{mask.height} but the init image is "
                         f"{init.width}×{init.height}: they must be the same size")
    inputs = CallInputs(init, mask, str(Path(settings.init_image).resolve()),
                        str(Path(settings.mask).resolve()) if settings.mask is not None else None)
    return replace(inputs, control_image=control, control_path=controlled.control_path) if control else inputs


def pipeline_for(loaded: LoadedPipeline, settings: RunSpec) -> LoadedPipeline:
    """`loaded` with its pipeline in diffusers' class for the run's kind, sharing every component (text2img: itself;
    controlnet, or img2img/inpaint with a control image: with the run's ControlNet, the pipeline's own unless
    `settings.controlnet` names a folder)."""
    kind = settings.kind
    if kind == "text2img" or (kind in ("img2img", "inpaint") and settings.control_image is None):
        if own_controlnet(loaded.pipe) is not None:  # diffusers would fail mid-call: "image must be passed"
            raise GhostError(f"this pipeline ({type(loaded.pipe).__name__}) makes ControlNet calls: give "
                             "--control-image IMG, the image its ControlNet follows")
    if kind == "text2img":
        return loaded
    from diffusers import AutoPipelineForImage2Image, AutoPipelineForInpainting, AutoPipelineForText2Image

    auto = {"img2img": AutoPipelineForImage2Image, "inpaint": AutoPipelineForInpainting}.get(kind,
                                                                                            AutoPipelineForText2Image)
    if kind == "controlnet" or settings.control_image is not None:
        return _with_controlnet(loaded, settings.controlnet, auto, kind)
    return replace(loaded, pipe=_from_pipe(auto, loaded.pipe, kind))


def _from_pipe(auto: Any, pipe: Any, kind: str, **components: Any) -> Any:
    try:
        made = auto.from_pipe(pipe, **components)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = " ".join(str(exc).split())
        raise GhostError(f"this pipeline ({type(pipe).__name__}) has no {kind} form in diffusers: {reason}") from None
    made.set_progress_bar_config(disable=True)
    return made


def _with_controlnet(loaded: LoadedPipeline, folder: str | None, auto: Any, kind: str) -> LoadedPipeline:
    what = "ControlNet" if kind == "controlnet" else f"ControlNet {kind}"
    if folder is None:
        own = own_controlnet(loaded.pipe)
        if own is None:
            raise GhostError(f"--control-image needs a ControlNet: this pipeline ({type(loaded.pipe).__name__}) has "
                             "none; give --controlnet DIR (a saved ControlNetModel's folder, or a pipeline folder "
                             "with a controlnet/ component)")
        if kind == "controlnet":
            return loaded
        return replace(loaded, pipe=_from_pipe(auto, loaded.pipe, what, controlnet=own))
    model, digest = load_controlnet(loaded, folder)
    made = _from_pipe(auto, loaded.pipe, what, controlnet=model)
    # the ControlNet's weights beside the pipeline's (an object's weights unknown: none of them claimed)
    hashes = {**loaded.weight_hashes, COMPONENT: digest} if loaded.weight_hashes else loaded.weight_hashes
    return replace(loaded, pipe=made, weight_hashes=hashes)


def recorded_inputs(record: Any, settings: RunSpec) -> RunSpec:
    """A recorded run's settings with its input images read from the record's own copies (images/input_*.png) where
    the files it names are gone or now hold other pixels: a re-run makes the call the record saw, from the record
    alone. The copies hold exactly what the call got (the file as read, converted to RGB or L)."""
    changes: dict[str, str] = {}
    for name, image_name in INPUT_IMAGES.items():
        path = getattr(settings, name)
        copy = record.image_path(image_name) if path is not None else None
        if copy is None or not Path(copy).is_file():
            continue
        mode = "L" if name == "mask" else "RGB"
        if not _same_pixels(path, copy, mode):
            changes[name] = str(copy)
    return replace(settings, **changes) if changes else settings


def _same_pixels(path: str, copy: str | Path, mode: str) -> bool:
    try:
        return np.array_equal(np.asarray(_read(path, "", mode)), np.asarray(_read(str(copy), "", mode)))
    except GhostError:
        return False
