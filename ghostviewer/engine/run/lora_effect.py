"""The LoRA findings, read from the weights the pipeline holds as the call starts (no second run needed):

- "LoRA has no effect" (`lora_no_effect`): an active adapter whose change to every weight it touches is ~0 — its
  scale is 0, or its lora_B (or lora_A) is all zeros (PEFT initialises lora_B to zeros: a LoRA saved before any
  training). Per layer the change is scale · B·A, bounded by |scale| · r · max|B| · max|A|.
- "LoRA left loaded" (`lora_left_loaded`): an adapter still acting on the pipeline after it was meant to be gone —
  fused into the weights and then unloaded without unfuse_lora() (diffusers' unload_lora_weights() leaves a fused
  LoRA in the weights), or fused while no longer among the active adapters (a fused layer ignores set_adapters and
  keeps its fused change); in GhostViewer's own run, any adapter already loaded before the run that its settings do
  not name (`preexisting`).

Made for every run of a pipeline that has LoRA layers or fused LoRAs, GhostViewer's own or a watched one; written
to the run's event log as kind "lora" (like the ControlNet's "control" finding).
"""

from __future__ import annotations

from typing import Any

import torch

from ghostviewer.engine.loading.loras import adapter_names, lora_files, lora_layers

KIND = "lora"
NO_EFFECT = "lora_no_effect"
LEFT_LOADED = "lora_left_loaded"
NO_EFFECT_BOUND = 1e-12  # no weight moves by more than this: the adapter changes no pixel

Finding = tuple[str, str, str, dict[str, Any]]


def _weight(holder: Any, adapter: str) -> torch.Tensor | None:
    if holder is None or adapter not in holder:
        return None
    value = holder[adapter]
    value = getattr(value, "weight", value)
    return value if isinstance(value, torch.Tensor) else None


def _peak(tensor: torch.Tensor) -> float:
    return float(tensor.detach().abs().amax().float()) if tensor.numel() else 0.0


class LoraEffect:
    """The pipeline's LoRA layers as the call starts, and the findings they make."""

    def __init__(self, pipe: Any) -> None:
        self.files = lora_files(pipe)  # GhostViewer's own adapters: name -> file
        self.adapters: dict[str, dict[str, Any]] = {}
        self.stale: dict[str, dict[str, Any]] = {}  # fused but no longer active
        merged_anywhere: set[str] = set()
        with torch.no_grad():
            for component, _path, layer in lora_layers(pipe):
                merged = [str(name) for name in getattr(layer, "merged_adapters", ()) or ()]
                merged_anywhere.update(merged)
                if getattr(layer, "disable_adapters", False):
                    continue
                active = [str(name) for name in getattr(layer, "active_adapters", ()) or ()]
                for name in merged:
                    if name not in active:
                        entry = self.stale.setdefault(name, {"layers": 0, "components": []})
                        entry["layers"] += 1
                        if component not in entry["components"]:
                            entry["components"].append(component)
                for name in active:
                    self._add(name, component, layer)
        # fused, then unloaded without unfuse_lora(); an adapter still loaded but merged nowhere was unfused by PEFT
        # itself (set_adapters unmerges first) and only diffusers' list of fused LoRAs still names it
        fused = {str(name) for name in (getattr(pipe, "fused_loras", None) or ())}
        loaded = {name for names in adapter_names(pipe).values() for name in names}
        self.unloaded_fused = sorted(fused - merged_anywhere - loaded)

    @classmethod
    def of(cls, pipe: Any) -> LoraEffect | None:
        if not adapter_names(pipe) and not getattr(pipe, "fused_loras", None):
            return None
        return cls(pipe)

    def _add(self, name: str, component: str, layer: Any) -> None:
        down = _weight(getattr(layer, "lora_A", None), name)
        up = _weight(getattr(layer, "lora_B", None), name)
        if down is None or up is None:
            down = _weight(getattr(layer, "lora_embedding_A", None), name)
            up = _weight(getattr(layer, "lora_embedding_B", None), name)
        if down is None or up is None:
            return
        scale = (getattr(layer, "scaling", None) or {}).get(name, 1.0)
        scale = float(scale) if isinstance(scale, (int, float)) else 1.0
        rank = int((getattr(layer, "r", None) or {}).get(name, min(down.shape[0], up.shape[-1])) or 1)
        peak_a, peak_b = _peak(down), _peak(up)
        entry = self.adapters.setdefault(name, {"layers": 0, "components": [], "scales": [], "max_lora_A": 0.0,
                                                "max_lora_B": 0.0, "bound": 0.0})
        entry["layers"] += 1
        if component not in entry["components"]:
            entry["components"].append(component)
        if scale not in entry["scales"]:
            entry["scales"].append(scale)
        entry["max_lora_A"] = max(entry["max_lora_A"], peak_a)
        entry["max_lora_B"] = max(entry["max_lora_B"], peak_b)
        entry["bound"] = max(entry["bound"], abs(scale) * rank * peak_a * peak_b)

    def _name(self, adapter: str) -> str:
        return f"{self.files[adapter]} (adapter {adapter})" if adapter in self.files else f"adapter {adapter!r}"

    def findings(self) -> list[Finding]:
        found: list[Finding] = []
        for name, entry in self.adapters.items():
            if not entry["bound"] <= NO_EFFECT_BOUND:  # NaN weights included: the anomaly detector names those
                continue
            if all(s == 0 for s in entry["scales"]):
                why = "its scale is 0"
            elif entry["max_lora_B"] == 0:
                why = "its lora_B weights are all zeros (PEFT starts lora_B at zero: a LoRA saved before training)"
            elif entry["max_lora_A"] == 0:
                why = "its lora_A weights are all zeros"
            else:
                why = f"its weights are too small to change anything (no weight moves over {entry['bound']:.2g})"
            where = ", ".join(entry["components"])
            data = {"finding": NO_EFFECT, "adapter": name, "file": self.files.get(name), **entry}
            found.append((KIND, f"LoRA has no effect: {self._name(name)} changes no weight of the {where} — {why} "
                          f"({entry['layers']} layers)", "warning", data))
        for name, entry in self.stale.items():
            data = {"finding": LEFT_LOADED, "adapter": name, "how": "fused_inactive", **entry}
            found.append((KIND, f"LoRA left loaded: {self._name(name)} is fused into {entry['layers']} layers of the "
                          f"{', '.join(entry['components'])} though it is no longer an active adapter — a fused "
                          "layer keeps its change whatever set_adapters says (unfuse_lora() first)", "warning", data))
        if self.unloaded_fused:
            names = ", ".join(self.unloaded_fused)
            verb = "was" if len(self.unloaded_fused) == 1 else "were"
            found.append((KIND, f"LoRA left loaded: {names} {verb} fused into the weights and then unloaded without "
                          "unfuse_lora() — unload_lora_weights() leaves a fused LoRA in the weights, so every call "
                          "still has it", "warning",
                          {"finding": LEFT_LOADED, "adapters": self.unloaded_fused, "how": "fused_unloaded"}))
        return found


def preexisting(pipe: Any) -> list[Finding]:
    """GhostViewer's own run: adapters loaded on the pipeline before the run, which its settings do not name."""
    loaded = adapter_names(pipe)
    if not loaded:
        return []
    where = "; ".join(f"{component}: {', '.join(names)}" for component, names in loaded.items())
    return [(KIND, f"LoRA left loaded: the pipeline already had LoRA adapters loaded before the run ({where}) that "
             "the run's settings do not name — they act on this run's image, and a replay from the settings would "
             "not have them", "warning", {"finding": LEFT_LOADED, "how": "preexisting", "adapters": loaded})]
