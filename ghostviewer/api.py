"""The Python API: one function per CLI command, each returning the dict that `--json` prints (CONTRACT.md).

`source` is anything `--pipeline` accepts (`"demo"`, a diffusers folder, a `.safetensors` file, a cached hub
id) or a `DiffusionPipeline` already in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ghostviewer.paths import default_runs_dir


def _loaded(
    source: Any, device: str = "auto", dtype: str | None = None, allow_pickle: bool = False, config: Any = None
) -> Any:
    from ghostviewer.engine.loading import LoadedPipeline, component_dtypes, load_pipeline

    if isinstance(source, (str, Path)):
        return load_pipeline(source, device=device, dtype=dtype, allow_pickle=allow_pickle, config=config)
    pipe = source
    device_of = getattr(pipe, "device", None)
    return LoadedPipeline(
        pipe=pipe,
        source=f"<in-memory {type(pipe).__name__}>",
        source_kind="memory",
        device=str(device_of or "cpu"),
        dtypes=component_dtypes(pipe),
        weight_hashes={},
    )


def run(
    source: Any = "demo",
    prompt: str = "",
    *,
    negative: str = "",
    seed: int = 0,
    steps: int = 20,
    guidance: float = 7.5,
    width: int | None = None,
    height: int | None = None,
    scheduler: str | None = None,
    dtype: str | None = None,
    device: str = "auto",
    bypass: Iterable[str] = (),
    capture: Iterable[str] = (),
    faults: Iterable[str] = (),
    trace_depth: str = "block",
    capture_attention: bool = False,
    runs_dir: str | Path | None = None,
    allow_pickle: bool = False,
    config: str | Path | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the pipeline once, traced and recorded; the CONTRACT `run` dict (verdict, first anomaly, image)."""
    from ghostviewer.engine.runner import execute_run
    from ghostviewer.engine.settings import RunSettings

    loaded = _loaded(source, device, dtype, allow_pickle, config)
    settings = RunSettings(
        prompt=prompt,
        negative_prompt=negative,
        seed=seed,
        steps=steps,
        guidance=guidance,
        width=width,
        height=height,
        scheduler=scheduler,
        device=loaded.device,
        dtype=dtype,
        bypass=tuple(bypass),
        capture=tuple(capture),
        faults=tuple(faults),
        trace_depth=trace_depth,
        capture_attention=capture_attention,
        source=loaded.source,
    )
    return execute_run(loaded, settings, Path(runs_dir) if runs_dir else default_runs_dir(), on_progress=on_progress)


def blocks(source: Any = "demo", *, allow_pickle: bool = False, config: str | Path | None = None) -> dict[str, Any]:
    """Every component's blocks: `{"blocks": [{"module", "kind", "bypassable"}, …]}`."""
    from ghostviewer.engine.blocks import discover_blocks

    loaded = _loaded(source, device="cpu", allow_pickle=allow_pickle, config=config)
    return {"blocks": [block.to_json() for block in discover_blocks(loaded.pipe)]}


def faults() -> dict[str, Any]:
    """The ghost lab's fault presets: `{"faults": [{"name", "description", "module"}, …]}`."""
    from ghostviewer.engine.faults import list_faults

    return {"faults": list_faults()}
