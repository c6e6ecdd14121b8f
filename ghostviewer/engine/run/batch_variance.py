"""The opt-in finding "batch variance": in a batch GhostViewer made with one seed, image k differs from the same
generator's image k made alone, beyond float noise.

Every kind of call (text-to-image, img2img, inpaint, and their ControlNet forms) gets the same treatment: all the
randomness a diffusers call draws goes through `torch.randn(…, generator=…)` (randn_tensor: the initial noise, the
noise img2img and inpaint add to the init image's latents, the VAE's sampled latents, an ancestral scheduler's step
noise), so the batch's call is made with those draws taped on its own thread, and each solo call (a batch of one)
gets them back: a draw of the batch's N samples as its slice k, a draw that did not depend on the batch (the VAE's
sample of the one init image) as it was. Healthy pipelines give the same image within float noise (a batch of one
sums in another order); a pipeline whose result depends on the batch (a NaN in one sample, batched kernels that are
not batch-invariant, code that mixes samples) does not. It needs N more calls, so it runs only when asked
(`run --batch N --check-batch-variance`, `api.run(check_batch_variance=True)`); the solo calls are made after the
batch's own call with the run's interventions and LoRAs as they were, untraced, and the finding (or the note that
every image matched) goes into the batch run's event log before it closes.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.spec import RunSpec
from ghostviewer.spec.run_spec import MADE_KINDS

KIND = "batch_variance"
CHECKED = "batch_variance_checked"
# Max |pixel| difference (images in [0, 1]) a batch and its solo calls may show from float summation order alone.
# Measured on the demo (float32, CPU, DDIM and Euler ancestral, batches of 2-4, text-to-image, img2img, inpaint,
# 2026-12-01): at most 1e-5; 1e-3 is a quarter of one 8-bit level.
FLOAT_NOISE = 1e-3
KINDS = MADE_KINDS  # every kind GhostViewer makes

Event = tuple[str, str, str, dict[str, Any]]


def check_batch_request(settings: RunSpec) -> None:
    """Refuse, in one line and before anything runs, a check that cannot be made for these settings."""
    if settings.batch < 2:
        raise GhostError(f"--check-batch-variance compares the images of a batch with each made alone: it needs "
                         f"--batch 2 or more (this run makes {settings.batch})")
    if settings.kind not in KINDS:
        raise GhostError(f"--check-batch-variance is made for {', '.join(KINDS)} runs, not {settings.kind}")


class NoiseTape:
    """The seeded draws of one call on one thread: recorded (`sample` None), or played back as sample `sample` of
    a batch of `batch` (each draw made as usual, then overwritten in place, so devices, dtypes and the generator's
    state stay what the call would have had)."""

    def __init__(self, draws: list[torch.Tensor] | None = None, sample: int | None = None, batch: int = 1) -> None:
        self.draws: list[torch.Tensor] = [] if draws is None else draws
        self.sample, self.batch = sample, batch
        self.played = self.unmatched = 0

    def seen(self, drawn: torch.Tensor) -> None:
        if self.sample is None:
            self.draws.append(drawn.detach().clone())
            return
        index, self.played = self.played, self.played + 1
        recorded = self.draws[index] if index < len(self.draws) else None
        if recorded is not None and recorded.shape == drawn.shape:  # not per sample (one init image's VAE sample)
            source = recorded
        elif (recorded is not None and drawn.shape[:1] == (1,) and recorded.shape[0] == self.batch
              and recorded.shape[1:] == drawn.shape[1:]):
            source = recorded[self.sample: self.sample + 1]
        else:  # a draw the batch did not make the same way (an unseeded fault's): left as drawn
            self.unmatched += 1
            return
        with torch.no_grad():
            drawn.copy_(source)


_local = threading.local()
_lock = threading.Lock()
_taping: dict[str, Any] = {"users": 0, "randn": None}


def _randn(*args: Any, **kwargs: Any) -> torch.Tensor:
    drawn = _taping["randn"](*args, **kwargs)
    tape = getattr(_local, "tape", None)
    if tape is not None and kwargs.get("generator") is not None:
        tape.seen(drawn)
    return drawn


@contextlib.contextmanager
def taped(tape: NoiseTape) -> Iterator[NoiseTape]:
    """`torch.randn` with a generator, taped on this thread only for the block (other threads draw as ever); the
    original is put back when the last tape in any thread ends."""
    with _lock:
        if _taping["users"] == 0:
            _taping["randn"] = torch.randn
            torch.randn = _randn
        _taping["users"] += 1
    before = getattr(_local, "tape", None)
    _local.tape = tape
    try:
        yield tape
    finally:
        _local.tape = before
        with _lock:
            _taping["users"] -= 1
            if _taping["users"] == 0 and torch.randn is _randn:
                torch.randn = _taping["randn"]



@dataclass
class BatchVariance:
    """Made with the batch's call; `events()` (the call's late events) makes the solo calls and judges them."""

    pipe: Any
    settings: RunSpec
    call: Any  # PipelineCall of the batch
    solo_call: Any  # PipelineCall of the same settings with batch 1
    interventions: list[Any]
    report: dict[str, Any] = field(default_factory=dict)
    tape: NoiseTape = field(default_factory=NoiseTape)  # the batch call's seeded draws

    def _solo(self, sample: int) -> tuple[np.ndarray, NoiseTape]:
        step: dict[str, int | None] = {"now": 0}

        def on_step_end(_pipe: Any, index: int, _timestep: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
            step["now"] = index + 1
            return {}

        ctx = RunContext(pipe=self.pipe, prompt=self.settings.prompt, negative_prompt=self.settings.negative_prompt,
                         seed=int(self.settings.seed), current_step=lambda: step["now"])
        observe: dict[str, Any] = {}
        if adapter_for(self.pipe).has_step_callback(self.pipe):  # the step a step-limited fault or bypass reads
            observe.update(callback_on_step_end=on_step_end, callback_on_step_end_tensor_inputs=["latents"])
        tape = NoiseTape(self.tape.draws, sample, self.settings.batch)
        with torch.inference_mode(), applied(self.interventions, ctx), taped(tape):
            output = self.solo_call.invoke(observe)
        return np.asarray(self.solo_call.images(output)[0], dtype=np.float32), tape

    def events(self) -> list[Event]:
        if self.call.output is None:  # the batch's call failed: nothing to compare
            return []
        batch = [np.asarray(image, dtype=np.float32) for image in self.call.images(self.call.output)]
        if not self.tape.draws:
            raise GhostError("the batch's call drew no seeded noise (torch.randn with its generator) to hand on")
        differences: list[float] = []
        unmatched = 0
        for k, image in enumerate(batch):
            alone, tape = self._solo(k)
            unmatched += tape.unmatched + max(0, len(self.tape.draws) - tape.played)
            gap = np.abs(alone.astype(np.float64) - image.astype(np.float64))
            gap[np.isnan(alone) & np.isnan(image)] = 0.0  # NaN in both: the same image, not a batch effect
            differences.append(math.inf if not np.isfinite(gap).all() else float(gap.max()))
        differ = [k for k, value in enumerate(differences) if not value <= FLOAT_NOISE]
        shown = [None if math.isinf(v) else round(v, 6) for v in differences]
        self.report = {"max_abs_diff": shown, "differ": differ, "tolerance": FLOAT_NOISE, "batch": len(batch),
                       "draws": len(self.tape.draws), "unmatched_draws": unmatched}
        data = {**self.report, "seed": int(self.settings.seed)}
        if not differ:
            return [(CHECKED, f"batch variance checked: each of the {len(batch)} images matches the same noise made "
                     f"alone (largest pixel difference {max(differences):.2g}, float noise up to {FLOAT_NOISE:g})",
                     "info", data)]
        named = ", ".join(f"image {k + 1} ({'NaN/Inf' if shown[k] is None else f'{shown[k]:.3g}'})" for k in differ)
        return [(KIND, f"batch variance: {len(differ)} of {len(batch)} images differ from the same seed's noise made "
                 f"alone beyond float noise ({FLOAT_NOISE:g}): {named} — the result depends on the batch",
                 "warning", data)]


def with_batch_variance(call: Any, solo_call: Any, pipe: Any, settings: RunSpec,
                        interventions: list[Any]) -> tuple[Any, BatchVariance]:
    """The batch's call with the check among its late events, and the check (its `report` filled once it ran)."""
    check = BatchVariance(pipe, settings, call, solo_call, interventions)
    earlier = call.late_events

    def late() -> list[Event]:
        try:
            found = check.events()
        except Exception as exc:  # noqa: BLE001 - the check must never lose the batch's own record
            why = " ".join(str(exc).split())
            why = why if isinstance(exc, GhostError) else f"the solo call failed: {why}"
            found = [(CHECKED, f"batch variance not checked: {why}", "warning", {})]
        return [*earlier(), *found]

    def invoke(observe: dict[str, Any]) -> Any:  # the batch's own call, its seeded draws taped on its thread
        check.tape = NoiseTape()
        with taped(check.tape):
            return call.invoke(observe)

    made = replace(call, invoke=invoke, late_events=late)
    check.call = made
    return made, check
