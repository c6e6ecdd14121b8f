"""ISSUE.md (`ghostviewer export --issue`): a report to paste into an upstream diffusers issue, in the sections of
diffusers' bug-report template — what goes wrong in one line, a reproduction that needs only diffusers (the
pipeline class, source, scheduler, dtypes, the call's keywords, the seed and its generator's device), the first
anomaly, the final image's place in the bundle, and the System Info block."""

from __future__ import annotations

import json
import keyword
import math
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
    if source.startswith("<in-memory") and not str(settings.get("source") or "<").startswith("<"):
        source = str(settings["source"])  # a watched pipeline object: the folder it was loaded from, when known
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


def _identifier(text: object) -> bool:
    """A name the script may write as code (a keyword, an attribute): a record edited to hold `x=__import__('os')…`
    as a keyword's name must not become a line of the script a user runs."""
    return isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)


def _comment(text: str) -> str:
    """Text for a `#` comment, on its one line: a line break would end the comment and start code."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return 1.0  # not a number (the run's own check refuses one): LoRA's default
    return value if math.isfinite(value) else 1.0


def _image(path: str, mode: str = "RGB") -> str:
    return f"Image.open({path!r}).convert({mode!r})"


def _own_call(entry: dict[str, Any]) -> tuple[dict[str, str], int]:
    """GhostViewer's own call as Python source per keyword (its input images: the bundle's copies), and its batch."""
    settings, folder = entry.get("settings") or {}, str(entry.get("folder") or f"runs/{entry.get('run_id')}")
    values = {"prompt": settings.get("prompt") or "", "negative_prompt": settings.get("negative_prompt") or None,
              "num_inference_steps": settings.get("steps"), "guidance_scale": settings.get("guidance"),
              "width": settings.get("width"), "height": settings.get("height"), "strength": settings.get("strength"),
              "controlnet_conditioning_scale": settings.get("controlnet_scale")}
    call = {key: repr(value) for key, value in values.items() if value is not None}
    images = {key: f"{folder}/images/input_{key}.png" for key in ("init_image", "mask", "control_image")
              if settings.get(key)}
    if "init_image" in images:
        call["image"] = _image(images["init_image"])
        if "control_image" in images:
            call["control_image"] = _image(images["control_image"])
    elif "control_image" in images:  # diffusers' ControlNet text-to-image call takes its control image as image
        call["image"] = _image(images["control_image"])
    if "mask" in images:
        call["mask_image"] = _image(images["mask"], "L")
    batch = int(settings.get("batch") or 1)
    if batch > 1:
        call["num_images_per_prompt"] = repr(batch)
    return call, batch


def _watched_call(entry: dict[str, Any], generator_device: str) -> tuple[dict[str, str], list[str], list[str]]:
    """A watched call's keywords as Python source (images: the bundle's copies; generators: their recorded seeds),
    the generators' lines, and what cannot be written here (tensors, callables)."""
    recorded = entry.get("call") or {}
    folder = str(entry.get("folder") or f"runs/{entry.get('run_id')}")
    seeds = [g.get("seed") if isinstance(g, dict) else None for g in recorded.get("generators") or []]
    devices = [str(g.get("device") or generator_device) if isinstance(g, dict) else generator_device
               for g in recorded.get("generators") or []]
    left_out: list[str] = [str(name) for name in recorded.get("unrecorded") or []]

    def source(value: Any, key: str) -> str | None:
        if isinstance(value, dict) and "$image" in value:
            return _image(f"{folder}/{value['$image']}", "L" if "mask" in key else "RGB")
        if isinstance(value, dict) and "$generator" in value:
            return f"generators[{int(value['$generator'])}]"
        if isinstance(value, dict) and any(str(k).startswith("$") for k in value):
            return None  # a tensor kept in the record (latents, prompt_embeds): not writable as source here
        if isinstance(value, list):
            parts = [source(v, key) for v in value]
            return None if any(p is None for p in parts) else "[" + ", ".join(parts) + "]"  # type: ignore[arg-type]
        return repr(value)

    call: dict[str, str] = {}
    for key, value in (recorded.get("kwargs") or {}).items():
        if key in ("output_type", "return_dict"):
            continue  # the script reads numpy images
        text = source(value, key) if _identifier(key) else None
        if text is None:
            left_out.append(key if _identifier(key) else repr(key))
        else:
            call[key] = text
    lines = [f"    torch.Generator({device!r}).manual_seed({int(seed or 0)}),"
             + ("" if seed is not None else "  # its seed was not recorded (a state set by hand)")
             for seed, device in zip(seeds, devices)]
    return call, ["generators = [", *lines, "]"] if lines else [], left_out


def reproduction(entry: dict[str, Any]) -> str:
    """A standalone script: the recorded call made through diffusers alone — its pipeline class, input images (the
    bundle's copies), batch and generators; exits 1 while the symptom shows in any of its images."""
    settings, pipeline = entry.get("settings") or {}, entry.get("pipeline") or {}
    source, why = _source(pipeline, settings)
    main, others = _dtypes(pipeline)
    scheduler = str(((pipeline.get("components") or {}).get("scheduler") or {}).get("class") or "")
    device = str(settings.get("device") or "cpu")
    generator = str(((entry.get("environment") or {}).get("determinism") or {}).get("generator_device") or "cpu")
    watched = bool(entry.get("watched") and entry.get("call"))
    cls = str((entry.get("call") or {}).get("pipeline_class") if watched else pipeline.get("class") or "")
    cls = cls.rsplit(".", 1)[-1]
    cls = cls if cls.isidentifier() and cls.endswith("Pipeline") else "DiffusionPipeline"
    if watched:
        call, generator_lines, left_out = _watched_call(entry, generator)
    else:
        call, _batch = _own_call(entry)
        generator_lines = [f"generator = torch.Generator({generator!r}).manual_seed({int(settings.get('seed') or 0)})"]
        call["generator"], left_out = "generator", []
    label = str((entry.get("verdict") or {}).get("label") or "")
    check, meaning = SYMPTOMS.get(label, ("False", ""))
    exits = f"Exits 1 while {meaning} (in any of the call's images)." if meaning else \
        "Compare the saved image with the report's."
    imports = sorted({cls, *([scheduler] if scheduler.isidentifier() else []),
                      *(["ControlNetModel"] if settings.get("controlnet") and not watched else [])})
    lines = [
        '"""Reproduction for a diffusers issue, written by `ghostviewer export --issue`: needs only torch, diffusers,',
        "numpy and pillow; run it where the bundle is unzipped.",
        f'Usage: python reproduce.py [--save image.png]. {exits}"""',
        "import inspect",
        "import sys",
        "",
        "import numpy as np",
        "import torch",
        f"from diffusers import {', '.join(imports)}",
        "from PIL import Image",
        "",
        f"SOURCE = {source!r}  # {why}",
    ]
    extra = ""
    if settings.get("controlnet") and not watched:
        lines.append(f"controlnet = ControlNetModel.from_pretrained({str(settings['controlnet'])!r}, "
                     f"torch_dtype=torch.{main})  # the run's --controlnet")
        extra = ", controlnet=controlnet"
    lines.append(f"pipe = {cls}.from_pretrained(SOURCE, torch_dtype=torch.{main}{extra})")
    for name, dtype in sorted(others.items()):
        if _identifier(name):
            lines.append(f"pipe.{name}.to(torch.{dtype})")
    if scheduler.isidentifier():
        lines.append(f"pipe.scheduler = {scheduler}.from_config(pipe.scheduler.config)  # the run's scheduler")
    for number, adapter in enumerate([] if watched else settings.get("adapters") or []):
        path, _, scale = str(adapter).rpartition(":") if ":" in str(adapter) else (str(adapter), "", "1.0")
        lines.append(f"pipe.load_lora_weights({path!r}, adapter_name='lora{number}')"
                     f"  # scale {_comment(scale or '1.0')}")
    if settings.get("adapters") and not watched:
        scales = [str(a).rpartition(":")[2] if ":" in str(a) else "1.0" for a in settings["adapters"]]
        names = [f"lora{i}" for i in range(len(scales))]
        lines.append(f"pipe.set_adapters({names!r}, {[_scale(x) for x in scales]!r})")
        if settings.get("fuse_lora"):
            lines.append("pipe.fuse_lora()")
    lines += [f"pipe.to({device!r})", *generator_lines, "call = dict("]
    lines += [f"    {key}={value}," for key, value in call.items()]
    lines += [")"]
    if left_out:
        lines.append(f"# not written here (kept in the GhostViewer record only): {_comment(', '.join(left_out))}")
    lines += [
        "accepted = inspect.signature(pipe.__call__).parameters  # e.g. img2img takes no width/height",
        "call = {key: value for key, value in call.items() if key in accepted}",
        'images = pipe(**call, output_type="np").images',
        "bad = False",
        "for number, image in enumerate(images, 1):",
        '    print(f"image {number}: min {np.nanmin(image):.4f} max {np.nanmax(image):.4f} "',
        '          f"mean {np.nanmean(image):.4f} NaN {int(np.isnan(image).sum())} Inf {int(np.isinf(image).sum())}")',
        f"    bad = bad or bool({check})",
        'if "--save" in sys.argv:',
        '    rgb = (np.nan_to_num(images[0]).clip(0, 1) * 255).round().astype(np.uint8)',
        '    Image.fromarray(rgb).save(sys.argv[sys.argv.index("--save") + 1])',
        "sys.exit(1 if bad else 0)",
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
