"""What the probe battery costs on the demo, how far the healthy demo stays from each tolerance, and (--broken)
which probes flag which broken copy of the demo (weights edited or the pipeline patched in memory).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_cost.py [--steps 10] [--broken]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diffusers.models.attention_processor import AttnProcessor2_0  # noqa: E402

from ghostviewer.engine.judge_model.probes import PROBE_NAMES  # noqa: E402
from ghostviewer.engine.loading.pipelines import load_pipeline  # noqa: E402
from ghostviewer.engine.loops.probe import run_probes  # noqa: E402
from ghostviewer.engine.loops.recorded import wrap_pipeline  # noqa: E402
from ghostviewer.record import RunRecord, StudyRecord  # noqa: E402


def dead_text_encoder(pipe: Any) -> None:
    with torch.no_grad():
        pipe.text_encoder.final_layer_norm.weight.zero_()
        pipe.text_encoder.final_layer_norm.bias.zero_()


def fixed_guidance(pipe: Any) -> None:
    class FixedGuidance(type(pipe)):
        @property
        def guidance_scale(self) -> float:
            return 7.5

    pipe.__class__ = FixedGuidance


def fixed_noise(pipe: Any) -> None:
    prepare = pipe.prepare_latents

    def patched(*args: Any, **kwargs: Any) -> Any:
        fixed = torch.Generator().manual_seed(1234)
        if len(args) > 6:  # StableDiffusionPipeline passes (batch, channels, h, w, dtype, device, generator, …)
            args = (*args[:6], fixed, *args[7:])
        else:
            kwargs["generator"] = fixed
        return prepare(*args, **kwargs)

    pipe.prepare_latents = patched


def unseeded_noise(pipe: Any) -> None:
    pipe.unet.mid_block.register_forward_hook(lambda _m, _i, out: out + 0.05 * torch.randn_like(out))


def fp16_scaled_conv(pipe: Any) -> None:
    with torch.no_grad():
        pipe.unet.mid_block.resnets[0].conv1.weight.mul_(1e4)
        pipe.unet.mid_block.resnets[0].conv1.bias.mul_(1e4)


def fused_kernel_bug(pipe: Any) -> None:
    class FusedKernelBug(AttnProcessor2_0):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            out = super().__call__(*args, **kwargs)
            return out * 1.5 if torch.backends.cuda.flash_sdp_enabled() else out

    pipe.unet.set_attn_processor(FusedKernelBug())


def noise_every_step(pipe: Any) -> None:
    step = pipe.scheduler.step

    def noisy(model_output: Any, timestep: Any, sample: Any, *args: Any, **kwargs: Any) -> Any:
        out = step(model_output, timestep, sample, *args, **kwargs)
        noise = torch.randn(sample.shape, generator=torch.Generator().manual_seed(int(timestep)))
        (out[0] if isinstance(out, tuple) else out.prev_sample).add_(0.6 * noise)
        return out

    pipe.scheduler.step = noisy


BROKEN: dict[str, Callable[[Any], None]] = {
    "zeroed text encoder output": dead_text_encoder, "guidance hard-coded": fixed_guidance,
    "generator ignored": fixed_noise, "unseeded noise in unet.mid_block": unseeded_noise,
    "conv scaled x1e4 (fp16 overflow)": fp16_scaled_conv, "fused attention kernel bug": fused_kernel_bug,
    "noise injected every step": noise_every_step,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--broken", action="store_true", help="also run the battery on each broken copy")
    args = parser.parse_args()
    loaded = load_pipeline("demo", device="cpu")
    with tempfile.TemporaryDirectory() as folder:
        run_probes(loaded, folder, steps=2, probes=("seed_effect",))  # warm-up: first-call costs out of the figure
        started = time.perf_counter()
        report = run_probes(loaded, folder, steps=args.steps)
        total = time.perf_counter() - started
        print(f"healthy demo, {args.steps} steps, {torch.get_num_threads()} thread(s): {report['runs']} runs in "
              f"{total:.2f} s; failed: {report['failed'] or 'none'}")
        for run in StudyRecord(report["study_dir"]).runs():
            print(f"  {run.role:<26} {RunRecord(run.run_dir).elapsed_s:6.2f} s")
        for finding in report["findings"]:
            evidence = finding["evidence"]
            print(f"  {finding['probe']:<18} ok={finding['ok']!s:<5} diff={evidence.get('mean_abs_diff')} "
                  f"tolerance={evidence.get('tolerance', evidence.get('rule'))} "
                  f"largest_module_departure={evidence.get('largest_module_departure')}")
        if args.broken:
            print("broken copies (a probe that flags it: X):")
            print(" " * 34 + " ".join(f"{n[:10]:>10}" for n in PROBE_NAMES))
            for label, breaks in BROKEN.items():
                copy = load_pipeline("demo", device="cpu").pipe
                breaks(copy)
                result = run_probes(wrap_pipeline(copy), folder, steps=args.steps)
                flags = {f["probe"]: not f["ok"] for f in result["findings"]}
                print(f"{label:<34}" + " ".join(f"{'X' if flags[n] else '.':>10}" for n in PROBE_NAMES))


if __name__ == "__main__":
    main()
