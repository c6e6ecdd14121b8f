"""The prompt panel's state: prompt, negative prompt, seed (locked or drawn per run), steps, guidance, size,
scheduler, and the ghost-lab fault to inject. The fault is never remembered across launches (`to_dict` leaves it
out): a ghost is something a user turns on for this session, knowingly, and sees on the Run button."""

from __future__ import annotations

import random
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.spec import DEFAULTS, RunSpec, SpecError, validate
from ghostviewer.spec.checks import check_guidance, check_seed, check_size, check_steps, check_text

MAX_RANDOM_SEED = 2**32 - 1
FIELDS = ("prompt", "negative", "seed", "seed_locked", "steps", "guidance", "width", "height", "scheduler",
          "fault")
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
        self._rng = random.SystemRandom()
        self.unread: dict[str, str] = {}  # field -> why its text is not a value yet ("" steps, an empty seed)

    def update(self, **values: Any) -> None:
        touched = False
        for key, value in values.items():
            if key not in FIELDS:
                raise KeyError(f"unknown prompt field {key!r}")
            if self.unread.pop(key, None) is not None:  # a value given: the field reads as one again
                touched = True
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
                  "height": lambda: check_size("height", int(self.height) or None)}
        for key, check in checks.items():
            if key in errors:
                continue
            try:
                check()
            except SpecError as exc:
                errors[key] = str(exc)
        return errors

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
        )

    def take_settings(self, source: str, device: str, dtype: str, prompt: str | None = None) -> dict[str, Any]:
        """take_spec as it goes over the engine's pipe (JSON, with its spec version)."""
        return self.take_spec(source, device, dtype, prompt).to_json()

    def to_dict(self) -> dict[str, Any]:
        """What is remembered across launches: everything but the ghost."""
        return {key: getattr(self, key) for key in REMEMBERED}

    def load_dict(self, data: dict[str, Any]) -> None:
        """Restore remembered values, ignoring unknown keys, values of the wrong type and a ghost (an old
        settings file may still hold one)."""
        clean: dict[str, Any] = {}
        for key in REMEMBERED:
            value, current = data.get(key), getattr(self, key)
            if isinstance(current, bool) or isinstance(value, bool):
                if isinstance(current, bool) and isinstance(value, bool):
                    clean[key] = value
            elif isinstance(current, float) and isinstance(value, (int, float)):
                clean[key] = float(value)
            elif isinstance(value, type(current)):
                clean[key] = value
        self.update(**clean)
