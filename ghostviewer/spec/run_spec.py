"""RunSpec: the one typed, validated description of a run — what GhostViewer needs to make the call again exactly.

Every way in uses it: the window's models, the CLI and the API, the engine process (over its pipe, as JSON with a
`spec_version`), studies and bundle manifests. Defaults are written here once. A dict with a key this class does
not know is refused, naming the key (a typo must not run the defaults); a record written by another version is read
with `from_record`, which keeps what it knows.
"""

from __future__ import annotations

import difflib
import math
import os
import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ghostviewer.spec.bypass import BypassSpec
from ghostviewer.spec.checks import SettingsError, check_seed, check_values
from ghostviewer.spec.errors import SpecError

SPEC_VERSION = 1
TRACE_DEPTHS = ("block", "leaf")
CALL_KINDS = ("text2img", "img2img", "inpaint", "controlnet")
GENERATOR_DEVICES = ("cpu", "cuda")
ATTENTION_BACKENDS = ("sdpa", "math", "eager")  # diffusers' processors for its Attention modules (applied_settings)
LIST_FIELDS = ("bypass", "capture", "faults", "adapters")
EXTRA_KEYS = ("memory_check", "config")  # kept in `extra` so records made before they were fields read the same
# The call's kind and inputs: written into a record only when they differ from a plain text-to-image call of one
# image, so records (and comparisons between them) of such calls read exactly as they always have.
CALL_FIELDS = {"kind": "text2img", "batch": 1, "generator_device": "cpu", "strength": None, "init_image": None,
               "mask": None, "control_image": None, "controlnet": None, "controlnet_scale": None,
               "fuse_lora": False}
MADE_KINDS = ("text2img", "img2img", "inpaint", "controlnet")  # the kinds GhostViewer's own runs make
DEFAULT_CONTROLNET_SCALE = 1.0  # diffusers' controlnet_conditioning_scale: filled in, and recorded, when unset
# diffusers' own defaults (StableDiffusionImg2ImgPipeline, …InpaintPipeline): filled in, and recorded, when unset.
DEFAULT_STRENGTH = {"img2img": 0.8, "inpaint": 1.0}
# Prompt-list columns (CONTRACT: prompt, negative, seed, steps, guidance; and width, height, scheduler; the call's
# LoRAs and input images) and the fields they set.
ROW_FIELDS = {"prompt": "prompt", "negative": "negative_prompt", "seed": "seed", "steps": "steps",
              "guidance": "guidance", "width": "width", "height": "height", "scheduler": "scheduler",
              "lora": "adapters", "init_image": "init_image", "strength": "strength", "mask": "mask",
              "control_image": "control_image"}


@dataclass(frozen=True)
class RunSpec:
    prompt: str
    negative_prompt: str = ""
    seed: int = 0  # -1 asks for a random one (resolve_seed); a record holds the seed actually used
    steps: int = 20
    guidance: float | None = None  # None: the pipeline family's usual guidance, filled in before the run
    width: int | None = None  # None: the pipeline's native size
    height: int | None = None
    scheduler: str | None = None  # None: the pipeline's own
    device: str = "auto"
    dtype: str | None = None  # float32|float16|bfloat16, or per component: "float32,vae=float16"
    bypass: tuple[str, ...] = ()  # MODULE[@START:END] (spec/bypass.py)
    capture: tuple[str, ...] = ()  # globs of module paths whose feature maps are kept
    faults: tuple[str, ...] = ()  # ghost-lab presets
    trace_depth: str = "block"
    capture_attention: bool = False  # cross-attention maps per token and self-attention entropy, every step
    source: str = "demo"
    extra: dict[str, Any] = field(default_factory=dict)  # memory_check, config (EXTRA_KEYS)
    # The call (CALL_FIELDS): a text-to-image call of one image on a CPU generator unless these say otherwise.
    kind: str = "text2img"  # left at text2img with an init image: img2img (inpaint with a mask too)
    batch: int = 1  # num_images_per_prompt
    generator_device: str = "cpu"
    strength: float | None = None  # img2img/inpaint; None: diffusers' default for the kind (DEFAULT_STRENGTH)
    # LoRA files, "FILE" or "FILE:SCALE" (spec/loras.py; checked in check_values), loaded through diffusers' PEFT
    # integration for the run and unloaded after it. A watched call records its pipeline's adapters in its call.
    adapters: tuple[str, ...] = ()
    init_image: str | None = None  # an image file (img2img, inpaint); its pixels are recorded with the run
    mask: str | None = None  # an image file the size of the init image: white is repainted (inpaint)
    control_image: str | None = None  # an image file (ControlNet); its pixels are recorded with the run
    controlnet: str | None = None  # a saved ControlNetModel's folder (or a pipeline folder with controlnet/);
    # None: the pipeline's own controlnet component
    controlnet_scale: float | None = None  # controlnet_conditioning_scale; None: diffusers' 1.0, recorded as used
    fuse_lora: bool = False  # fuse the LoRAs into the weights for the run (safe_fusing); unfused after it
    attention_backend: str | None = None  # None: the pipeline's own attention processors; else ATTENTION_BACKENDS

    def __post_init__(self) -> None:
        if self.kind == "text2img" and self.init_image is not None:
            object.__setattr__(self, "kind", "inpaint" if self.mask is not None else "img2img")
        elif self.kind == "text2img" and self.control_image is not None:
            object.__setattr__(self, "kind", "controlnet")

    @property
    def bypass_specs(self) -> tuple[BypassSpec, ...]:
        """The bypasses parsed (BypassSpecError, one line, for a bad one): what the engine applies."""
        return tuple(BypassSpec.parse(text) for text in self.bypass)

    @property
    def memory_check(self) -> bool:
        """False when the user turned the memory estimate off (kept in `extra`, so a replay keeps it too)."""
        return self.extra.get("memory_check", True) is not False

    @property
    def config(self) -> str | None:
        """The configs folder a single-file checkpoint was loaded with (kept in `extra`: a replay reloads it so)."""
        value = self.extra.get("config")
        return str(value) if value else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in LIST_FIELDS:
            data[key] = list(data[key])
        for key, default in CALL_FIELDS.items():
            if data[key] == default:
                del data[key]
        if not data["adapters"]:
            del data["adapters"]
        if data["attention_backend"] is None:  # records of runs on the pipeline's own processors read as before
            del data["attention_backend"]
        return data

    def to_json(self) -> dict[str, Any]:
        """What travels over the engine's pipe: the dict with its schema version."""
        return {"spec_version": SPEC_VERSION, **self.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, strict: bool = True) -> RunSpec:
        """A spec from a dict: unknown keys refused, naming them (strict), or dropped (`from_record`)."""
        if not isinstance(data, Mapping):
            raise SpecError(f"a run's settings are a JSON object, not {type(data).__name__}")
        values = dict(data)
        version = values.pop("spec_version", SPEC_VERSION)
        if not isinstance(version, int) or isinstance(version, bool) or version > SPEC_VERSION:
            raise SpecError(f"these settings were written by a newer GhostViewer (spec version {version!r}; "
                            f"this one reads up to {SPEC_VERSION})")
        known = [f.name for f in fields(cls)]
        unknown = [key for key in values if key not in known]
        if unknown and strict:
            raise SpecError(_unknown(unknown[0], known, "setting"))
        for key in unknown:
            del values[key]
        if "prompt" not in values:
            raise SpecError("a run needs a prompt (it may be empty: \"\")")
        for key in LIST_FIELDS:
            values[key] = _names(key, values.get(key))
        extra = values.get("extra") or {}
        if not isinstance(extra, Mapping):
            raise SpecError(f"extra must be an object, not {extra!r}")
        bad = [key for key in extra if key not in EXTRA_KEYS]
        if bad and strict:
            raise SpecError(_unknown(bad[0], list(EXTRA_KEYS), "extra setting"))
        values["extra"] = {key: value for key, value in extra.items() if key in EXTRA_KEYS}
        return cls(**values)

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> RunSpec:
        """A recorded run's settings, whatever version wrote them: keys this version does not know are left out."""
        return cls.from_dict(data, strict=False)

    def with_row(self, row: Mapping[str, Any]) -> RunSpec:
        """This spec with a prompt-list row's values (ROW_FIELDS: `negative`, `seed`, `steps`, …) put in."""
        return replace(self, **{ROW_FIELDS[key]: value for key, value in row.items() if key in ROW_FIELDS})

    def updated(self, **changes: Any) -> RunSpec:
        """A copy with some fields changed, through the same checks as from_dict (unknown names refused)."""
        return RunSpec.from_dict({**self.to_dict(), **changes})


DEFAULTS = RunSpec(prompt="")


def _unknown(key: Any, known: list[str], what: str) -> str:
    near = difflib.get_close_matches(str(key), known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(known)}"
    return f"unknown {what} {key!r}{hint}"


def _names(key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Iterable) or isinstance(value, Mapping):
        raise SpecError(f"{key} must be a list, not {value!r}")
    return tuple(value)


def names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Module paths, fault names or patterns as given to the API: one string is one name, not its letters."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def resolve_seed(seed: int | None) -> tuple[int, str | None]:
    """-1 (or None) means "pick one", as in A1111: return the seed actually used and a note saying so."""
    try:
        check_seed(seed)
    except SettingsError as exc:
        raise SpecError(str(exc)) from None
    if seed is None or seed == -1:
        chosen = random.SystemRandom().randrange(0, 2**32)
        return chosen, f"seed -1 means random: using seed {chosen}"
    return int(seed), None


def validate(spec: RunSpec) -> None:
    """Every check that needs no pipeline, one line each (the engine adds those against the loaded pipeline)."""
    check_values(spec.to_dict())
    if spec.trace_depth not in TRACE_DEPTHS:
        raise SpecError(f"trace depth must be 'block' or 'leaf', not {spec.trace_depth!r}")
    if not isinstance(spec.capture_attention, bool):
        raise SpecError(f"capture_attention must be true or false, not {spec.capture_attention!r}")
    if spec.kind not in CALL_KINDS:
        raise SpecError(f"the call kind must be one of {', '.join(CALL_KINDS)}, not {spec.kind!r}")
    if spec.attention_backend is not None and spec.attention_backend not in ATTENTION_BACKENDS:
        raise SpecError(f"the attention backend must be one of {', '.join(ATTENTION_BACKENDS)} (or unset: the "
                        f"pipeline's own), not {spec.attention_backend!r}")
    if spec.generator_device not in GENERATOR_DEVICES:
        raise SpecError(f"the generator device must be cpu or cuda, not {spec.generator_device!r}")
    if not isinstance(spec.batch, int) or isinstance(spec.batch, bool) or not 1 <= spec.batch <= 64:
        raise SpecError(f"batch must be a whole number from 1 to 64, not {spec.batch!r}")
    if spec.init_image is not None and not isinstance(spec.init_image, str):
        raise SpecError(f"init_image must be an image file's path, not {spec.init_image!r}")
    if spec.mask is not None and not isinstance(spec.mask, str):
        raise SpecError(f"mask must be an image file's path, not {spec.mask!r}")
    if spec.kind not in MADE_KINDS:  # never silently run as something else
        raise SpecError(f"GhostViewer cannot make this call itself yet ({spec.kind}): "
                        "record it from your own code with ghostviewer.watch(pipe)")
    _validate_controlnet(spec)
    if spec.kind == "controlnet":
        return
    if spec.kind == "text2img":
        if spec.mask is not None:
            raise SpecError("--mask needs --init-image: a mask says which part of the init image to repaint")
        if spec.strength is not None:
            raise SpecError(f"--strength {spec.strength} needs --init-image: it says how much of an init image "
                            "to repaint")
        return
    if spec.init_image is None:  # a watched call's record: its images are in the record, not in a file
        raise SpecError(f"an {spec.kind} run needs --init-image FILE"
                        + (" and --mask FILE" if spec.kind == "inpaint" else ""))
    if spec.kind == "inpaint" and spec.mask is None:
        raise SpecError("an inpaint run needs --mask FILE (white: repaint, black: keep)")
    if spec.kind == "img2img" and spec.mask is not None:
        raise SpecError("an img2img run takes no mask (a mask makes it inpaint)")
    for flag, path in (("--init-image", spec.init_image), ("--mask", spec.mask)):
        if path is not None and not os.path.isfile(path):
            raise SpecError(f"{flag} {path}: no such file" if not os.path.exists(path)
                            else f"{flag} {path}: not a file")


def _validate_controlnet(spec: RunSpec) -> None:
    """A ControlNet run: its control image (a file), its ControlNet (a folder, or the pipeline's own), its scale."""
    for name in ("control_image", "controlnet"):
        value = getattr(spec, name)
        if value is not None and not isinstance(value, str):
            raise SpecError(f"{name} must be a path, not {value!r}")
    scale = spec.controlnet_scale
    if scale is not None and (not isinstance(scale, (int, float)) or isinstance(scale, bool)
                              or not math.isfinite(scale) or scale < 0):
        raise SpecError(f"--controlnet-scale must be a number of at least 0, not {scale!r}")
    # ControlNet img2img / inpaint: an img2img or inpaint run with a control image (diffusers'
    # StableDiffusionControlNetImg2ImgPipeline / …InpaintPipeline); its kind stays img2img or inpaint
    controlled = spec.kind == "controlnet" or (spec.kind in ("img2img", "inpaint") and spec.control_image is not None)
    if not controlled:
        used = [flag for flag, value in (("--control-image", spec.control_image), ("--controlnet", spec.controlnet),
                                         ("--controlnet-scale", scale)) if value is not None]
        if used:
            raise SpecError(f"{used[0]} needs --control-image: the image the ControlNet follows")
        return
    if spec.control_image is None:  # a watched call's record: its images are in the record, not in a file
        raise SpecError("a controlnet run needs --control-image FILE")
    if spec.kind == "controlnet" and (spec.init_image is not None or spec.mask is not None):
        raise SpecError("a controlnet (text-to-image) run takes no --init-image or --mask: with an init image the "
                        "run's kind is img2img (inpaint with a mask), its ControlNet following --control-image")
    if spec.kind == "controlnet" and spec.strength is not None:
        raise SpecError(f"--strength {spec.strength} needs --init-image: a ControlNet text-to-image run has none")
    if not os.path.isfile(spec.control_image):
        raise SpecError(f"--control-image {spec.control_image}: no such file" if not os.path.exists(spec.control_image)
                        else f"--control-image {spec.control_image}: not a file")
    if spec.controlnet is not None and not os.path.isdir(spec.controlnet):
        raise SpecError(f"--controlnet {spec.controlnet}: no such folder (a saved ControlNetModel's folder, or a "
                        "pipeline folder with a controlnet/ component)" if not os.path.exists(spec.controlnet)
                        else f"--controlnet {spec.controlnet}: not a folder (a saved ControlNetModel's folder)")


def with_call_defaults(spec: RunSpec) -> RunSpec:
    """The spec with what diffusers would use for its kind filled in: the strength (img2img 0.8, inpaint 1.0), the
    ControlNet's conditioning scale (1.0; ControlNet img2img and inpaint take both)."""
    if spec.strength is None and spec.kind in DEFAULT_STRENGTH:
        spec = replace(spec, strength=DEFAULT_STRENGTH[spec.kind])
    if spec.controlnet_scale is None and (spec.kind == "controlnet" or spec.control_image is not None):
        spec = replace(spec, controlnet_scale=DEFAULT_CONTROLNET_SCALE)
    return spec
