"""A setting the pipeline object at hand does not have is refused, never recorded as if it had run.

A pipeline loaded by GhostViewer is loaded in the requested dtype and device. A pipeline object the user hands
over (api.run(pipe, ...), replay or bisect with pipeline=) is used as it is: GhostViewer does not convert the
user's object behind their back, so a dtype or device it is not in is refused in one line, naming what it is in.
"""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.spec.run_spec import ATTENTION_BACKENDS


def requested_dtypes(spec: str | None, components: list[str]) -> dict[str, str]:
    """'float32,vae=float16' → {component: dtype} for the components it names or covers by its default."""
    default, overrides = None, {}
    for part in (spec or "").split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            overrides[name.strip()] = value.strip()
        elif name:
            default = name
    return {c: overrides.get(c, default) for c in components if overrides.get(c, default)}


def refuse_unapplied(loaded: Any, dtype: str | None, device: str | None) -> None:
    """GhostError when an in-memory pipeline is not in `dtype` or on `device` (None/'auto': whatever it is)."""
    if getattr(loaded, "source_kind", None) != "memory":
        return
    have = dict(loaded.dtypes)
    wrong = {c: d for c, d in requested_dtypes(dtype, sorted(have)).items() if have.get(c) != d}
    if wrong:
        shown = ", ".join(f"{c} is {have[c]}" for c in sorted(wrong))
        raise GhostError(f"dtype {dtype!r} cannot be applied to the pipeline object given ({shown}): convert it "
                         f"first (pipe.to(torch.{next(iter(wrong.values()))})) or leave dtype unset")
    if device and device != "auto" and str(loaded.device).split(":")[0] != device.split(":")[0]:
        raise GhostError(f"device {device!r} cannot be applied to the pipeline object given (it is on "
                         f"{loaded.device}): move it first (pipe.to({device!r})) or leave device unset")


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


# A transformers config's bookkeeping: the same model saved by another install (or loaded in another dtype, a
# setting of its own) says other values here, so they would make every such pair of runs differ.
TRANSFORMERS_BOOKKEEPING = frozenset({"transformers_version", "architectures", "torch_dtype", "dtype"})


def config_items(component: Any) -> dict[str, Any] | None:
    """A component's config as {key: value}: a diffusers config's keys, or a transformers `PretrainedConfig`'s
    `to_dict()` less its bookkeeping; None when it has neither. Keys starting with `_` are left out."""
    config = getattr(component, "config", None)
    if hasattr(config, "items"):
        items = dict(config.items())
    elif callable(getattr(config, "to_dict", None)) and hasattr(type(component), "config_class"):
        items = {k: v for k, v in config.to_dict().items() if k not in TRANSFORMERS_BOOKKEEPING}
    else:
        return None
    return {str(k): v for k, v in items.items() if not str(k).startswith("_")}


def component_configs(pipe: Any) -> dict[str, dict[str, Any]]:
    """Each component's class and config as it ran (the scheduler a run installed included; a transformers text
    encoder's too): {name: {"_class": …, key: value}}, recorded so that compare and settings bisection can say
    which config key differs."""
    found: dict[str, dict[str, Any]] = {}
    for name, component in (getattr(pipe, "components", None) or {}).items():
        items = None if component is None else config_items(component)
        if items is None:
            continue
        found[name] = {"_class": type(component).__name__, **{k: _plain(v) for k, v in items.items()}}
    return found


# The attention backend (RunSpec.attention_backend): diffusers' own processors for its `Attention` modules (the
# U-Net's and the VAE's in SD-style pipelines), set on every one for the run and the pipeline's own put back after
# it. diffusers 0.42's set_attention_backend only reaches processors that call dispatch_attention_fn, which the
# U-Net's AttnProcessor2_0 does not: a processor is what really changes the computation here.
#   sdpa   AttnProcessor2_0: torch's scaled_dot_product_attention, whichever kernel torch picks (on CPU, its flash
#          kernel where it applies)
#   math   the same, restricted to torch's reference math kernel (torch.nn.attention.sdpa_kernel)
#   eager  AttnProcessor: baddbmm + softmax, diffusers' original formulation

def _processors() -> dict[str, Any]:
    from diffusers.models import attention_processor as ap

    class MathAttnProcessor(ap.AttnProcessor2_0):
        """AttnProcessor2_0 on torch's math kernel only."""

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.MATH):
                return super().__call__(*args, **kwargs)

    return {"sdpa": ap.AttnProcessor2_0, "math": MathAttnProcessor, "eager": ap.AttnProcessor}


_PLAIN = ("AttnProcessor", "AttnProcessor2_0", "MathAttnProcessor")  # the processors a backend may replace


class AttentionBackend:
    """Every diffusers Attention module of the pipeline on the backend's processor while applied (an intervention:
    engine.interventions.base)."""

    name = "attention-backend"

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self._restore: list[tuple[Any, Any]] = []

    def modules(self, pipe: Any) -> list[tuple[str, Any]]:
        """(path, module) of every diffusers Attention module, refused in one line when one runs a processor the
        backend would silently drop (a user's own, a joint or IP-Adapter one) or there is none at all."""
        from diffusers.models.attention_processor import Attention

        if self.backend not in ATTENTION_BACKENDS:
            raise GhostError(f"unknown attention backend {self.backend!r}; choose one of: "
                             f"{', '.join(ATTENTION_BACKENDS)} (or leave it unset: the pipeline's own processors)")
        if self.backend == "math":
            try:
                from torch.nn.attention import sdpa_kernel  # noqa: F401 - torch ≥ 2.3
            except ImportError:
                raise GhostError("attention backend 'math' needs torch.nn.attention.sdpa_kernel (torch 2.3 or "
                                 "later), which this torch lacks") from None
        found = []
        for name, component in (getattr(pipe, "components", None) or {}).items():
            if not hasattr(component, "named_modules"):
                continue
            for path, module in component.named_modules():
                if isinstance(module, Attention):
                    found.append((f"{name}.{path}", module))
        if not found:
            raise GhostError(f"attention backend {self.backend!r} cannot be applied: {type(pipe).__name__} has no "
                             "diffusers Attention module (leave attention_backend unset)")
        for path, module in found:
            kind = type(getattr(module, "processor", None)).__name__
            if kind not in _PLAIN:
                raise GhostError(f"attention backend {self.backend!r} would replace {path}'s processor {kind}, "
                                 "which is not one of diffusers' plain ones: remove it first, or leave "
                                 "attention_backend unset to keep it")
        return found

    def check(self, pipe: Any) -> None:
        self.modules(pipe)

    def apply(self, ctx: Any) -> None:
        processor = _processors()[self.backend]
        for _path, module in self.modules(ctx.pipe):
            self._restore.append((module, module.processor))
            module.set_processor(processor())

    def remove(self) -> None:
        for module, original in reversed(self._restore):
            module.set_processor(original)
        self._restore.clear()
