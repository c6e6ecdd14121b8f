"""Isolate one module of a recorded run: re-run the run as it was (settings, faults, bypasses), capture that
module's real inputs and weights at one call, and write them with a standalone repro (see isolation/folder.py).

The rebuilt module is checked before anything is called a repro: it must load the weights strictly and give
the run's own output on the run's own inputs (with the run's ghost-lab fault injected, when it had one).
"""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.interventions.base import RunContext, applied
from ghostviewer.engine.interventions.input_capture import CapturedCall, InputCapture, InputCaptureConfig
from ghostviewer.engine.isolation.arguments import decode_call, describe, encode_call, name_arguments
from ghostviewer.engine.isolation.carry import attribute_edits, carry_user_code, set_attributes
from ghostviewer.engine.isolation.folder import diffusers_processors, materialize, write_folder
from ghostviewer.engine.isolation.fuzz import fuzz_module
from ghostviewer.engine.isolation.injected import apply_faults, injected_faults
from ghostviewer.engine.isolation.outputs import output_stats, stream_adapter
from ghostviewer.engine.isolation.rebuild import BuildSpec, build, choose_build
from ghostviewer.engine.isolation.repro_text import readme, repro_script
from ghostviewer.engine.isolation.user_source import class_code, hooks_code, hooks_report, processor_code
from ghostviewer.engine.loading.pipelines import LoadedPipeline
from ghostviewer.engine.loops.recorded import PipelineCache, open_recorded, recorded_call
from ghostviewer.engine.module_io import main_tensor
from ghostviewer.engine.run.runner import CancelToken, RunFailed
from ghostviewer.engine.tracing.blocks import iter_modules, phase_of, pipeline_components, resolve_module
from ghostviewer.engine.watch.user_hooks import hooks_hint
from ghostviewer.spec import RunSpec


def find_module(pipe: Any, path: str) -> nn.Module:
    """The module at `path`; GhostError naming the closest module paths when there is none."""
    try:
        return resolve_module(pipe, path)
    except KeyError:
        names = [*pipeline_components(pipe), *(name for name, _ in iter_modules(pipe, "leaf"))]
        close = difflib.get_close_matches(path, names, n=5, cutoff=0.6)
        hint = ", ".join(close) if close else "none (see 'ghostviewer blocks')"
        raise GhostError(f"unknown module {path!r} in this pipeline; close names: {hint}") from None


def _step_for(module: str, step: int | None, anomaly: dict[str, Any] | None, steps: int) -> int | None:
    if phase_of(module) != "denoise":
        return None  # encode/decode modules run outside the denoising loop: their first call
    if step is None:
        step = int(anomaly["step"]) if anomaly and anomaly.get("step") is not None else 0
    if not 0 <= step < steps:
        raise GhostError(f"step {step} is outside the run's denoising steps (0..{steps - 1})")
    return step


def capture_call(loaded: LoadedPipeline, settings: RunSpec, config: InputCaptureConfig,
                 cache: PipelineCache | None = None) -> CapturedCall:
    """Re-run the recorded settings (a watched run: its call re-issued, `cache.call`) with the capture on; stops the
    run once the call is captured."""
    capture = InputCapture(config)
    token = CancelToken()

    def progress(_event: dict[str, Any]) -> None:
        if capture.done:
            token.cancel()  # everything needed is in hand: the rest of the run is not

    ctx = RunContext(pipe=loaded.pipe, prompt=settings.prompt, negative_prompt=settings.negative_prompt,
                     seed=int(settings.seed or 0), current_step=lambda: None)
    with tempfile.TemporaryDirectory(prefix="ghostviewer-isolate-") as runs, applied([capture], ctx):
        try:
            (cache or PipelineCache()).execute(loaded, settings, Path(runs), token, progress)
        except RunFailed:
            pass  # the run broke later on; the call may still have been captured
    if capture.captured is None:
        where = f"at step {config.step}" if config.step is not None else "in the re-run"
        raise GhostError(f"{config.module} was not called {where} (call {config.call}); nothing to isolate")
    return capture.captured


def _on(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_on(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _on(v, device) for k, v in value.items()}
    return value


def same_output(got: torch.Tensor | None, expected: torch.Tensor | None) -> str | None:
    """None when the rebuilt module's output is the run's (NaN where it had NaN, ±Inf where it had them, close
    elsewhere)."""
    if got is None or expected is None or got.shape != expected.shape:
        return f"output shape {None if got is None else tuple(got.shape)} is not the run's"
    a, b = got.detach().float().cpu(), expected.float()
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return "NaN where the run had none (or the other way round)"
    if not torch.equal(torch.isinf(a), torch.isinf(b)) or not torch.equal(a[torch.isinf(a)], b[torch.isinf(b)]):
        return "Inf where the run had none (or the other way round)"  # e.g. the user's subclass not rebuilt as such
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not finite.any():
        return None
    diff = float((a[finite] - b[finite]).abs().max())
    scale = float(b[finite].abs().max())
    tolerance = (1e-4 if expected.dtype == torch.float32 else 2e-2) * (1.0 + scale)
    return None if diff <= tolerance else f"output differs from the run's by up to {diff:.3g}"


def _edit_words(edits: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{name + '.' if name else ''}{key} = {value!r}" for name, values in edits.items()
                     for key, value in values.items())


def isolate_module(
    run_dir: str | Path, module: str, step: int | None = None, out_dir: str | Path | None = None, *,
    pipeline: Any = None, call: int = 0, allow_pickle: bool = False, fuzz: bool = False,
) -> dict[str, Any]:
    if out_dir is None:
        raise GhostError("isolate needs an output folder (-o DIR)")
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise GhostError(f"{out} exists and is not a folder")
    record, settings = open_recorded(run_dir)
    cache = PipelineCache(pipeline=pipeline, allow_pickle=allow_pickle, call=recorded_call(record))
    loaded = cache._for_call(pipeline) if isinstance(pipeline, LoadedPipeline) else cache.get(settings)
    target = find_module(loaded.pipe, module)
    config = InputCaptureConfig(module, _step_for(module, step, record.first_anomaly, settings.steps), call)
    captured = capture_call(loaded, settings, config, cache)
    args, kwargs = name_arguments(target.forward, captured.args, captured.kwargs)
    encoded = encode_call(args, kwargs)
    words = RunContext(pipe=loaded.pipe, prompt=settings.prompt, negative_prompt="", seed=0,
                       current_step=lambda: None).prompt_word_count()
    faults, notes = injected_faults(list(settings.faults), module, words)
    dtype = next((str(t.dtype).removeprefix("torch.") for t in captured.state.values() if t.is_floating_point()),
                 "float32")
    processors = diffusers_processors(captured.processors)
    device = str(loaded.device)
    run_args, run_kwargs = _on(decode_call(encoded.spec, encoded.tensors), device)

    carried: list[str] = []
    edits: dict[str, dict[str, Any]] = {}

    def check(rebuilt: nn.Module) -> str | None:
        candidate = materialize(rebuilt, dtype, captured.state, processors).to(device)
        edits.clear()
        edits.update(attribute_edits(target, candidate))  # the user's `eps = 0`: the rebuild has the config's
        set_attributes(candidate, edits)
        carried[:] = carry_user_code(target, candidate)  # the user's processors and hooks, by reference
        restore = apply_faults(candidate, module, faults)
        try:
            with torch.inference_mode():
                output = candidate(*run_args, **run_kwargs)
                return same_output(main_tensor(output, candidate, stream_adapter(candidate)), captured.output)
        finally:
            restore()

    component, _, relative = module.partition(".")
    spec: BuildSpec = choose_build(target, pipeline_components(loaded.pipe).get(component), relative, check)
    if spec.kind != "none":
        processors = diffusers_processors(processors, build(spec))
    stats = output_stats(captured.output)
    user = processor_code(target)  # the user's processors as repro.py code, or why not
    own_class, class_report = class_code(target) if spec.kind in ("config", "kwargs") else ("", [])
    hooks = hooks_code(target)  # the user's forward hooks as repro.py code, or why not
    in_repro = [*class_report, *user.report, *hooks_report(target)]
    if spec.kind == "none":  # no repro.py at all
        in_repro = [{**item, "in_repro": False, "why": item["why"] or "no repro.py: the module cannot be rebuilt"}
                    for item in in_repro]
    if edits and spec.kind != "none":
        in_repro.append({"kind": "attributes", "name": _edit_words(edits), "on": [n or "the module" for n in edits],
                         "in_repro": True, "why": None})
    meta = {
        "module": module, "class": spec.class_path, "step": config.step, "call": call, "dtype": dtype,
        "build": spec.to_json(), "processors": processors, "faults": faults, "fault_notes": notes,
        "run_dir": str(Path(run_dir).resolve()), "run_id": record.run_id, "prompt": settings.prompt,
        "seed": settings.seed, "output": stats, "rebuildable": spec.kind != "none",
        "unsupported": encoded.spec["unsupported"], "inputs": describe(encoded.spec, encoded.tensors),
        "user_code": list(carried), "user_code_in_repro": in_repro,
        "user_processor_code": {"source": user.source, "on": user.on, "states": user.states},
        "user_class_code": own_class, "attributes": edits,
        "user_hook_code": {"source": hooks.source, "on": hooks.on} if spec.kind != "none" else {},
    }
    write_folder(out, meta, encoded, captured.state)
    repro = out / "repro.py"
    repro.unlink(missing_ok=True)
    if spec.kind != "none":
        repro.write_text(repro_script(meta, processors), encoding="utf-8")
    (out / "README.md").write_text(readme(meta), encoding="utf-8")
    table = None
    if fuzz:
        if spec.kind == "none":  # cannot be rebuilt: the module that ran, in the pipeline at hand
            live, on = target, "the live module in memory (it cannot be rebuilt)"
        elif carried:  # the folder would lose the user's code: the rebuilt copy with it, in memory
            live = materialize(build(spec), dtype, captured.state, processors).to(device)
            set_attributes(live, edits)
            carry_user_code(target, live)
            on = "the rebuilt module in memory, with the user's code carried"
        else:
            live, on = None, "the rebuilt module from the folder"
        table = fuzz_module(out) if live is None else fuzz_module(
            (live, run_kwargs), args=tuple(run_args), faults=faults, module_path=module)
        table["on"] = on
    return {
        "module": module, "class": spec.class_path, "step": config.step, "call": call, "out_dir": str(out),
        "inputs": meta["inputs"], "output": stats, "rebuildable": spec.kind != "none", "rebuilt_by": spec.kind,
        "reason": spec.reason or None, "repro": str(repro) if spec.kind != "none" else None,
        "faults": [f["name"] for f in faults], "notes": notes, "unsupported": encoded.spec["unsupported"],
        "carried": list(carried), "user_code_in_repro": in_repro, **({"fuzz": table} if fuzz else {}),
        # a watched call's own hooks the pipeline reloaded from its folder lacks: its inputs and output are not theirs
        **({"missing_user_code": hint} if (hint := "" if pipeline is not None else hooks_hint(record.call)) else {}),
    }
