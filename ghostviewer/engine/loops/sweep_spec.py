"""What a sweep runs (`SweepSpec`: the list, the seeds, the base settings, as the study's params record them) and
how one of its runs is made (`run_one`), the same in this process (engine/loops/sweep.py) and on a Ray actor
(engine/loops/sweep_ray.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ghostviewer.engine.loops.sweep_jobs import Items, parse_seed_spec
from ghostviewer.engine.run.runner import CancelToken, RunFailed, execute_run
from ghostviewer.spec import RunSpec

SWEEP_TENSORS_EVERY = 5  # step tensors (latents, x0, previews) every 5th step and the last; stats at every step
SETTING_KEYS = ("negative_prompt", "steps", "guidance", "width", "height", "scheduler", "device", "dtype",
                "bypass", "faults", "trace_depth", "source")


@dataclass
class SweepSpec:
    """What a sweep runs: the list, the seeds and the base settings (what the study's params record)."""

    items: Items
    seeds: list[int]
    base: RunSpec
    seeds_text: str = ""
    config: str | None = None
    allow_pickle: bool = False
    tensors_every: int = SWEEP_TENSORS_EVERY
    fingerprints: bool = False  # bit-level fingerprints in every run (a third of the statistics' cost)
    extra: dict[str, Any] = field(default_factory=dict)

    def params(self, total: int) -> dict[str, Any]:
        listed = {"list": str(Path(self.items).resolve())} if isinstance(self.items, (str, Path)) else {
            "items": [item if isinstance(item, dict) else {"prompt": item} for item in self.items]}  # type: ignore[union-attr]
        settings = self.base.to_dict()
        return {**listed, "seeds": self.seeds_text or ",".join(map(str, self.seeds)), "total": total,
                "settings": {k: settings[k] for k in SETTING_KEYS}, "config": self.config,
                "allow_pickle": self.allow_pickle, "tensors_every": self.tensors_every,
                "fingerprints": self.fingerprints, **self.extra}

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> SweepSpec:
        items: Items = params["list"] if params.get("list") else list(params.get("items") or [])
        base = RunSpec.from_record({"prompt": "", **(params.get("settings") or {})})
        if params.get("config"):  # a single-file checkpoint's configs: every run records them (replay reloads so)
            base = replace(base, extra={**base.extra, "config": str(params["config"])})
        seeds = parse_seed_spec(str(params.get("seeds") or "0"))
        # allow_pickle is never taken from a record: a study folder someone hands you must not turn pickle on (the
        # caller passes the command line's own flag).
        return cls(items, seeds, base, str(params.get("seeds") or ""), params.get("config"), False,
                   int(params.get("tensors_every") or SWEEP_TENSORS_EVERY), bool(params.get("fingerprints", False)),
                   {"list_provenance": params["list_provenance"]} if params.get("list_provenance") else {})


def run_one(loaded: Any, settings: RunSpec, runs_dir: Path, cancel: CancelToken | None,
            tensors_every: int, fingerprints: bool = False) -> dict[str, Any]:
    """One sweep run as a CONTRACT run dict with its status; a pipeline that raises is a failed run, not an end."""
    try:
        # Written when it ends (flight=False): a sweep re-runs on resume a run that did not end.
        result = execute_run(loaded, settings, runs_dir, cancel, tensors_every=tensors_every, flight=False,
                             fingerprints=fingerprints)
    except RunFailed as exc:
        return {"run_dir": str(exc.run_dir), "prompt": settings.prompt, "seed": settings.seed,
                "steps": settings.steps, "verdict": None, "first_anomaly": None, "image": None,
                "elapsed_s": None, "status": "failed", "error": str(exc)}
    return {**result, "status": result.get("status", "done")}
