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


def scheduler_name(scheduler: Any) -> str:
    cls = type(scheduler).__name__
    return next((short for short, full in SCHEDULERS.items() if full == cls), cls)


def set_scheduler(pipe: Any, name: str | None) -> str:
    """Install the named scheduler (or keep the current one for None) and return its short name."""
    if not name:
        return scheduler_name(pipe.scheduler)
    if name.strip() == type(pipe.scheduler).__name__:  # one without a short name (flow matching): as recorded
        return name.strip()
    key = name.strip().lower()
    by_class = {full.lower(): short for short, full in SCHEDULERS.items()}
    key = by_class.get(key, key)
    if key not in SCHEDULERS:
        raise GhostError(f"unknown scheduler {name!r}; choose one of: {', '.join(SCHEDULERS)}")
    cls = getattr(diffusers, SCHEDULERS[key])
    if type(pipe.scheduler) is not cls:
        pipe.scheduler = cls.from_config(pipe.scheduler.config)
    return key
