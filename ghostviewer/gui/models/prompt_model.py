"""The prompt panel's state: prompt, negative prompt, seed (locked or drawn per run), steps, guidance, size,
scheduler, the ghost-lab fault to inject, and the call's inputs (init image and strength, mask, control image,
ControlNet and its scale, batch size, generator device, LoRA files with their scales). The fault is never remembered
across launches (`to_dict` leaves it out): a ghost is something a user turns on for this session, knowingly, and
sees on the Run button. A remembered input file that is gone at the next launch is left out with a note."""

from __future__ import annotations

import os
import random
from dataclasses import fields
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.gui.models.input_files import IMAGE_FIELDS, input_problems, missing_note
from ghostviewer.spec import DEFAULTS, RunSpec, SpecError, validate
from ghostviewer.spec.checks import (
    check_guidance,
    check_seed,
    check_size,
    check_steps,
    check_strength,
    check_text,
)
from ghostviewer.spec.run_spec import DEFAULT_CONTROLNET_SCALE, DEFAULT_STRENGTH

MAX_RANDOM_SEED = 2**32 - 1
# The call's kind and inputs ("": no file); a strength or control scale is sent only with its image.
INPUT_FIELDS = ("init_image", "strength", "mask", "control_image", "controlnet", "controlnet_scale", "batch",
                "generator_device", "loras", "fuse_lora")
FIELDS = ("prompt", "negative", "seed", "seed_locked", "steps", "guidance", "width", "height", "scheduler",
          "fault", *INPUT_FIELDS)
REMEMBERED = tuple(f for f in FIELDS if f != "fault")  # what to_dict/load_dict carry across launches


def intervention_words(settings: dict[str, Any]) -> list[str]:
    """What a run changes in the pipeline, in a few words: ['ghost: nan-latents', '1 bypass', '2 captures'].
    `settings` is a RunSpec dict (queued or recorded)."""
    words = []
    faults = [str(f) for f in settings.get("faults") or []]
    if faults:
        words.append("ghost: " + ", ".join(faults))
    bypass, capture = list(settings.get("bypass") or []), list(settings.get("capture") or [])
    if bypass:
        words.append(f"{len(bypass)} bypass" + ("es" if len(bypass) > 1 else ""))
    if capture:
        words.append(f"{len(capture)} capture" + ("s" if len(capture) > 1 else ""))
    if settings.get("capture_attention"):
        words.append("attention capture")
    return words


FAMILY_GUIDANCE = -0.5  # the guidance box's lowest value, shown as "pipeline default": the family's usual


def guidance_setting(value: float) -> float | None:
    """The run's guidance: None (the engine fills in the family's usual: 7.5 for SD, 3.5 for Flux) for the
    "pipeline default" value, else the number."""
    return None if float(value) < 0 else float(value)


class PromptModel(QObject):
    changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.prompt = "a red circle on a blue background"
        self.negative = ""
        self.seed = 0
        self.seed_locked = True  # unlocked: every queued run draws a fresh seed
        self.steps = DEFAULTS.steps
        self.guidance = FAMILY_GUIDANCE  # the pipeline family's usual, as `ghostviewer run` without --guidance
        self.width = 0  # 0: the pipeline's native size
        self.height = 0
        self.scheduler = ""  # "": the pipeline's own
        self.fault = ""  # a ghost-lab fault preset to inject ("": none)
        self.init_image = ""  # img2img from this file ("": text-to-image); with a mask: inpaint
        self.strength = DEFAULT_STRENGTH["img2img"]
        self.mask = ""
        self.control_image = ""  # a ControlNet run following this image
        self.controlnet = ""  # a ControlNetModel's folder ("": the pipeline's own)
        self.controlnet_scale = DEFAULT_CONTROLNET_SCALE
        self.batch = 1  # num_images_per_prompt
        self.generator_device = "cpu"
        self.loras: tuple[tuple[str, float], ...] = ()  # (file, scale): RunSpec.adapters "FILE:SCALE"
        self.fuse_lora = False
        self.notes: list[str] = []  # what load_dict left out (a remembered file that is gone), said once
        self._rng = random.SystemRandom()
        self.unread: dict[str, str] = {}  # field -> why its text is not a value yet ("" steps, an empty seed)

    def update(self, **values: Any) -> None:
        touched = False
        for key, value in values.items():
            if key not in FIELDS:
                raise KeyError(f"unknown prompt field {key!r}")
            if self.unread.pop(key, None) is not None:  # a value given: the field reads as one again
                touched = True
            if key == "loras":
                value = tuple((str(path), float(scale)) for path, scale in value)
            if getattr(self, key) != value:
                setattr(self, key, value)
                touched = True
        if touched:
            self.changed.emit()

    def randomise_seed(self) -> int:
        self.update(seed=self._rng.randrange(0, MAX_RANDOM_SEED + 1))
        return self.seed

    def set_unread(self, key: str, message: str | None) -> None:
        """The panel says a field's text is no value (empty, a lone '-'): the model keeps its last value, so the
        run must be refused until the text is one again — never run the value the field no longer shows."""
        if key not in FIELDS:
            raise KeyError(f"unknown prompt field {key!r}")
        if (message or None) != self.unread.get(key):
            if message:
                self.unread[key] = message
            else:
                self.unread.pop(key, None)
            self.changed.emit()

    def field_errors(self) -> dict[str, str]:
        """field -> the run spec's own one-line refusal of its value (the engine's words), for the fields shown."""
        errors = {k: v for k, v in self.unread.items() if k != "seed" or self.seed_locked}  # unlocked: drawn
        checks = {"prompt": lambda: check_text("prompt", self.prompt),
                  "negative": lambda: check_text("negative prompt", self.negative),
                  "seed": lambda: check_seed(self.seed) if self.seed_locked else None,
                  "steps": lambda: check_steps(self.steps),
                  "guidance": lambda: check_guidance(guidance_setting(self.guidance))
                  if guidance_setting(self.guidance) is not None else None,
                  "width": lambda: check_size("width", int(self.width) or None),
                  "height": lambda: check_size("height", int(self.height) or None),
                  "strength": lambda: check_strength(self.strength, self.steps) if self.init_image else None}
        for key, check in checks.items():
            if key in errors:
                continue
            try:
                check()
            except SpecError as exc:
                errors[key] = str(exc)
        problems = input_problems(self.init_image, self.mask, self.control_image, int(self.width), int(self.height))
        return {**problems, **errors}

    @property
    def kind(self) -> str:
        """The call the inputs make (what RunSpec makes of them)."""
        if self.init_image:
            return "inpaint" if self.mask else "img2img"
        return "controlnet" if self.control_image else "text2img"

    def clear_notes(self) -> None:
        if self.notes:
            self.notes = []
            self.changed.emit()

    def refusal(self, source: str = "demo", device: str = "auto", dtype: str = "") -> str:
        """Why the next run cannot be queued as shown ("" when it can): a field's text that is no value, else the
        run spec's validation of exactly what would run."""
        errors = self.field_errors()
        for key in FIELDS:
            if key in errors:
                return errors[key]
        try:
            validate(self._spec(source, device, dtype, None))
        except SpecError as exc:
            return str(exc)
        return ""

    def take_spec(self, source: str, device: str, dtype: str, prompt: str | None = None) -> RunSpec:
        """The RunSpec of the next queued run (draws a new seed first when the seed is unlocked)."""
        if not self.seed_locked:
            self.randomise_seed()
        return self._spec(source, device, dtype, prompt)

    def _spec(self, source: str, device: str, dtype: str, prompt: str | None) -> RunSpec:
        return RunSpec(
            prompt=self.prompt if prompt is None else prompt,
            negative_prompt=self.negative,
            seed=int(self.seed),
            steps=int(self.steps),
            guidance=guidance_setting(self.guidance),
            width=int(self.width) or None,
            height=int(self.height) or None,
            scheduler=self.scheduler or None,
            device=device,
            dtype=dtype or None,
            source=source,
            faults=(self.fault,) if self.fault else (),
            **self._call_fields(),
        )

    def _call_fields(self) -> dict[str, Any]:
        """The RunSpec fields of the call: only what is set, so a plain run's spec is what it always was."""
        call: dict[str, Any] = {"batch": int(self.batch), "generator_device": self.generator_device}
        if self.init_image:
            call |= {"init_image": self.init_image, "strength": float(self.strength)}
        if self.mask:
            call["mask"] = self.mask  # without an init image the spec refuses it in one line
        if self.control_image:
            call |= {"control_image": self.control_image, "controlnet_scale": float(self.controlnet_scale)}
        if self.controlnet:
            call["controlnet"] = self.controlnet
        if self.loras:
            call["adapters"] = tuple(f"{path}:{scale:g}" for path, scale in self.loras)
            if self.fuse_lora and "fuse_lora" in SPEC_FIELDS:  # the engine's LoRA support brings the field
                call["fuse_lora"] = True
        return call

    def take_settings(self, source: str, device: str, dtype: str, prompt: str | None = None) -> dict[str, Any]:
        """take_spec as it goes over the engine's pipe (JSON, with its spec version)."""
        return self.take_spec(source, device, dtype, prompt).to_json()

    def to_dict(self) -> dict[str, Any]:
        """What is remembered across launches: everything but the ghost (JSON: the LoRA rows as lists)."""
        data = {key: getattr(self, key) for key in REMEMBERED}
        data["loras"] = [[path, scale] for path, scale in self.loras]
        return data

    def load_dict(self, data: dict[str, Any]) -> None:
        """Restore remembered values, ignoring unknown keys, values of the wrong type and a ghost (an old
        settings file may still hold one)."""
        clean: dict[str, Any] = {}
        notes: list[str] = []
        for key in REMEMBERED:
            value, current = data.get(key), getattr(self, key)
            if key == "loras":
                clean[key] = _remembered_loras(value, notes)
            elif key in PATH_WORDS and isinstance(value, str) and value and not _exists(key, value):
                notes.append(missing_note(PATH_WORDS[key], value))
                clean[key] = ""
            elif isinstance(current, bool) or isinstance(value, bool):
                if isinstance(current, bool) and isinstance(value, bool):
                    clean[key] = value
            elif isinstance(current, float) and isinstance(value, (int, float)):
                clean[key] = float(value)
            elif isinstance(value, type(current)):
                clean[key] = value
        self.notes = notes
        self.update(**clean)
        if notes:
            self.changed.emit()


SPEC_FIELDS = {f.name for f in fields(RunSpec)}
PATH_WORDS = {**{key: words for key, (_flag, words) in IMAGE_FIELDS.items()}, "controlnet": "ControlNet folder"}


def _exists(key: str, path: str) -> bool:
    return os.path.isdir(path) if key == "controlnet" else os.path.isfile(path)


def _remembered_loras(value: Any, notes: list[str]) -> tuple[tuple[str, float], ...]:
    rows = []
    for row in value if isinstance(value, list) else []:
        if (not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], str)
                or not isinstance(row[1], (int, float)) or isinstance(row[1], bool)):
            continue
        if os.path.isfile(row[0]):
            rows.append((row[0], float(row[1])))
        else:
            notes.append(missing_note("LoRA file", row[0]))
    return tuple(rows)
