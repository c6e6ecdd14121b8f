"""The scale a scheduler gives the initial latents: what makes a float16-headroom note on them benign.

Euler, Euler ancestral, Heun, LMS (and other sigma-parameterised schedulers) multiply the initial noise by their
init_noise_sigma — the largest sigma of the schedule, thousands on a cosine schedule — so their latents overflow
float16 by design; DDIM, DDPM, PNDM and DPM++ keep unit-variance latents (init_noise_sigma 1). The anomaly rule
(analysis.anomaly.is_warning) takes the number, never a list of names, so a scheduler it has never seen is judged
by what it does.

The number is that of the scheduler's whole training schedule, read from a fresh scheduler of its class and config:
a sigma scheduler's own init_noise_sigma follows its last set_timesteps, so on a pipeline that already ran it is
the previous call's (a 4-step run's 2.65 recorded for the next 8-step run under `leading` spacing) — the same run
would be judged by what ran before it.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any


def _fresh(scheduler: Any) -> Any:
    """A scheduler of the same class and config, before any set_timesteps (the scheduler itself where it cannot
    be built again)."""
    try:
        return type(scheduler).from_config(scheduler.config)
    except Exception:  # noqa: BLE001 - a user's scheduler class: read the one at hand
        return scheduler


def latent_sigma(pipe: Any, steps: int | None = None) -> float | None:
    """The pipeline's scheduler's init_noise_sigma as a float, or None when it has none (or no scheduler): that of
    a run of `steps` (its own schedule, the tightest bound) where they are known and the scheduler sets them alone,
    else over its training schedule (at least the largest sigma of any run's)."""
    scheduler = getattr(pipe, "scheduler", None)
    if scheduler is None:
        return None
    try:  # a fresh scheduler costs ~10 ms, and a watched service asks on every call: once per class + config
        key = (type(scheduler), json.dumps(dict(scheduler.config), sort_keys=True, default=repr), steps)
    except (AttributeError, TypeError, ValueError):
        return _latent_sigma(scheduler, steps)[0]
    with _LOCK:
        if key in _KNOWN:
            return _KNOWN[key]
    value, fresh = _latent_sigma(scheduler, steps)
    if fresh:  # read from a scheduler of its own: the class and config decide it (not so the one at hand's state)
        with _LOCK:
            if len(_KNOWN) >= 256:
                _KNOWN.clear()
            _KNOWN[key] = value
    return value


_KNOWN: dict[tuple[type, str, int | None], float | None] = {}
_LOCK = threading.Lock()


def _latent_sigma(scheduler: Any, steps: int | None) -> tuple[float | None, bool]:
    """(the number, whether it was read from a fresh scheduler)."""
    fresh = _fresh(scheduler)
    if steps and fresh is not scheduler:
        try:
            fresh.set_timesteps(steps, device="cpu")
        except Exception:  # noqa: BLE001 - one that needs more (a flow-matching shift's mu): the training schedule
            fresh = _fresh(scheduler)
    try:
        value = float(fresh.init_noise_sigma)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None, fresh is not scheduler
    return (value if math.isfinite(value) else None), fresh is not scheduler
