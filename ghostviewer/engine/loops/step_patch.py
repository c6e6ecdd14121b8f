"""Activation patching from the bad run's own healthy step, when no fault-free reference run exists.

A user's fault (their hook, their processor) cannot be removed the way a ghost-lab fault is, so there is no run
known to compute a block's healthy output. When the first anomaly is at denoising step k > 0, the bad run holds
one itself: step k − 1, where the block was still healthy. `StepPatch` rides along a re-run of the bad run,
keeps the block's outputs of step k − 1 (call by call within the step) and from step k on replaces each call's
output by the kept output of the same call of step k − 1. Steps 0 … k − 1 run as they did, so the trajectory up to
the failure is unchanged; had the block gone on producing what it produced at its last healthy step, would the
symptom still be there? A block that runs after the anomaly in step k cannot remove it this way.

Which call belongs to which step is read from the bad run's record (its rows of the block, in execution order),
so no step counter is needed; a re-run that calls the block more often than the record did is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.loops.patch_run import hooked, patch_result
from ghostviewer.engine.module_io import replace_main_output, replaceable_tensor
from ghostviewer.engine.tracing.blocks import resolve_module
from ghostviewer.record import StatRow
from ghostviewer.spec import RunSpec


class StepPatch:
    name = "step-patch"

    def __init__(self, module: str, call_steps: Sequence[int | None], source_step: int, from_step: int) -> None:
        self.module, self.call_steps = module, list(call_steps)
        self.source_step, self.from_step = source_step, from_step
        self.kept: list[torch.Tensor] = []
        self.patched = 0
        self._calls = 0
        self._in_step: Counter[int | None] = Counter()
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def apply(self, ctx: RunContext) -> None:
        self.kept.clear()
        self.patched, self._calls = 0, 0
        self._in_step.clear()

        def hook(_block: nn.Module, _args: tuple, output: object) -> object:
            index = self._calls
            self._calls += 1
            if index >= len(self.call_steps):
                raise GhostError(f"{self.module} ran more often than in the bad run: nothing to patch it with")
            step = self.call_steps[index]
            within = self._in_step[step]
            self._in_step[step] += 1
            tensor = replaceable_tensor(output)
            if tensor is None:
                raise GhostError(f"{self.module} returns {type(output).__name__}: no tensor to patch")
            if step == self.source_step:
                self.kept.append(tensor.detach().clone())
                return None
            if step is None or step < self.from_step:
                return None
            if within >= len(self.kept) or self.kept[within].shape != tensor.shape:
                raise GhostError(f"{self.module} is called differently at step {step} than at step "
                                 f"{self.source_step}: its healthy step is no reference")
            self.patched += 1
            return replace_main_output(output, self.kept[within].to(tensor.device))

        try:
            block = resolve_module(ctx.pipe, self.module)
        except KeyError as exc:
            raise GhostError(f"cannot patch {self.module}: {exc.args[0]}") from None
        self._handle = block.register_forward_hook(hook)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self.kept.clear()


def patch_from_step(trials: Any, bad: RunSpec, module: str, rows: Sequence[StatRow], step: int) -> dict[str, Any]:
    """Re-run the bad run with `module` patched from its own step `step` − 1 from `step` on (module docstring)."""
    call_steps = [row.step for row in rows if row.module == module]
    if step - 1 not in call_steps:
        raise GhostError(f"{module} did not run at step {step - 1} of the bad run: no healthy step to patch from")
    patch = StepPatch(module, call_steps, step - 1, step)
    description = f"the bad run's own step {step - 1} (before the first anomaly), patched into steps {step} on"
    tagged = replace(bad, extra={**bad.extra, "patch": {"module": module, "from_step": step - 1, "into": step}})
    run = trials.run(tagged, {"patched": module, "from_step": step - 1}, role="patched",
                     note=f"{module} patched from {description}",
                     around=lambda loaded: hooked(patch, tagged, loaded), describe={"patched": module})
    return patch_result(module, run, None, description, patch.patched, reruns=1)
