"""Swap a pipeline's scheduler by a short name, keeping its config (β schedule, prediction type, spacing)."""

from __future__ import annotations

from typing import Any

import diffusers

from ghostviewer.engine.errors import GhostError

SCHEDULERS: dict[str, str] = {
    "ddim": "DDIMScheduler",
    "ddpm": "DDPMScheduler",
    "euler": "EulerDiscreteScheduler",
    "euler_a": "EulerAncestralDiscreteScheduler",
    "heun": "HeunDiscreteScheduler",
    "dpm++": "DPMSolverMultistepScheduler",
    "dpm++_sde": "DPMSolverSDEScheduler",
    "unipc": "UniPCMultistepScheduler",
    "pndm": "PNDMScheduler",
    "lms": "LMSDiscreteScheduler",
}


# Schedulers whose diffusers class needs an optional package: offered and accepted only where it is installed.
NEEDS = {"dpm++_sde": ("torchsde", "is_torchsde_available"), "lms": ("scipy", "is_scipy_available")}


def missing_package(short: str) -> str | None:
    """The package a scheduler needs that is not installed here, or None."""
    need = NEEDS.get(short)
    if need is None:
        return None
    from diffusers import utils

    check = getattr(utils, need[1], None)
    return None if check is None or check() else need[0]


def available_schedulers() -> list[str]:
    """The short names that can run here (what the window offers)."""
    return [short for short in SCHEDULERS if missing_package(short) is None]


def scheduler_name(scheduler: Any) -> str:
    cls = type(scheduler).__name__
    return next((short for short, full in SCHEDULERS.items() if full == cls), cls)


def check_steps(scheduler: Any, steps: int | None) -> None:
    """Refuse, in one line, a step count the scheduler cannot set its timesteps for.

    diffusers' PNDM (unless its config skips the Runge–Kutta warm-up, skip_prk_steps) takes its first `pndm_order`
    (4) timesteps for that warm-up: with fewer steps its set_timesteps fails on a numpy shape mismatch (4 vs 8)."""
    order = getattr(scheduler, "pndm_order", None)
    config = getattr(scheduler, "config", None)
    if steps is None or not isinstance(order, int) or getattr(config, "skip_prk_steps", True):
        return
    if steps < order:
        raise GhostError(f"{type(scheduler).__name__} needs at least {order} steps (its Runge–Kutta warm-up takes "
                         f"{order}; skip_prk_steps is off in its config): got {steps}")


def set_scheduler(pipe: Any, name: str | None, steps: int | None = None) -> str:
    """Install the named scheduler (or keep the current one for None) and return its short name; `steps`: the
    run's, refused up front where that scheduler cannot take them (check_steps), the pipeline's own kept then."""
    if not name:
        check_steps(pipe.scheduler, steps)
        return scheduler_name(pipe.scheduler)
    if name.strip() == type(pipe.scheduler).__name__:  # one without a short name (flow matching): as recorded
        check_steps(pipe.scheduler, steps)
        return name.strip()
    key = name.strip().lower()
    by_class = {full.lower(): short for short, full in SCHEDULERS.items()}
    key = by_class.get(key, key)
    if key not in SCHEDULERS:
        raise GhostError(f"unknown scheduler {name!r}; choose one of: {', '.join(SCHEDULERS)}")
    missing = missing_package(key)
    if missing is not None:
        raise GhostError(f"the scheduler {key!r} needs the {missing} package, which is not installed "
                         f"(pip install {missing}); or choose one of: {', '.join(available_schedulers())}")
    cls = getattr(diffusers, SCHEDULERS[key])
    if type(pipe.scheduler) is not cls:
        chosen = cls.from_config(pipe.scheduler.config)
        check_steps(chosen, steps)
        pipe.scheduler = chosen
    else:
        check_steps(pipe.scheduler, steps)
    return key
