"""The input images of a run's call and its key values, as the call-inputs panel shows them: GhostViewer's own
img2img/inpaint runs keep them as `images/input_<name>.png`; a watched call keeps each image keyword as
`images/call_<keyword>.png` (a PIL image) or in the record's `call_inputs` tensors (a tensor or an array). No Qt:
the panel calls read_call_inputs on its Worker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ghostviewer.gui.data.step_data import read_rgb
from ghostviewer.record import RecordError, RunRecord

CALL_TENSORS = "call_inputs"  # engine/watch/call_record.py's name for a watched call's tensors
OWN_PREFIX = "input_"
# A watched call's image keywords, in the panel's order, with the words it shows (ControlNet's text-to-image call
# takes its control image as `image`: said below).
CALL_IMAGES = {"image": "init image", "mask_image": "mask", "control_image": "control image",
               "ip_adapter_image": "IP-adapter image"}
WORDS = {"init_image": "init image", "mask": "mask", "control_image": "control image"}
# Keywords of a watched call shown beside its kind (the spec's strength and batch come from the settings).
CALL_VALUES = {"controlnet_conditioning_scale": "control scale", "control_guidance_start": "control start",
               "control_guidance_end": "control end"}


@dataclass(frozen=True)
class InputImage:
    name: str  # "init image", "mask", "control image", "IP-adapter image 2"
    image: np.ndarray | None  # (H, W, 3) uint8; None: recorded but not readable as an image (`note` says why)
    note: str = ""  # "64×64", or why it is not shown

    @property
    def words(self) -> str:
        return f"{self.name} · {self.note}" if self.note else self.name


@dataclass(frozen=True)
class CallInputs:
    kind: str = "text2img"
    values: tuple[tuple[str, str], ...] = ()  # ("strength", "0.75"), ("batch", "4")
    images: tuple[InputImage, ...] = ()
    problem: str = ""  # why the inputs could not be read ("" when they were)

    @property
    def shown(self) -> bool:
        """The panel shows only when the call had input images (a plain text-to-image run costs no room)."""
        return bool(self.images) or bool(self.problem)

    @property
    def summary(self) -> str:
        return " · ".join([self.kind, *(f"{name} {value}" for name, value in self.values)])


NO_INPUTS = CallInputs()


def as_rgb(array: np.ndarray, channels_first: bool) -> np.ndarray | None:
    """An image-like array as (H, W, 3) uint8, the first of a batch: a tensor's (C, H, W) (`channels_first`) or an
    array's (H, W, C), C 1, 3 or 4, or (H, W); uint8 as it is, floats in [0, 1] (or [-1, 1] when negative, diffusers'
    tensor convention). None: not an image."""
    a = np.asarray(array)
    while a.ndim > 3 and a.shape[0] >= 1:
        a = a[0]
    if a.ndim == 3 and channels_first:
        a = np.moveaxis(a, 0, -1)
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3 or a.shape[-1] not in (1, 3, 4) or min(a.shape[:2]) < 1:
        return None
    a = np.repeat(a, 3, axis=-1) if a.shape[-1] == 1 else a[..., :3]
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a)
    f = np.nan_to_num(a.astype(np.float32), nan=0.0, posinf=1.0, neginf=0.0)
    if f.size and f.min() < 0:
        f = (f + 1) / 2
    return (np.clip(f, 0, 1) * 255).round().astype(np.uint8)


def _size(image: np.ndarray) -> str:
    return f"{image.shape[1]}×{image.shape[0]}"


def _recorded_image(record: RunRecord, name: str, words: str) -> InputImage:
    try:
        path = record.image_path(name)
    except RecordError as exc:
        return InputImage(words, None, f"refused: {exc}")
    image = read_rgb(path)
    if image is None:
        return InputImage(words, None, "missing" if path is None else "unreadable")
    return InputImage(words, image, _size(image))


def _call_image(record: RunRecord, value: Any, words: str, tensors: Callable[[], Mapping[str, np.ndarray]]
                ) -> InputImage:
    """One image keyword's recorded value: {"$image": "images/call_….png"}, {"$tensor"|"$array": key}."""
    if isinstance(value, dict) and isinstance(value.get("$image"), str):
        stem = value["$image"].rsplit("/", 1)[-1].removesuffix(".png")
        return _recorded_image(record, stem, words)
    key = value.get("$tensor") or value.get("$array") if isinstance(value, dict) else None
    if isinstance(key, str):
        array = tensors().get(key)
        if array is None:
            return InputImage(words, None, "its tensor is missing from the record")
        image = as_rgb(array, channels_first="$tensor" in value)
        shape = "×".join(str(n) for n in array.shape)
        return InputImage(words, None, f"a tensor {shape}, not an image") if image is None else InputImage(
            words, image, f"{_size(image)} (tensor)")
    return InputImage(words, None, "not recorded as an image")


def _number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return f"{value:g}"


def _watched(record: RunRecord, call: Mapping[str, Any]) -> list[InputImage]:
    kwargs = call.get("kwargs") or {}
    loaded: list[Mapping[str, np.ndarray]] = []

    def tensors() -> Mapping[str, np.ndarray]:  # read once, only when a keyword was recorded as a tensor
        if not loaded:
            try:
                loaded.append(record.tensors(CALL_TENSORS))
            except (KeyError, RecordError):
                loaded.append({})
        return loaded[0]

    images: list[InputImage] = []
    for keyword in (k for k in CALL_IMAGES if kwargs.get(k) is not None):
        words = CALL_IMAGES[keyword]
        if keyword == "image" and call.get("kind") == "controlnet" and "control_image" not in kwargs:
            words = "control image"  # ControlNet's text-to-image pipeline: `image` is the conditioning
        value = kwargs[keyword]
        values = value if isinstance(value, list) else [value]
        for i, item in enumerate(values):
            name = f"{words} {i + 1}" if len(values) > 1 else words
            images.append(_call_image(record, item, name, tensors))
    return images


def read_call_inputs(record: RunRecord) -> CallInputs:
    """The call's kind, key values and input images (a worker thread calls this). Never raises RecordError."""
    try:
        settings, call = record.settings, record.call
        names = [f["name"] for f in record.files() if f["kind"] == "image"]
    except RecordError as exc:
        return CallInputs(problem=f"the call's inputs cannot be read: {exc}")
    call = call or {}
    kind = str(call.get("kind") or settings.get("kind") or "text2img")
    values: list[tuple[str, str]] = []
    strength = _number(settings.get("strength", (call.get("kwargs") or {}).get("strength")))
    if strength is not None and kind != "text2img":
        values.append(("strength", strength))
    if isinstance(settings.get("batch"), int) and settings["batch"] > 1:
        values.append(("batch", str(settings["batch"])))
    scale = _number(settings.get("controlnet_scale"))  # GhostViewer's own ControlNet runs
    if scale is not None and kind == "controlnet":
        values.append(("control scale", scale))
    for keyword, words in CALL_VALUES.items():
        number = _number((call.get("kwargs") or {}).get(keyword))
        if number is not None and words not in dict(values):
            values.append((words, number))
    own = [n for n in names if n.startswith(OWN_PREFIX)]
    order = list(WORDS)
    own.sort(key=lambda n: (order.index(n[len(OWN_PREFIX):]) if n[len(OWN_PREFIX):] in order else len(order), n))
    images = [_recorded_image(record, n, WORDS.get(n[len(OWN_PREFIX):], n[len(OWN_PREFIX):].replace("_", " ")))
              for n in own]
    if call:
        images += _watched(record, call)
    return CallInputs(kind, tuple(values), tuple(images))
