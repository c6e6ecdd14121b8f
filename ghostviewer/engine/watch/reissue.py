"""Re-issuing a watched call from its record: the keywords rebuilt from the `call` meta entry (tensors and arrays
from the record's call_inputs, images from its PNGs, generators with their recorded device and state), made through
the one recorder, so a replay, a bisection trial or an isolation's capture is GhostViewer's own re-run of that call.

What the record marks unrecorded (an opaque callback) is left out, and said so in the re-run's log and result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.run.applied_settings import component_configs
from ghostviewer.engine.run.recorder import CancelToken, PipelineCall, ProgressFn, RecordOptions, record_call
from ghostviewer.engine.watch.call_io import (
    chain_callbacks,
    output_images,
    prompts_of,
    signature_defaults,
)
from ghostviewer.engine.watch.call_record import CALL_TENSORS, _plain
from ghostviewer.record import RecordError, RunRecord
from ghostviewer.record.reader import recorded_image
from ghostviewer.spec import RunSpec

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
           "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool}


@dataclass
class RecordedCall:
    """A watched run's call: its JSON, the tensors it refers to, the folder its images lie in."""

    json: dict[str, Any]
    tensors: dict[str, np.ndarray]
    run_dir: Path

    @classmethod
    def of(cls, record: RunRecord) -> RecordedCall | None:
        """None for GhostViewer's own runs (no `call` entry)."""
        call = record.call
        if not call:
            return None
        try:
            tensors = record.tensors(CALL_TENSORS)
        except (RecordError, KeyError, OSError):
            tensors = {}
        return cls(call, tensors, record.path)

    @property
    def left_out(self) -> list[str]:
        """The keywords a re-issued call lacks (the record could not keep them)."""
        return list(self.json.get("unrecorded") or [])

    @property
    def pipeline_class(self) -> str:
        return str(self.json.get("pipeline_class") or "")

    def refusal(self) -> str | None:
        """Why this call cannot be re-issued exactly, in one line; None when it can."""
        kwargs = self.json.get("kwargs") or {}
        if not self.json.get("generators") and kwargs.get("latents") is None:
            return ("the watched call passed no generator and no latents (its noise came from torch's global "
                    "generator): it cannot be re-issued exactly; pass generator=torch.Generator().manual_seed(…)")
        for generator in self.json.get("generators") or []:
            if str(generator.get("device", "cpu")).startswith("cuda") and not torch.cuda.is_available():
                return f"the watched call's generator was on {generator['device']}: re-issue it on a machine with CUDA"
        return None

    def keywords(self, device: str, shift: int = 0) -> dict[str, Any]:
        """The call's keywords, rebuilt (fresh objects each time: a pipeline may change a tensor it was handed).
        `shift` != 0: each generator seeded afresh with its recorded seed + shift (a bisection's other-seed
        reference), instead of its recorded state."""
        generators = [self._generator(g, shift) for g in self.json.get("generators") or []]
        recorded = self.json.get("kwargs") or {}
        decoded = {name: self._decode(value, generators, device) for name, value in recorded.items()}
        return {name: value for name, value in decoded.items() if value is not _LEFT_OUT}

    def images(self) -> dict[str, np.ndarray]:
        """The call's input images as recorded (name -> uint8 array), to write into a re-run's record."""
        found: dict[str, np.ndarray] = {}

        def walk(value: Any) -> None:
            if isinstance(value, dict) and "$image" in value:
                with Image.open(recorded_image(self.run_dir, value["$image"])) as image:
                    found[Path(value["$image"]).stem] = np.asarray(image).copy()
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, list):
                for item in value:
                    walk(item)

        walk(self.json.get("kwargs") or {})
        return found

    def seed_shift(self, settings: RunSpec) -> int:
        """How far the settings' seed is from the call's first generator's (0: the call as recorded)."""
        generators = self.json.get("generators") or []
        return int(settings.seed) - int(generators[0]["seed"]) if generators and settings.seed >= 0 else 0

    def _generator(self, entry: dict[str, Any], shift: int = 0) -> torch.Generator:
        generator = torch.Generator(device=str(entry.get("device") or "cpu"))
        state = self.tensors.get(str(entry.get("state")))
        if shift:
            generator.manual_seed(int(entry["seed"]) + shift)
        elif state is not None:
            generator.set_state(torch.from_numpy(np.array(state, dtype=np.uint8, copy=True)))
        else:
            generator.manual_seed(int(entry["seed"]))
        return generator

    def _decode(self, value: Any, generators: list[torch.Generator], device: str) -> Any:
        if isinstance(value, list):
            items = [self._decode(v, generators, device) for v in value]
            return [v for v in items if v is not _LEFT_OUT]
        if not isinstance(value, dict):
            return value
        if "$generator" in value:
            return generators[int(value["$generator"])]
        if "$float" in value:
            return float(value["$float"])
        if "$unrecorded" in value:
            return _LEFT_OUT
        if "$tensor" in value:
            array = self.tensors.get(value["$tensor"])
            if array is None:
                raise GhostError(f"the record lacks the call's tensor {value['$tensor']!r}: it cannot be re-issued")
            dtype = _DTYPES.get(str(value.get("dtype")))
            recorded = str(value.get("device") or "cpu")
            on = recorded if not recorded.startswith("cuda") or torch.cuda.is_available() else device
            tensor = torch.from_numpy(np.array(array, copy=True))
            return tensor.to(device=on, dtype=dtype) if dtype is not None else tensor.to(on)
        if "$array" in value:
            return np.array(self.tensors[value["$array"]], copy=True)
        if "$image" in value:
            with Image.open(recorded_image(self.run_dir, value["$image"])) as image:
                image.load()
                mode = str(value.get("mode") or image.mode)
                return image.copy() if image.mode == mode else image.convert(mode)
        return {k: self._decode(v, generators, device) for k, v in value.items()}


_LEFT_OUT = object()


def unwatched_call(pipe: Any) -> Any:
    """The pipeline class's own `__call__`, past any watcher's subclass (a replay is not a new watched call)."""
    cls = type(pipe)
    while "_ghostviewer_watcher" in vars(cls):
        cls = cls.__bases__[0]
    return cls.__call__


def _import(path: str) -> type | None:
    module, _, name = path.rpartition(".")
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return found if isinstance(found, type) else None


def as_recorded_class(loaded: LoadedPipeline, call: RecordedCall) -> LoadedPipeline:
    """The pipeline as the class the call was made on (an img2img call on a text-to-image pipeline loaded from the
    same folder: `from_pipe`, sharing its modules, hooks and all)."""
    cls = _import(call.pipeline_class)
    own = type(loaded.pipe)
    while "_ghostviewer_watcher" in vars(own):
        own = own.__bases__[0]
    if cls is None or own is cls:
        return loaded
    from_pipe = getattr(cls, "from_pipe", None)
    if from_pipe is None:
        raise GhostError(f"the call was made on a {cls.__name__}, and this diffusers cannot make one from a "
                         f"{own.__name__} (from_pipe): pass that pipeline as pipeline=")
    try:
        made = from_pipe(loaded.pipe)
    except Exception as exc:  # noqa: BLE001 - whatever diffusers says, one line
        raise GhostError(f"cannot make the call's {cls.__name__} from this {own.__name__}: {exc}") from None
    with contextlib.suppress(Exception):
        made.set_progress_bar_config(disable=True)
    return dataclasses.replace(loaded, pipe=made)


@contextlib.contextmanager
def recorded_scheduler(pipe: Any, call: RecordedCall) -> Iterator[None]:
    """The scheduler class and config the call was made with, for the re-issued call only."""
    recorded = call.json.get("scheduler") or {}
    current = getattr(pipe, "scheduler", None)
    same = current is not None and type(current).__name__ == recorded.get("class") and \
        _plain(dict(getattr(current, "config", {}) or {})) == recorded.get("config")
    if not recorded or same:
        yield
        return
    import diffusers

    cls = getattr(diffusers, str(recorded.get("class")), None)
    if cls is None:
        raise GhostError(f"the call's scheduler {recorded.get('class')} is not in this diffusers")
    pipe.scheduler = cls.from_config(recorded.get("config") or {})
    try:
        yield
    finally:
        pipe.scheduler = current


def reissue_call(loaded: LoadedPipeline, call: RecordedCall, shift: int = 0) -> PipelineCall:
    """The recorded call as a PipelineCall for the recorder (inputs written into the re-run's record too)."""
    from ghostviewer.engine.run.runner import _record_prompt
    from ghostviewer.engine.watch.watcher import _expected_images, _latent_verdict

    pipe = loaded.pipe
    function = unwatched_call(pipe)
    kwargs = call.keywords(str(loaded.device), shift)
    defaults = signature_defaults(function)
    output_type = kwargs.get("output_type", defaults.get("output_type", "pil"))
    samples = _expected_images(kwargs, defaults)
    prompts = prompts_of(kwargs)
    per_prompt = max(1, samples // len(prompts))
    images = call.images()

    def invoke(observe: dict[str, Any]) -> Any:
        return function(pipe, **chain_callbacks(kwargs, observe))

    def save_inputs(writer: Any) -> None:
        if call.tensors:
            writer.save_tensors(CALL_TENSORS, dict(call.tensors))
        for name, image in images.items():
            writer.save_image(name, image)
        for name in call.left_out:
            writer.event("call", f"argument {name} was not recorded (an opaque object): the re-issued call is made "
                         "without it", level="warning", argument=name)

    def record_prompt(writer: Any) -> None:
        if isinstance(kwargs.get("prompt"), (str, list, tuple)):
            _record_prompt(pipe, prompts[0], writer)

    return PipelineCall(
        invoke=invoke,
        images=lambda output: output_images(output, output_type),
        prompts=[p for p in prompts for _ in range(per_prompt)] if len(prompts) * per_prompt == samples else prompts,
        record_prompt=record_prompt,
        samples=samples if samples > 1 else None,
        inference=False,  # as the watched call ran
        call_record={**call.json, "reissued_from": str(call.run_dir)},
        save_inputs=save_inputs,
        environment={"reissued": {"from": str(call.run_dir), "left_out": call.left_out},
                     "component_configs": component_configs(pipe)},
        no_image_verdict=_latent_verdict,
    )


def reissue_run(
    loaded: LoadedPipeline,
    settings: RunSpec,
    call: RecordedCall,
    runs_dir: Path,
    cancel: CancelToken | None = None,
    on_progress: ProgressFn | None = None,
    *,
    baseline: Any = "auto",
) -> dict[str, Any]:
    """Re-issue the watched call once through the recorder (with the settings' bypasses and faults, as a
    bisection's trial asks); CONTRACT's `run` dict plus `left_out`."""
    from ghostviewer.engine.run.runner import build_interventions

    refusal = call.refusal()
    if refusal:
        raise GhostError(refusal)
    loaded = as_recorded_class(loaded, call)
    interventions = build_interventions(loaded, settings)
    shift = call.seed_shift(settings)
    notes = [f"re-issued the watched call of {call.run_dir.name}"
             + (f", its generators seeded {shift:+d} from the recorded seeds" if shift else "")]
    if call.left_out:
        notes.append(f"left out (not recorded): {', '.join(call.left_out)}")
    options = RecordOptions(baseline=baseline, cancel=cancel, on_progress=on_progress)
    with recorded_scheduler(loaded.pipe, call):
        result = record_call(loaded, settings, reissue_call(loaded, call, shift), Path(runs_dir), interventions,
                             notes, options)
    result["left_out"] = call.left_out
    return result
