"""A setting the pipeline object at hand does not have is refused, never recorded as if it had run.

A pipeline loaded by GhostViewer is loaded in the requested dtype and device. A pipeline object the user hands
over (api.run(pipe, ...), replay or bisect with pipeline=) is used as it is: GhostViewer does not convert the
user's object behind their back, so a dtype or device it is not in is refused in one line, naming what it is in.
"""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.errors import GhostError


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


def component_configs(pipe: Any) -> dict[str, dict[str, Any]]:
    """Each component's class and config as it ran (the scheduler a run installed included): {name: {"_class":
    …, key: value}}, recorded so that compare and settings bisection can say which config key differs."""
    found: dict[str, dict[str, Any]] = {}
    for name, component in (getattr(pipe, "components", None) or {}).items():
        config = getattr(component, "config", None)
        if component is None or not hasattr(config, "items"):
            continue
        found[name] = {"_class": type(component).__name__,
                       **{str(k): _plain(v) for k, v in config.items() if not str(k).startswith("_")}}
    return found
