"""Re-running recorded runs in one process: the recorded settings, the pipeline they were made with (loaded
once per source, device and dtype), or a pipeline object the user already has in memory.

Loops that re-run — replay, bisection, settings bisection, sweeps — go through here, so a pipeline is loaded
once per loop and not once per run (a CLI run spends seconds importing and loading before its first step).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.memory_identity import memory_weight_hashes
from ghostviewer.engine.loading.pipelines import LoadedPipeline, component_dtypes, load_pipeline
from ghostviewer.record import RecordError, RunRecord
from ghostviewer.spec import RunSpec, validate


def wrap_pipeline(pipe: Any) -> LoadedPipeline:
    """A DiffusionPipeline already in memory (with whatever the user patched into it), as the runner takes it."""
    if not isinstance(getattr(pipe, "components", None), dict):
        raise GhostError(f"a pipeline is 'demo', a folder, a checkpoint file, a cached hub id or a diffusers pipeline "
                         f"object, not {type(pipe).__name__} {pipe!r:.60}")
    device_of = getattr(pipe, "device", None)
    hashes, note = memory_weight_hashes(pipe)  # its folder's, when its weights are still exactly those
    return LoadedPipeline(
        pipe=pipe,
        source=f"<in-memory {type(pipe).__name__}>",
        source_kind="memory",
        device=str(device_of or "cpu"),
        dtypes=component_dtypes(pipe),
        weight_hashes=hashes,
        identity_note=note,
    )


def fits_run(loaded: Any, record: RunRecord, settings: RunSpec) -> bool:
    """A pipeline already loaded can stand in for a recorded run's: the same source, each component in the dtype
    the run recorded (a float32 pipeline does not re-run a bfloat16 run: it is loaded again, as recorded)."""
    if not isinstance(loaded, LoadedPipeline) or loaded.source != settings.source:
        return False
    components = (record.environment.get("pipeline") or {}).get("components") or {}
    recorded = {name: c.get("dtype") for name, c in components.items() if isinstance(c, dict) and c.get("dtype")}
    return all(loaded.dtypes.get(name) == dtype for name, dtype in recorded.items())


def open_recorded(run_dir: str | Path) -> tuple[RunRecord, RunSpec]:
    """The record and the settings it was made with; GhostError (a usage error) when it is not a run."""
    try:
        record = RunRecord(run_dir)
        settings = RunSpec.from_record(dict(record.settings))
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    except TypeError as exc:
        raise GhostError(f"run {run_dir} holds settings this GhostViewer cannot read: {exc}") from None
    if record.status in ("running", "interrupted"):
        raise GhostError(f"run {Path(run_dir).name} has not finished (still running, or killed): nothing to re-run")
    if record.call:
        _check_reissuable(Path(run_dir).name, record, settings)
    else:
        from ghostviewer.engine.run.call_inputs import recorded_inputs

        settings = recorded_inputs(record, settings)  # input images from the record when their files are not those
        _check_rerunnable(Path(run_dir).name, record.settings, settings)
    return record, settings


def recorded_call(record: RunRecord) -> Any:
    """A watched run's call (engine/watch/reissue.py's RecordedCall), None for GhostViewer's own runs."""
    from ghostviewer.engine.watch.reissue import RecordedCall

    return RecordedCall.of(record)


def missing_components(call: Any, loaded: LoadedPipeline, given: bool = False) -> str | None:
    """Why a watched call cannot be re-issued on `loaded`, in one line: a component the call's pipeline had (a
    ControlNet, an image encoder) that this one lacks — a watched call's record names the folder its pipeline came
    from, not where a component added in memory came from. None when every recorded component is there. `given`:
    the pipeline was passed as pipeline= (else it was loaded from the recorded source)."""
    try:
        record = RunRecord(call.run_dir)
        recorded = (record.environment.get("pipeline") or {}).get("components") or {}
    except RecordError:
        return None
    present = {name for name, value in (getattr(loaded.pipe, "components", None) or {}).items() if value is not None}
    missing = [(name, str(c.get("class"))) for name, c in recorded.items()
               if isinstance(c, dict) and c.get("class") and name not in present]
    if not missing:
        return None
    cls = call.pipeline_class.rsplit(".", 1)[-1] or "pipeline"
    parts = ", ".join(f"a {name} ({kind})" for name, kind in missing)
    name, kind = missing[0]
    where = "the pipeline passed as pipeline= has none" if given else \
        f"the record names {loaded.source} only, not where it came from"
    return (f"run {record.run_id}: its {cls} call had {parts}; {where}. Re-run it from Python on the pipeline "
            f"the call was made on: pipeline=pipe (e.g. {cls}.from_pipe(pipe, {name}={kind}.from_pretrained(FOLDER)))")


def _check_reissuable(name: str, record: RunRecord, settings: RunSpec) -> None:
    """A watched run is re-run by re-issuing its recorded call, not from its settings: they need only hold the
    values a re-run's own record takes (its kind, batch and strength are the call's)."""
    from ghostviewer.engine.watch.reissue import RecordedCall

    call = RecordedCall.of(record)
    refusal = call.refusal() if call is not None else None
    if refusal:
        raise GhostError(f"run {name}: {refusal}")
    plain = replace(settings, kind="text2img", batch=1, generator_device="cpu", strength=None, adapters=(),
                    seed=max(0, settings.seed), steps=max(1, settings.steps))
    try:
        validate(plain)
    except GhostError as exc:
        raise GhostError(f"run {name} records settings that cannot run again: {exc}") from None


def _check_rerunnable(name: str, recorded: Any, settings: RunSpec) -> None:
    """A re-run must be the recorded run: a null seed, steps or guidance (older records) would silently take
    today's default instead, and a value the engine now refuses would fail mid-loop. One line either way."""
    for key in ("seed", "steps", "guidance"):
        if recorded.get(key) is None:
            raise GhostError(f"run {name} records no {key} (made by an older GhostViewer?): it cannot be re-run "
                             f"as it was; start a new run with --{key} instead")
    try:
        validate(settings)
    except GhostError as exc:
        raise GhostError(f"run {name} records settings that cannot run again: {exc}") from None


@dataclass
class PipelineCache:
    """Pipelines loaded for a loop, keyed by (source, device, dtype); `pipeline` overrides every load."""

    pipeline: Any = None  # an in-memory pipeline object: used as it is, never reloaded
    allow_pickle: bool = False
    # A watched run's call (reissue.py's RecordedCall): every re-run re-issues it, on a pipeline of its class.
    call: Any = None
    _loaded: dict[tuple[str, ...], LoadedPipeline] = field(default_factory=dict)

    def get(self, settings: RunSpec) -> LoadedPipeline:
        if self.pipeline is not None:
            if not self._loaded:
                self._loaded[("memory", "", "")] = self._for_call(wrap_pipeline(self.pipeline))
            return next(iter(self._loaded.values()))
        if settings.source.startswith("<in-memory"):
            raise GhostError(
                "this run was made with a pipeline object in memory: pass the same object as pipeline= to re-run it"
            )
        key = (settings.source, settings.device or "auto", settings.dtype or "", settings.config or "")
        if key not in self._loaded:
            self._loaded[key] = self._for_call(load_pipeline(
                settings.source, settings.device or "auto", settings.dtype or None, self.allow_pickle,
                config=settings.config,
            ))
        return self._loaded[key]

    def _for_call(self, loaded: LoadedPipeline) -> LoadedPipeline:
        if self.call is None:
            return loaded
        from ghostviewer.engine.watch.reissue import as_recorded_class

        refusal = missing_components(self.call, loaded, given=self.pipeline is not None)
        if refusal:
            raise GhostError(refusal)
        return as_recorded_class(loaded, self.call)

    def execute(self, loaded: LoadedPipeline, settings: RunSpec, runs_dir: Path, cancel: Any = None,
                on_progress: Any = None, *, baseline: Any = "auto") -> dict[str, Any]:
        """One re-run: GhostViewer's own call from the settings, or the watched call re-issued."""
        if self.call is None:
            from ghostviewer.engine.run.runner import execute_run

            return execute_run(loaded, settings, runs_dir, cancel, on_progress, baseline=baseline)
        from ghostviewer.engine.watch.reissue import reissue_run

        return reissue_run(loaded, settings, self.call, runs_dir, cancel, on_progress, baseline=baseline)


def replay_run(loaded: LoadedPipeline, settings: RunSpec, run_dir: str | Path, runs_dir: Path, cancel: Any = None,
               on_progress: Any = None) -> dict[str, Any]:
    """One re-run of a recorded run on the loaded pipeline with these settings (the window's replay: the run's
    own, or its source swapped): a watched call is re-issued keyword for keyword — its init image, mask and
    control image are in its record, not in its settings —, GhostViewer's own call takes its input images from
    the record where their files are gone or changed."""
    try:
        record = RunRecord(run_dir)
    except RecordError as exc:
        raise GhostError(str(exc)) from None
    cache = PipelineCache(call=recorded_call(record))
    if cache.call is None:
        from ghostviewer.engine.run.call_inputs import recorded_inputs

        settings = recorded_inputs(record, settings)
    return cache.execute(cache._for_call(loaded), settings, runs_dir, cancel, on_progress)
