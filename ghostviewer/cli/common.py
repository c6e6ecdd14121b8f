"""What every `ghostviewer` command shares: exit codes, the parser that turns argparse's exits into one-line usage
errors, the source options, the run-spec options (built from spec/run_spec.py: one default, one name per setting),
JSON output and the run summary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from typing import Any

from ghostviewer.spec import DEFAULTS
from ghostviewer.spec.run_spec import ATTENTION_BACKENDS, GENERATOR_DEVICES, TRACE_DEPTHS

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPE_HELP = "float32|float16|bfloat16, or per component: float32,vae=float16"
GUIDANCE_HELP = "default: the pipeline family's usual guidance (7.5 for SD)"

# The run spec's settings as the command line spells them: flag -> (RunSpec field, argparse keywords). The
# default of each is the spec's own (spec.DEFAULTS); the parsed value lands under the field's name.
SPEC_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "--negative": ("negative_prompt", {"metavar": "TEXT"}),
    "--seed": ("seed", {"type": int, "help": "-1 picks a random seed (and records it)"}),
    "--steps": ("steps", {"type": int}),
    "--guidance": ("guidance", {"type": float, "help": GUIDANCE_HELP}),
    "--width": ("width", {"type": int}),
    "--height": ("height", {"type": int}),
    "--scheduler": ("scheduler", {}),
    "--dtype": ("dtype", {"help": DTYPE_HELP}),
    "--device": ("device", {"choices": DEVICES}),
    "--bypass": ("bypass", {"action": "append", "metavar": "MODULE[@START:END]"}),
    "--capture": ("capture", {"action": "append", "metavar": "PATTERN"}),
    "--fault": ("faults", {"action": "append", "metavar": "NAME"}),
    "--trace-depth": ("trace_depth", {"choices": TRACE_DEPTHS}),
    "--capture-attention": ("capture_attention", {"action": "store_true",
                                                  "help": "record cross-attention maps per token"}),
    "--init-image": ("init_image", {"metavar": "FILE", "help": "img2img from this image (inpaint with --mask)"}),
    "--strength": ("strength", {"type": float, "help": "img2img/inpaint: how much to repaint, in (0, 1] "
                                "(default: diffusers' 0.8 for img2img, 1.0 for inpaint)"}),
    "--mask": ("mask", {"metavar": "FILE", "help": "inpaint: white repaints, black keeps; the init image's size"}),
    "--batch": ("batch", {"type": int, "metavar": "N", "help": "images per prompt (num_images_per_prompt)"}),
    "--generator-device": ("generator_device", {"choices": GENERATOR_DEVICES,
                                                "help": "where the seed's noise is drawn (default cpu)"}),
    "--control-image": ("control_image", {"metavar": "IMG", "help": "a ControlNet run following this image (the "
                                          "pipeline's own ControlNet, or --controlnet); with --init-image: "
                                          "ControlNet img2img (inpaint with --mask)"}),
    "--controlnet": ("controlnet", {"metavar": "DIR", "help": "a saved ControlNetModel's folder, or a pipeline "
                                    "folder with a controlnet/ component"}),
    "--controlnet-scale": ("controlnet_scale", {"type": float, "metavar": "X", "help": "the ControlNet's "
                                                "conditioning scale (default: diffusers' 1.0)"}),
    "--lora": ("adapters", {"action": "append", "metavar": "FILE[:SCALE]", "help": "a LoRA (.safetensors) loaded for "
                            "the run at SCALE (default 1.0) and unloaded after it; repeatable"}),
    "--fuse-lora": ("fuse_lora", {"action": "store_true", "help": "fuse the LoRAs into the weights for the run "
                                  "(diffusers' fuse_lora with safe_fusing); unfused after it"}),
    "--attention-backend": ("attention_backend", {"choices": ATTENTION_BACKENDS, "help": "diffusers' attention "
                                                  "processor on every Attention module (default: the pipeline's own)"}),
}

# Other spellings an option answers to: CONTRACT.md writes the ControlNet scale as --control-scale.
ALIASES: dict[str, tuple[str, ...]] = {"--controlnet-scale": ("--control-scale",)}


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's exits are usage errors: status 2, one line
        raise UsageError(f"{message} (see '{self.prog} --help')")

def add_source(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument(
        "--pipeline",
        default=None if required else "demo",
        required=required,
        metavar="SRC",
        help="'demo', a diffusers folder, a .safetensors checkpoint or a cached hub id",
    )
    p.add_argument("--allow-pickle", action="store_true", help="allow .bin/.ckpt/.pt weights (they can run code)")
    p.add_argument(
        "--config",
        metavar="DIR",
        help="for a single-file checkpoint: a diffusers folder or cached hub "
        "id of the same model family that supplies its configs, tokenizers and scheduler",
    )

def add_spec_options(parser: argparse.ArgumentParser, flags: Iterable[str]) -> None:
    """The named run-spec options, with the spec's defaults (a list option starts empty)."""
    for flag in flags:
        field, keywords = SPEC_OPTIONS[flag]
        default = getattr(DEFAULTS, field)
        if keywords.get("action") == "append":
            default = list(default)
        elif keywords.get("action") == "store_true":
            default = bool(default)
        parser.add_argument(flag, *ALIASES.get(flag, ()), dest=field, default=default, **keywords)


def spec_values(args: argparse.Namespace, flags: Iterable[str]) -> dict[str, Any]:
    """{RunSpec field: value} of the named options as parsed."""
    return {SPEC_OPTIONS[flag][0]: getattr(args, SPEC_OPTIONS[flag][0]) for flag in flags}


def flag_of(field: str) -> str:
    """The option that sets a RunSpec field ('faults' -> '--fault'), for messages."""
    return next((flag for flag, (name, _) in SPEC_OPTIONS.items() if name == field), f"--{field.replace('_', '-')}")


def print_json(data: Any) -> None:
    """One strict JSON document on stdout. A value that JSON cannot hold (an infinite guidance or a NaN score that
    a record holds, made by hand or by another version) is written as null rather than crashing the command."""
    from ghostviewer.record.schema import jsonable

    sys.stdout.write(json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n")

def progress_printer(quiet: bool):
    started = time.perf_counter()

    def show(event: dict[str, Any]) -> None:
        if quiet or event.get("event") != "step":
            return
        step, steps = event["step"] + 1, event["steps"]
        bar = "#" * int(20 * step / steps)
        sys.stderr.write(f"\r  step {step:>3}/{steps} [{bar:<20}] {time.perf_counter() - started:5.1f}s")
        if step == steps:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show

def is_problem(result: dict[str, Any]) -> bool:
    verdict = result.get("verdict") or {}
    return verdict.get("label", "ok") != "ok" or result.get("first_anomaly") is not None

def describe_run(result: dict[str, Any]) -> str:
    verdict = result.get("verdict") or {}
    lines = [
        f"verdict: {verdict.get('label', result.get('status', '?'))}"
        + (f" ({verdict['reason']})" if verdict.get("reason") else ""),
        f"image:   {result.get('image')}",
        f"run:     {result['run_dir']}",
    ]
    anomaly = result.get("first_anomaly")
    if anomaly:
        where = f"step {anomaly['step']}" if anomaly.get("step") is not None else anomaly["phase"]
        z = anomaly.get("z")
        drift = f", {anomaly.get('stat')} {z:+.1f} robust z-units off its healthy range" if z is not None else ""
        lines.append(f"first anomaly: {anomaly['kind']} in {anomaly['module']} ({where}{drift})")
        cause = anomaly.get("likely_cause")
        if cause:
            lines.append(f"likely cause:  {cause.get('summary') or cause.get('kind')}")
    return "\n".join(lines)

def printable(value: object) -> str:
    """Text with control characters (terminal escape codes, carriage returns) shown as escapes, not obeyed."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))

