"""The finding "the control image had no effect": a ControlNet run whose ControlNet handed the denoiser nothing.

diffusers adds the ControlNet's residuals (down and mid, already multiplied by the conditioning scale inside its
forward) to the U-Net's skip connections. When every residual of every step is ~0 the control image changed
nothing, and the run looks like a healthy text-to-image run: the scale was 0 at every step (`controlnet_scale` 0,
or a control_guidance_start/end window that covers no step), or the ControlNet's own outputs are zero (an untrained
ControlNet whose zero convolutions are still zero, or weights that did not load). One hook on the ControlNet module
reads its outputs and the scale it was called with; the largest |residual| stays on the device until the end (no
sync per step). Made for every run of a pipeline with a ControlNet, GhostViewer's own or a watched one.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from ghostviewer.engine.interventions.base import RunContext
from ghostviewer.engine.loading.controlnets import own_controlnet

NO_EFFECT_ABSMAX = 1e-6  # residuals at most this large change no pixel (the U-Net's own activations are ~1)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    residuals = getattr(value, "down_block_res_samples", None)  # ControlNetOutput (return_dict=True)
    if residuals is not None:
        return [*_tensors(residuals), *_tensors(getattr(value, "mid_block_res_sample", None))]
    return []


class ControlEffect:
    """An intervention on the pipeline's ControlNet module: the largest residual it returned, and its scales."""

    name = "control-effect"

    def __init__(self) -> None:
        self.thread: int | None = None  # set: only this thread's ControlNet calls count (a shared watched pipeline)
        self._handle: Any = None
        self._peak: torch.Tensor | None = None
        self.calls = 0
        self.scales: set[float] = set()

    @classmethod
    def of(cls, pipe: Any) -> ControlEffect | None:
        return cls() if own_controlnet(pipe) is not None else None

    def apply(self, ctx: RunContext) -> None:
        module = own_controlnet(ctx.pipe)
        if module is not None:
            self._handle = module.register_forward_hook(self._hook, with_kwargs=True)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _hook(self, _module: Any, _args: tuple, kwargs: dict[str, Any], output: Any) -> None:
        if self.thread is not None and threading.get_ident() != self.thread:
            return
        tensors = [t.detach() for t in _tensors(output)]
        if not tensors:
            return
        peak = torch.stack([t.abs().amax().float() for t in tensors]).amax()
        self._peak = peak if self._peak is None else torch.maximum(self._peak, peak.to(self._peak.device))
        self.calls += 1
        scale = kwargs.get("conditioning_scale")
        if isinstance(scale, (int, float)):
            self.scales.add(float(scale))
        elif isinstance(scale, (list, tuple)):  # MultiControlNetModel: one scale per ControlNet
            self.scales.update(float(s) for s in scale if isinstance(s, (int, float)))

    @property
    def peak(self) -> float | None:
        return None if self._peak is None else float(self._peak)

    def finding(self) -> tuple[str, str, str, dict[str, Any]] | None:
        """(kind, message, level, data) when the ControlNet's residuals were all ~0; None otherwise (NaN residuals
        included: the anomaly detector names those)."""
        peak = self.peak
        if peak is None or not peak <= NO_EFFECT_ABSMAX:
            return None
        data = {"peak": peak, "calls": self.calls, "scales": sorted(self.scales)}
        if self.scales and max(abs(s) for s in self.scales) == 0:
            why = "the ControlNet's scale (controlnet_conditioning_scale) was 0 at every step"
        else:
            scales = ", ".join(f"{s:g}" for s in sorted(self.scales)) or "?"
            why = (f"the ControlNet's outputs were all 0 at scale {scales} — an untrained ControlNet (its zero "
                   "convolutions still zero) or weights that did not load")
        return ("control", f"the control image had no effect: {why} (largest residual {peak:.3g} over "
                f"{self.calls} ControlNet calls)", "warning", data)
