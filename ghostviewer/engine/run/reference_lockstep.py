"""The suspect and the reference in lockstep: each traced module of the suspect's call is run a second time, on the
very same inputs, as the reference's module of the same name, and the first module whose output differs beyond
a healthy model's difference is where the suspect's weights are wrong.

Side by side runs (reference_run.py) compare two calls that start from the same noise and drift apart; a small
edit (a GroupNorm gain cut, two channels swapped, a VAE bias) moves a module's statistics less than two healthy
models' images differ by the end. Given the same inputs, a healthy fine-tune's module differs by a few per cent
and an edited one by far more, at the module itself: what follows it sees the suspect's inputs on both sides, so
the difference does not propagate and the deepest, first module to differ is the one that holds the edit. It
costs one more forward of every traced module (nested levels each) at the steps it compares: steps 0-3, then every
4th and the last (compared_step), the encode and decode phases whole.

Measures, per output: `rel` = ‖y − y_ref‖ / ‖y_ref‖, and `channel` = the largest per-channel |mean − mean_ref| in
units of y_ref's std (a channel swap keeps the whole tensor's min/max/mean/std, not its channels' means).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.module_io import main_tensor
from ghostviewer.engine.tracing.blocks import phase_of, resolve_module
from ghostviewer.engine.tracing.tracer import traced_modules
from ghostviewer.spec import RunSpec

# A module departs when its output (median over its calls) differs from its twin's by more than OUTLIER times the
# typical module of its component (the median over that component's modules) and by more than FLOOR. Against a good
# copy of the same model every other module is bit-identical (0): any difference departs. Against a healthy
# fine-tune (benchmarks/silent_ghosts_edited.py's healthy copy: U-Net weights 2.8 % off) the component's modules differ
# by 0.05 (text encoder 0.07) in relative L2 and the worst module by ≤6× that, channel means alike (0.1, worst ≤6×).
OUTLIER = 10.0
REL_FLOOR = 1e-3
CHANNEL_FLOOR = 1e-2


EVERY_STEP_UNTIL = 4  # steps 0-3 are all compared, then every 4th and the last: a weight edit shows from step 0
EVERY = 4


def compared_step(step: int | None, steps: int) -> bool:
    """Whether the lockstep compares this denoising step (the twins' forwards are most of its cost)."""
    if step is None or steps <= 0:
        return True
    return step < EVERY_STEP_UNTIL or step % EVERY == 0 or step == steps - 1


def _channel_means(t: torch.Tensor) -> torch.Tensor | None:
    x = t.detach().float()
    if x.ndim == 4:
        return x.mean(dim=(0, 2, 3))
    if x.ndim == 3:
        return x.mean(dim=(0, 1))
    return None


def difference(mine: torch.Tensor, theirs: torch.Tensor) -> dict[str, float] | None:
    """{"rel", "channel", "channel_index"} of the suspect's output against the reference's on the same input."""
    if mine.shape != theirs.shape or not mine.is_floating_point():
        return None
    a, b = mine.detach().float(), theirs.detach().float()
    ref_norm = float(b.norm())
    diff = float((a - b).norm())
    rel = diff / ref_norm if ref_norm > 0 else (0.0 if diff == 0 else math.inf)
    if not math.isfinite(diff):
        rel = math.inf
    out = {"rel": rel, "channel": 0.0, "channel_index": -1}
    ca, cb = _channel_means(a), _channel_means(b)
    if ca is not None and cb is not None and ca.numel() > 1:
        scale = max(float(b.std()), 1e-8)
        moved = (ca - cb).abs() / scale
        c = int(moved.argmax())
        out["channel"], out["channel_index"] = float(moved[c]), c
    return out


class Lockstep:
    """Forward hooks on the suspect's traced modules that run the reference's twin on the same inputs."""

    def __init__(self, suspect: Any, reference: Any, depth: str = "block", steps: int = 0) -> None:
        self.pairs: list[tuple[str, nn.Module, nn.Module]] = []
        for path, module in traced_modules(suspect, depth):  # type: ignore[arg-type]
            try:
                twin = resolve_module(reference, path)
            except Exception:  # noqa: BLE001 - a module the reference has not: not compared
                continue
            self.pairs.append((path, module, twin))
        self.step: int | None = None
        self.steps = steps  # the call's denoising steps (which are compared: compared_step)
        self.readings: list[dict[str, Any]] = []  # every output compared, in execution order
        self.skipped: set[str] = set()  # modules whose twin refused the suspect's inputs
        self._busy = False

    def _hook(self, path: str, twin: nn.Module):
        phase = phase_of(path)

        def hook(_module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
            if self._busy or (phase == "denoise" and not compared_step(self.step, self.steps)):
                return
            mine = main_tensor(output)
            if not isinstance(mine, torch.Tensor):
                return
            self._busy = True
            try:
                theirs = main_tensor(twin(*args, **kwargs))
            except Exception:  # noqa: BLE001 - a twin that cannot take these inputs (another dtype): not compared
                self.skipped.add(path)
                return
            finally:
                self._busy = False
            if isinstance(theirs, torch.Tensor) and (found := difference(mine, theirs)) is not None:
                self.readings.append({"phase": phase, "step": self.step if phase == "denoise" else None,
                                      "module": path, **found})

        return hook

    @contextmanager
    def hooked(self) -> Iterator[None]:
        handles = [module.register_forward_hook(self._hook(path, twin), with_kwargs=True)
                   for path, module, twin in self.pairs]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    @property
    def compared(self) -> set[str]:
        """The modules whose outputs were compared with the reference's on the same inputs."""
        return {reading["module"] for reading in self.readings}

    def first(self, outlier: float = OUTLIER) -> dict[str, Any] | None:
        """The first output (execution order; hooks fire innermost first) of a module that departs (OUTLIER): at
        the first of its calls beyond the limit. None when no module departs."""
        by_module: dict[str, list[dict[str, Any]]] = {}
        for r in self.readings:
            by_module.setdefault(r["module"], []).append(r)
        typical: dict[str, dict[str, list[float]]] = {}
        for module, rows in by_module.items():
            group = typical.setdefault(module.split(".")[0], {"rel": [], "channel": []})
            for key in ("rel", "channel"):
                group[key].append(_median([r[key] for r in rows]))
        limits = {comp: {"rel": max(REL_FLOOR, outlier * _median(v["rel"])),
                         "channel": max(CHANNEL_FLOOR, outlier * _median(v["channel"]))}
                  for comp, v in typical.items()}
        for r in self.readings:
            limit = limits[r["module"].split(".")[0]]
            rows = by_module[r["module"]]
            over = [key for key in ("rel", "channel")
                    if r[key] > limit[key] and _median([x[key] for x in rows]) > limit[key]]
            if not over:
                continue
            key = over[0]
            channel = key == "channel"
            return {"phase": r["phase"], "step": r["step"], "module": r["module"],
                    "stat": f"same-input channel_mean[{r['channel_index']}]" if channel else "same-input output",
                    "ratio": round(r[key], 4), "limit": round(limit[key], 4),
                    "unit": "reference std" if channel else "relative L2",
                    "typical": round(limit[key] / outlier, 5)}
        return None


def _median(values: list[float]) -> float:
    finite = sorted(v if math.isfinite(v) else 1e30 for v in values)
    if not finite:
        return 0.0
    mid = len(finite) // 2
    return finite[mid] if len(finite) % 2 else (finite[mid - 1] + finite[mid]) / 2


def lockstep_call(suspect: LoadedPipeline, reference: LoadedPipeline, spec: RunSpec) -> Lockstep:
    """The suspect's call (its recorded settings) once more, with the reference's modules run in lockstep."""
    from ghostviewer.engine.run.runner import build_call, pipeline_for, prepare_settings

    original = suspect.pipe.scheduler
    lockstep = Lockstep(suspect.pipe, reference.pipe, spec.trace_depth, spec.steps)

    def on_step_end(_pipe: Any, index: int, _t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        lockstep.step = index + 1
        return kwargs

    try:
        settings, _ = prepare_settings(suspect, spec)
        call = build_call(pipeline_for(suspect, settings), settings)
        lockstep.step = 0
        with torch.no_grad(), lockstep.hooked():
            call.invoke({"callback_on_step_end": on_step_end})
    finally:
        suspect.pipe.scheduler = original
    return lockstep
