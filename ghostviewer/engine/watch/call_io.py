"""What the recorder needs from a watched call it did not build: the RunSpec filled from the call, the final images
of whatever the caller asked for (pil, np, pt, latent; a dict or a tuple), and the caller's step callback chained
with the recorder's own."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image

from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.loading.schedulers import SCHEDULERS
from ghostviewer.record.types import CALLBACK_LATENTS
from ghostviewer.spec import RunSpec

try:  # diffusers' callback objects carry their own tensor inputs
    from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback

    CALLBACK_OBJECTS: tuple[type, ...] = (PipelineCallback, MultiPipelineCallbacks)
except ImportError:  # an older diffusers
    CALLBACK_OBJECTS = ()


SCHEDULER_NAMES = {cls: name for name, cls in SCHEDULERS.items()}  # the call's scheduler by GhostViewer's name


@functools.lru_cache(maxsize=64)
def _signature(function: Callable[..., Any]) -> inspect.Signature:
    """A pipeline's `__call__` signature, read once (~0.1 ms each time: three times a call otherwise)."""
    return inspect.signature(function)


def signature_defaults(function: Callable[..., Any]) -> dict[str, Any]:
    try:
        parameters = _signature(function).parameters
    except (TypeError, ValueError):
        return {}
    return {name: p.default for name, p in parameters.items() if p.default is not inspect.Parameter.empty}


def bind_arguments(function: Callable[..., Any], pipe: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments the caller passed, each by its name (positional ones named by the signature)."""
    try:
        signature = _signature(function)
        bound = signature.bind(pipe, *args, **kwargs)
    except (TypeError, ValueError):
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(signature.parameters)), None)  # self
    for name, p in signature.parameters.items():
        if p.kind is inspect.Parameter.VAR_KEYWORD and name in arguments:
            arguments.update(arguments.pop(name))
        elif p.kind is inspect.Parameter.VAR_POSITIONAL and name in arguments:
            arguments.update({f"{name}{i}": a for i, a in enumerate(arguments.pop(name))})
    return arguments


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (list, tuple)) and value else value


def prompts_of(arguments: dict[str, Any]) -> list[str]:
    prompt = arguments.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, (list, tuple)):
        return [p if isinstance(p, str) else "" for p in prompt]
    return [""]


def _image_size(image: Any) -> tuple[int, int] | None:
    """(height, width) of an init image given as a PIL image, an array (H, W, C) or a tensor (B, C, H, W)."""
    image = _first(image)
    if isinstance(image, Image.Image):
        return image.height, image.width
    if isinstance(image, torch.Tensor) and image.ndim >= 3:
        return int(image.shape[-2]), int(image.shape[-1])
    if isinstance(image, np.ndarray) and image.ndim >= 3:
        return int(image.shape[-3]), int(image.shape[-2])
    return None


def spec_from_call(pipe: Any, arguments: dict[str, Any], defaults: dict[str, Any], *, kind: str, depth: str,
                   source: str, images: int, device: str = "auto") -> RunSpec:
    """The run's RunSpec filled from the call where it can be: prompt, negative, the first generator's seed (-1:
    no generator, the call drew from torch's global generator), steps, guidance, size, kind, batch, strength."""
    def given(name: str) -> Any:
        return arguments[name] if name in arguments else defaults.get(name)

    generator = _first(arguments.get("generator"))
    seed = int(generator.initial_seed()) if isinstance(generator, torch.Generator) else -1
    negative = _first(given("negative_prompt"))
    size = _image_size(arguments.get("image"))
    native = adapter_for(pipe).native_size(pipe)
    height = given("height") or (size[0] if size else native)
    width = given("width") or (size[1] if size else native)
    strength = given("strength") if kind != "text2img" else None
    steps, guidance = given("num_inference_steps"), given("guidance_scale")
    scheduler = SCHEDULER_NAMES.get(type(getattr(pipe, "scheduler", None)).__name__)
    return RunSpec(
        prompt=prompts_of(arguments)[0],
        negative_prompt=negative if isinstance(negative, str) else "",
        seed=seed,
        steps=int(steps) if isinstance(steps, int) else 0,
        guidance=float(guidance) if isinstance(guidance, (int, float)) else None,
        width=int(width),
        height=int(height),
        scheduler=scheduler,
        trace_depth=depth,
        source=source,
        device=device,
        kind=kind,
        batch=max(1, images),
        generator_device=str(generator.device.type) if isinstance(generator, torch.Generator) else "cpu",
        strength=float(strength) if isinstance(strength, (int, float)) else None,
    )


def output_images(output: Any, output_type: Any) -> list[np.ndarray]:
    """The final images of a pipeline's output as float HxWxC arrays in [0, 1], copies (the caller's output is never
    touched). `output_type="latent"` has none: []."""
    if output_type == "latent":
        return []
    images = output[0] if isinstance(output, tuple) else getattr(output, "images", None)
    if images is None and isinstance(output, dict):
        images = output.get("images")
    if isinstance(images, torch.Tensor):
        array = images.detach().to("cpu", torch.float32, copy=True)
        if array.ndim == 3:
            array = array[None]
        return list(array.permute(0, 2, 3, 1).numpy())
    if isinstance(images, np.ndarray):
        array = images.astype(np.float32) if images.ndim == 4 else images[None].astype(np.float32)
        return list(array / 255.0 if images.dtype == np.uint8 else array)
    out: list[np.ndarray] = []
    for image in images or []:
        if isinstance(image, Image.Image):
            out.append(np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0)
        elif isinstance(image, np.ndarray):
            out.append(image.astype(np.float32) / (255.0 if image.dtype == np.uint8 else 1.0))
    return out


def latents_of(output: Any) -> torch.Tensor | None:
    images = output[0] if isinstance(output, tuple) else getattr(output, "images", None)
    return images if isinstance(images, torch.Tensor) else None


def chain_callbacks(kwargs: dict[str, Any], observe: dict[str, Any]) -> dict[str, Any]:
    """The caller's keywords with the recorder's step callback added: the caller's own runs first (what it returns
    is what the pipeline goes on with, so the recorder records that), and its tensor inputs are kept."""
    if not observe:
        return kwargs
    ours = observe["callback_on_step_end"]
    theirs = kwargs.get("callback_on_step_end")
    inputs = list(kwargs.get("callback_on_step_end_tensor_inputs") or ["latents"])
    if theirs is None:
        merged = dict(kwargs, callback_on_step_end=ours)
    else:
        if CALLBACK_OBJECTS and isinstance(theirs, CALLBACK_OBJECTS):
            inputs = list(theirs.tensor_inputs)  # what the pipeline would have taken from the object

        record = getattr(ours, "record_tensor", None)

        def chained(pipe: Any, index: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
            returned = theirs(pipe, index, timestep, tensors)
            latents = (returned or {}).get("latents")
            if record is not None and isinstance(latents, torch.Tensor):
                # The caller's own code between two steps: latents it spoils are named there, not at the next
                # step's first module.
                record(CALLBACK_LATENTS, latents, phase="denoise")
            ours(pipe, index, timestep, {**tensors, **(returned or {})})
            return returned

        merged = dict(kwargs, callback_on_step_end=chained)
    for name in observe["callback_on_step_end_tensor_inputs"]:
        if name not in inputs:
            inputs.append(name)
    merged["callback_on_step_end_tensor_inputs"] = inputs
    return merged
