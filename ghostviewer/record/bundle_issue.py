"""ISSUE.md (`ghostviewer export --issue`): a report to paste into an upstream diffusers issue, in the sections of
diffusers' bug-report template — what goes wrong in one line, a reproduction that needs only diffusers (the
pipeline class, source, scheduler, dtypes, the call's keywords, the seed and its generator's device), the first
anomaly, the final image's place in the bundle, and the System Info block."""

from __future__ import annotations

import json
import pprint
from typing import Any

from ghostviewer.paths import resources_dir

DTYPES = ("float32", "float16", "bfloat16")
# What the reproduction checks for each verdict GhostViewer gave (a plain numpy reading of the final image).
SYMPTOMS = {
    "nan": ("not np.isfinite(image).all()", "the image holds NaN or Inf"),
    "blank": ("float(image.std()) < 0.02", "the image is (nearly) one flat colour"),
    "saturated": ("float(((image <= 0.01) | (image >= 0.99)).mean()) > 0.5", "most pixels are clipped"),
}


def _source(pipeline: dict[str, Any], settings: dict[str, Any]) -> tuple[str, str]:
    """(the path or hub id to load, a comment on it)."""
    source = str(pipeline.get("source") or settings.get("source") or "demo")
    if source == "demo":
        return (str(resources_dir() / "demo-pipeline"),
                "GhostViewer's demo pipeline (a StableDiffusionPipeline folder in its resources/)")
    if source.startswith("<in-memory"):
        return ("PATH/TO/YOUR/PIPELINE", "the run used a pipeline built in memory: put its folder or hub id here")
    return source, "the pipeline folder, file or hub id the run loaded"


def _dtypes(pipeline: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """(the dtype most components have, {component: its dtype} for the others)."""
    found = {name: str(c.get("dtype")) for name, c in (pipeline.get("components") or {}).items()
             if isinstance(c, dict) and str(c.get("dtype")) in DTYPES}
    main = max(DTYPES, key=lambda d: list(found.values()).count(d)) if found else "float32"
    return main, {name: dtype for name, dtype in found.items() if dtype != main}


def reproduction(entry: dict[str, Any]) -> str:
    """A standalone script: the recorded call made through diffusers alone; exits 1 while the symptom shows."""
    settings, pipeline = entry.get("settings") or {}, entry.get("pipeline") or {}
    source, why = _source(pipeline, settings)
    main, others = _dtypes(pipeline)
    scheduler = str(((pipeline.get("components") or {}).get("scheduler") or {}).get("class") or "")
    device = str(settings.get("device") or "cpu")
    generator = str(((entry.get("environment") or {}).get("determinism") or {}).get("generator_device") or "cpu")
    call: dict[str, Any] = {"prompt": settings.get("prompt") or "", "num_inference_steps": settings.get("steps"),
                            "guidance_scale": settings.get("guidance"), "width": settings.get("width"),
                            "height": settings.get("height")}
    if settings.get("negative_prompt"):
        call["negative_prompt"] = settings["negative_prompt"]
    call = {k: v for k, v in call.items() if v is not None}
    label = str((entry.get("verdict") or {}).get("label") or "")
    check, meaning = SYMPTOMS.get(label, ("False", ""))
    exits = f"Exits 1 while {meaning}." if meaning else "Compare the saved image with the report's."
    lines = [
        '"""Reproduction for a diffusers issue, written by `ghostviewer export --issue`: needs only torch, diffusers',
        f'and numpy. Usage: python reproduce.py [--save image.png]. {exits}"""',
        "import sys",
        "",
        "import numpy as np",
        "import torch",
        f"from diffusers import DiffusionPipeline{', ' + scheduler if scheduler.isidentifier() else ''}",
        "",
        f"SOURCE = {source!r}  # {why}",
        f"pipe = DiffusionPipeline.from_pretrained(SOURCE, torch_dtype=torch.{main})",
    ]
    for name, dtype in sorted(others.items()):
        lines.append(f"pipe.{name}.to(torch.{dtype})")
    if scheduler.isidentifier():
        lines.append(f"pipe.scheduler = {scheduler}.from_config(pipe.scheduler.config)  # the run's scheduler")
    lines += [
        f"pipe.to({device!r})",
        f"generator = torch.Generator({generator!r}).manual_seed({int(settings.get('seed') or 0)})",
        "call = " + pprint.pformat(call, width=100, sort_dicts=False).replace("\n", "\n       "),
        'image = pipe(**call, generator=generator, output_type="np").images[0]',
        'print(f"min {np.nanmin(image):.4f} max {np.nanmax(image):.4f} mean {np.nanmean(image):.4f} "',
        '      f"NaN {int(np.isnan(image).sum())} Inf {int(np.isinf(image).sum())}")',
        'if "--save" in sys.argv:',
        "    from PIL import Image",
        "",
        '    rgb = (np.nan_to_num(image).clip(0, 1) * 255).round().astype(np.uint8)',
        '    Image.fromarray(rgb).save(sys.argv[sys.argv.index("--save") + 1])',
        f"sys.exit(1 if {check} else 0)",
    ]
    return "\n".join(lines) + "\n"


def _one_line(entry: dict[str, Any]) -> str:
    verdict = entry.get("verdict") or {}
    anomaly = entry.get("first_anomaly")
    pipeline = str((entry.get("pipeline") or {}).get("class") or "the pipeline")
    text = f"{pipeline}: the image is {verdict.get('label') or entry.get('status')}"
    if verdict.get("reason"):
        text += f" ({verdict['reason']})"
    if anomaly:
        where = f"denoising step {anomaly.get('step')}" if anomaly.get("step") is not None else anomaly.get("phase")
        text += f"; the first bad tensor is {anomaly.get('kind')} in `{anomaly.get('module')}` at {where}"
    return text + "."


def issue_markdown(manifest: dict[str, Any], env_text: str) -> str:
    """ISSUE.md for the bundle's first run (the others are named, with their verdicts)."""
    entry = manifest["runs"][0]
    settings = entry.get("settings") or {}
    injected = [*(settings.get("faults") or []), *(f"bypass {b}" for b in settings.get("bypass") or [])]
    lines = ["### Describe the bug", "", _one_line(entry), ""]
    if injected:
        lines += [f"Note: GhostViewer injected {', '.join(injected)} into this run (its ghost lab / a bypass); the "
                  "reproduction below makes the plain diffusers call, without them.", ""]
    lines += ["### Reproduction", "", "```python", reproduction(entry).rstrip(), "```", "",
              "### Logs", "", "```"]
    lines.append(f"verdict: {json.dumps(entry.get('verdict'), sort_keys=True)}")
    lines.append(f"first anomaly: {json.dumps(entry.get('first_anomaly'), sort_keys=True)}")
    lines.append(f"recorded steps: {entry.get('recorded_steps')}, status {entry.get('status')}, "
                 f"elapsed {entry.get('elapsed_s')} s")
    recorded = entry.get("environment") or {}
    lines.append(f"recorded on: {recorded.get('device')}, torch {recorded.get('torch')}, diffusers "
                 f"{recorded.get('diffusers')}, {recorded.get('os') or recorded.get('platform')}")
    lines += ["```", ""]
    if entry.get("image"):
        lines += [f"The final image is `{entry['image']}` in the GhostViewer bundle (attach it here); the bundle "
                  "holds the per-module statistics of every step (`ghostviewer inspect` reads it).", ""]
    for other in manifest["runs"][1:]:
        lines.append(f"- also in the bundle: run {other.get('run_id')}, seed {other.get('seed')}, verdict "
                     f"{(other.get('verdict') or {}).get('label') or other.get('status')}")
    lines += ["", "### System Info", "", env_text.strip(), "", "### Who can help?", "", ""]
    return "\n".join(lines)
