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
