"""The human side of a bundle: README.txt, repro.py and the command line that repeats a run."""

from __future__ import annotations

import json
import pprint
import shlex
from typing import Any

from . import schema

# The call flags of `ghostviewer run` beyond text-to-image, with the record's copy of each input image: a bundle
# carries the pixels the call got (images/input_*.png), not the user's files.
_INPUT_FLAGS = (("init_image", "--init-image", "input_init_image"), ("mask", "--mask", "input_mask"),
                ("control_image", "--control-image", "input_control_image"))


def command_line(settings: dict[str, Any], folder: str | None = None, watched: bool = False) -> str:
    """The exact command that repeats a recorded run (POSIX shell quoting): `ghostviewer run …` for GhostViewer's
    own runs of every kind (input images from the bundle's `folder` when given), `ghostviewer replay FOLDER` for a
    watched call, whose prompts, generators and keywords only its record holds."""
    if watched:
        return shlex.join(["ghostviewer", "replay", folder or "RUN_DIR"])
    source = str(settings.get("source") or "demo")
    if source.startswith("<in-memory"):
        source = "PIPELINE"  # an in-memory pipeline has no path: the reader supplies one
    args = ["ghostviewer", "run", "--pipeline", source, "--prompt", str(settings.get("prompt") or "")]
    if settings.get("negative_prompt"):
        args += ["--negative", str(settings["negative_prompt"])]
    for key, flag in (("seed", "--seed"), ("steps", "--steps"), ("guidance", "--guidance"), ("width", "--width"),
                      ("height", "--height"), ("scheduler", "--scheduler"), ("dtype", "--dtype")):
        if settings.get(key) is not None:
            args += [flag, str(settings[key])]
    device = str(settings.get("device") or "auto").split(":")[0]
    if device != "auto":
        args += ["--device", device]
    for key, flag in (("bypass", "--bypass"), ("capture", "--capture"), ("faults", "--fault")):
        for value in settings.get(key) or ():
            args += [flag, str(value)]
    if settings.get("trace_depth") not in (None, "block"):
        args += ["--trace-depth", str(settings["trace_depth"])]
    if settings.get("capture_attention"):
        args.append("--capture-attention")
    extra = settings.get("extra") if isinstance(settings.get("extra"), dict) else {}
    if extra.get("config"):
        args += ["--config", str(extra["config"])]  # a single-file checkpoint's configs folder
    if extra.get("memory_check") is False:
        args.append("--no-memory-check")  # the size was run past the memory estimate: so must the repro
    return shlex.join(args + _call_flags(settings, folder))


def _call_flags(settings: dict[str, Any], folder: str | None) -> list[str]:
    args: list[str] = []
    for key, flag, copy in _INPUT_FLAGS:
        if settings.get(key):
            args += [flag, f"{folder}/images/{copy}.png" if folder else str(settings[key])]
    for key, flag in (("strength", "--strength"), ("controlnet", "--controlnet"),
                      ("controlnet_scale", "--controlnet-scale"), ("attention_backend", "--attention-backend")):
        if settings.get(key) is not None:
            args += [flag, str(settings[key])]
    if isinstance(settings.get("batch"), int) and settings["batch"] > 1:
        args += ["--batch", str(settings["batch"])]
    if settings.get("generator_device") not in (None, "cpu"):
        args += ["--generator-device", str(settings["generator_device"])]
    for adapter in settings.get("adapters") or ():
        args += ["--lora", str(adapter)]
    if settings.get("fuse_lora"):
        args.append("--fuse-lora")
    return args


def _anomaly_text(anomaly: dict[str, Any] | None) -> str:
    if not anomaly:
        return "none (no NaN/Inf, no fp16 overflow, no collapse or explosion)"
    step = anomaly.get("step")
    where = f"{anomaly.get('phase')} step {step}" if step is not None else str(anomaly.get("phase"))
    return f"{anomaly.get('kind')} in {anomaly.get('module')} ({where})"


def _verdict_text(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "none (the run did not finish)"
    scores = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                       for k, v in (verdict.get("scores") or {}).items())
    return f"{verdict.get('label')}" + (f" ({scores})" if scores else "")


def _isolate_lines(isolate: dict[str, Any] | None) -> list[str]:
    """The run's first bad module's inputs (export --with-inputs): what they are and how to run their repro."""
    if isolate is None:
        return []
    if not isolate.get("folder"):
        return [f"First bad module's inputs: none — {isolate.get('reason')}", ""]
    folder, step = isolate["folder"], isolate.get("step")
    where = f"denoising step {step}, call {isolate.get('call') or 0}" if step is not None else "its first call"
    output = isolate.get("output") or {}
    lines = [
        f"First bad module's inputs: {folder}/",
        f"    {isolate.get('module')} ({str(isolate.get('class') or '').rpartition('.')[2]}) at {where}, captured by "
        "re-running this run;",
        f"    its real output there: NaN {output.get('nan')}, Inf {output.get('inf')} of {output.get('numel')} values.",
        "    inputs.safetensors + inputs.json (the call's arguments), weights.safetensors (that module's state_dict,",
        "    the only weights in this bundle), module.json (class, config, dtype), README.txt (about the folder).",
    ]
    if isolate.get("repro"):
        lines += [
            "    Run the module alone (needs torch, diffusers and safetensors, not GhostViewer), after unpacking:",
            f"        cd {folder} && python repro.py [--device cpu|cuda]",
            "    It prints the output's statistics and exits 1 while the output holds NaN or Inf.",
        ]
    else:
        lines.append(f"    No repro.py: {isolate.get('reason')}")
    for name in isolate.get("faults") or []:
        lines.append(f"    The run had the ghost-lab fault {name}: repro.py carries it in a marked section "
                     "(--without-fault runs without it).")
    return [*lines, ""]


def readme(manifest: dict[str, Any]) -> str:
    """README.txt: what went wrong, where, and how to reproduce — readable without GhostViewer."""
    options = manifest.get("options") or {}
    isolated = any((run.get("isolate") or {}).get("folder") for run in manifest["runs"])
    lines = [
        "GhostViewer bug report",
        "======================",
        f"Made {manifest['created_at']} by GhostViewer {manifest['ghostviewer']} "
        f"(bundle version {manifest['bundle_version']}); {len(manifest['runs'])} run(s).",
        f"Step tensors {'included' if options.get('include_tensors', True) else 'left out (previews kept)'}; "
        f"feature maps {'included' if options.get('include_feature_maps', True) else 'left out'}. "
        "No model weights are included, only their hashes"
        + (" — except each isolated module's own (runs/<run_id>/isolate/weights.safetensors)." if isolated else "."),
        "",
    ]
    for run in manifest["runs"]:
        s, env, pipe = run["settings"], run["environment"], run["pipeline"]
        lines += [
            f"Run {run['run_id']} — status {run['status']}",
            "-" * 60,
            f"What went wrong:  verdict {_verdict_text(run.get('verdict'))}",
            f"First anomaly:    {_anomaly_text(run.get('first_anomaly'))}",
            *([f"First warning:    {_anomaly_text(run['first_warning'])} (benign)"]
              if run.get("first_warning") else []),
        ]
        if run.get("error"):
            lines.append(f"Error:            {run['error']}")
        lines += [
            f"Prompt:           {s.get('prompt')!r}",
            f"Negative prompt:  {s.get('negative_prompt')!r}",
            f"Seed / steps:     {s.get('seed')} / {s.get('steps')}, guidance {s.get('guidance')}, "
            f"{s.get('width')}x{s.get('height')}, scheduler {s.get('scheduler')}",
            f"Bypassed blocks:  {', '.join(run.get('bypasses') or []) or 'none'}",
            f"Fault presets:    {', '.join(run.get('faults') or []) or 'none'}",
            f"Pipeline:         {pipe.get('class')} from {pipe.get('source')} ({pipe.get('kind')})",
            "Components:       " + ", ".join(f"{k} {v.get('class')} {v.get('dtype') or ''}".strip()
                                              for k, v in (pipe.get("components") or {}).items()
                                              if isinstance(v, dict)),
            "Weight hashes:    " + (", ".join(f"{k} {v}" for k, v in (pipe.get("weight_hashes") or {}).items())
                                    or "none recorded"),
            f"Environment:      Python {env.get('python')}, torch {env.get('torch')}, diffusers "
            f"{env.get('diffusers')}, transformers {env.get('transformers')}, {env.get('os')}",
            f"Device / dtype:   {env.get('device')} / {env.get('dtype') or 'the pipeline default'}",
            f"Determinism:      {json.dumps(env.get('determinism'))}",
            "",
            *_isolate_lines(run.get("isolate")),
            "Reproduce it:" if not run.get("watched") else
            "Reproduce it (a call of your own code, made again from its record: its prompts, generators, images and",
            *(["keywords; run it where this bundle is unzipped, or ghostviewer.replay(FOLDER, pipeline=pipe) on your",
               "own pipeline object):"] if run.get("watched") else []),
            f"    {run['command']}",
            "",
        ]
    lines += [
        "Or replay every run here headless (GhostViewer installed; exits 1 while the ghost is still there):",
        "    python repro.py [--runs-dir DIR] [--pipeline SRC] [--device DEV]",
        "",
        "Look at it: `ghostviewer gui THIS.zip` opens the runs' timelines; `ghostviewer inspect THIS.zip` summarises",
        "them. Opening or inspecting a bundle never runs a repro.py or anything else from it.",
        "",
    ]
    return "\n".join(lines)


REPRO_TEMPLATE = '''\
#!/usr/bin/env python3
"""Replay the runs of a GhostViewer bug report headless, with their recorded settings.

Needs GhostViewer (and the pipeline it was run with) installed. Exit status: 1 while the ghost is still
there (a bad verdict or a first anomaly in any run), 0 when every run is healthy, 2 when a run cannot start.
    python repro.py [--runs-dir DIR] [--pipeline SRC] [--device DEV]
"""

from __future__ import annotations

import argparse
import os
import sys

RUNS = __RUNS__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", help="where the replayed runs are recorded (default: GhostViewer's own)")
    parser.add_argument("--pipeline", help="use this pipeline source instead of the recorded one")
    parser.add_argument("--device", help="use this device instead of the recorded one (auto, cpu, cuda, mps)")
    args = parser.parse_args(argv)
    for name in ("TRANSFORMERS_VERBOSITY", "DIFFUSERS_VERBOSITY"):
        os.environ.setdefault(name, "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded unless you ask for it
    from ghostviewer import api

    ghost = False
    for run in RUNS:
        s = run["settings"]
        try:
            result = _replayed(api, run, args) if run.get("watched") else api.run(
                args.pipeline or s.get("source") or "demo",
                s.get("prompt") or "",
                negative=s.get("negative_prompt") or "",
                seed=s.get("seed", 0),
                steps=s.get("steps", 20),
                guidance=s.get("guidance", 7.5),
                width=s.get("width"),
                height=s.get("height"),
                scheduler=s.get("scheduler"),
                dtype=s.get("dtype"),
                device=args.device or str(s.get("device") or "auto").split(":")[0],
                bypass=s.get("bypass") or (),
                capture=s.get("capture") or (),
                faults=s.get("faults") or (),
                trace_depth=s.get("trace_depth") or "block",
                capture_attention=bool(s.get("capture_attention")),
                memory_check=(s.get("extra") or {}).get("memory_check") is not False,
                config=(s.get("extra") or {}).get("config"),
                runs_dir=args.runs_dir,
                **_call_inputs(run),
            )
        except Exception as exc:  # noqa: BLE001 - one line, not a traceback
            print(f"{run['run_id']}: could not run: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        verdict = (result.get("verdict") or {}).get("label")
        anomaly = result.get("first_anomaly")
        bad = verdict != "ok" or anomaly is not None
        ghost = ghost or bad
        recorded = (run.get("verdict") or {}).get("label")
        where = "" if not anomaly else (
            f"; first anomaly {anomaly['kind']} in {anomaly['module']} ({anomaly['phase']} step {anomaly['step']})"
        )
        print(f"{run['run_id']}: verdict {verdict} (recorded: {recorded}){where} -> {result['run_dir']}")
    print("the ghost is still there" if ghost else "no ghost: every run is healthy")
    return 1 if ghost else 0


def _call_inputs(run: dict) -> dict:
    """An img2img, inpaint, ControlNet, LoRA or batch run's call: its input images are this bundle's copies."""
    s, here = run["settings"], os.path.dirname(os.path.abspath(__file__))
    inputs = {key: os.path.join(here, run["folder"], "images", f"input_{key}.png")
              for key in ("init_image", "mask", "control_image") if s.get(key)}
    for key in ("strength", "controlnet", "controlnet_scale", "attention_backend"):
        if s.get(key) is not None:
            inputs[key] = s[key]
    for key, default in (("batch", 1), ("generator_device", "cpu"), ("adapters", ()), ("fuse_lora", False)):
        if s.get(key) not in (None, default, []):
            inputs[key] = s[key]
    return inputs


def _replayed(api, run: dict, args) -> dict:
    """A watched call, re-issued from its record here (its prompts, generators, images and keywords)."""
    pipeline = None
    if args.pipeline or args.device:
        from ghostviewer.engine.loading.pipelines import load_pipeline

        source = args.pipeline or run["settings"].get("source") or "demo"
        pipeline = load_pipeline(source, device=args.device or "auto").pipe
    from ghostviewer.record import RunRecord

    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), run["folder"])
    replayed = api.replay(folder, times=1, pipeline=pipeline, runs_dir=args.runs_dir)["runs"][0]["run_dir"]
    return {**RunRecord(replayed).summary(), "run_dir": str(replayed)}


if __name__ == "__main__":
    sys.exit(main())
'''


def repro_script(manifest: dict[str, Any]) -> str:
    """repro.py: replays every run through `ghostviewer.api.run` with the recorded settings (a watched call
    through `ghostviewer.api.replay`, from its record in the bundle)."""
    runs = [{"run_id": r["run_id"], "folder": r.get("folder") or f"runs/{r['run_id']}", "settings": r["settings"],
             "verdict": r.get("verdict"), "watched": bool(r.get("watched"))} for r in manifest["runs"]]
    literal = pprint.pformat(schema.jsonable(runs), width=110, sort_dicts=False)  # str/int/float/bool/None only
    return REPRO_TEMPLATE.replace("__RUNS__", literal)
