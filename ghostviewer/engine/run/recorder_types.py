"""What a recorded call is given and what it may raise: the call itself (PipelineCall), the options of its record
(RecordOptions), a baseline lookup made already, the handlers a watched pipeline's shared probes call, the cancel
token, and the run's exceptions. The recorder (recorder.py) is their one user; the names stay importable from it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ghostviewer.analysis.baseline_match import BaselineChoice
from ghostviewer.engine.run.record_buffer import BufferedWriter

ProgressFn = Callable[[dict[str, Any]], None]
Event = tuple[str, str, str, dict[str, Any]]  # (kind, message, level, data)


class RunCancelled(Exception):
    """Raised inside the pipeline's step callback to stop a run the user cancelled."""


class RunFailed(Exception):
    """The pipeline itself raised during a run; the partial record is kept at `run_dir`."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


class CancelToken:
    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    def is_cancelled(self) -> bool:
        return self._event.is_set()


def _no_events() -> list[Event]:
    return []


@dataclass
class PipelineCall:
    """One call of the pipeline as the recorder makes it.

    `invoke(observe)` makes the call with the recorder's own keywords merged in (`callback_on_step_end` and its
    tensor inputs, when the pipeline takes them); `images(output)` gives its final images (float HxWxC, [0, 1]).
    """

    invoke: Callable[[dict[str, Any]], Any]
    images: Callable[[Any], list[np.ndarray]]
    prompts: Sequence[str]  # the prompt each image was asked for (one for all, or one per image)
    record_prompt: Callable[[BufferedWriter], None] = lambda _writer: None
    samples: int | None = None  # images the call makes, when more than one: NaN/Inf are then counted per sample
    inference: bool = True  # inside torch.inference_mode (GhostViewer's own calls); a watched call runs as called
    thread: int | None = None  # hooks record only this thread's work (a watched pipeline may be shared)
    call_record: dict[str, Any] | None = None  # the call as made, kept beside the settings (meta `call`)
    save_inputs: Callable[[BufferedWriter], None] = lambda _writer: None  # the call's tensors and images
    late_events: Callable[[], list[Event]] = _no_events  # written before the record closes (an overlap found)
    environment: dict[str, Any] = field(default_factory=dict)  # merged into the record's environment
    output: Any = None  # the pipeline's own output, set as soon as the call returns (before it is judged)
    no_image_verdict: Callable[[Any], dict[str, Any]] = lambda _output: {
        "label": "ok", "scores": {}, "note": "the call returned no image to judge"}
    tree_signature: int | None = None  # the pipeline's module tree (tracer._tree_signature), when just taken


@dataclass(frozen=True)
class BaselineLookup:
    """A baseline lookup made already (choose_baseline's answer, kept by a watcher between calls of one
    pipeline with the same settings): the run is judged and its event log reads as if looked up now."""

    choice: BaselineChoice | None
    note: str


@dataclass(frozen=True)
class ProbeHandlers:
    """What one call hands the pipeline-level probes (interventions/probes.py) shared by a watched pipeline's calls
    in flight: each call gets its own thread's tensors."""

    thread: int
    on_initial: Callable[[torch.Tensor], None]
    on_x0: Callable[[torch.Tensor], None]
    on_step: Callable[[Any, torch.Tensor], None] | None
    record_tensor: Callable[..., None]


JoinProbes = Callable[[ProbeHandlers], AbstractContextManager[Any]]


@dataclass
class RecordOptions:
    tensors_every: int = 1
    baseline: Any = "auto"
    flight: bool = True
    fingerprints: bool = True
    cancel: CancelToken | None = None
    on_progress: ProgressFn | None = None
    # False: the module hooks only (they record the call's own thread), not the pipeline-level probes (initial
    # latents, scheduler steps, x0), channel means nor attention maps: those are another call's, in flight on another
    # thread of a watched pipeline (patches on one object must come off in the order they went on).
    probe: bool = True
    # Set (a watched pipeline): the pipeline-level probes are shared by every call in flight on it and joined
    # through this, so a call overlapping another still records its initial latents, steps and x0; the judge's
    # hooks (channel means, a ControlNet's effect) are its own thread's. Attention maps stay the `probe` call's.
    join_probes: JoinProbes | None = None
    # With flight=False: called with the run dict once the call is judged; True drops the record unwritten (a watched
    # call the keep policy does not keep). Statistics are then judged as each step ends rather than when written.
    discard: Callable[[dict[str, Any]], bool] | None = None
