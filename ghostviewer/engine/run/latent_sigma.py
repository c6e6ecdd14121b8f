"""The scale a scheduler gives the initial latents: what makes a float16-headroom note on them benign.

Euler, Euler ancestral, Heun, LMS (and other sigma-parameterised schedulers) multiply the initial noise by their
init_noise_sigma — the largest sigma of the schedule, thousands on a cosine schedule — so their latents overflow
float16 by design; DDIM, DDPM, PNDM and DPM++ keep unit-variance latents (init_noise_sigma 1). The anomaly rule
(analysis.anomaly.is_warning) takes the number, never a list of names, so a scheduler it has never seen is judged
by what it does.
"""

from __future__ import annotations

import math
from typing import Any


def latent_sigma(pipe: Any) -> float | None:
    """The pipeline's scheduler's init_noise_sigma as a float, or None when it has none (or no scheduler).

    Before the call's set_timesteps, a sigma scheduler's init_noise_sigma is that of its whole training schedule,
    at least the run's own largest sigma."""
    scheduler = getattr(pipe, "scheduler", None)
    try:
        value = float(scheduler.init_noise_sigma)  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
    return value if math.isfinite(value) else None
