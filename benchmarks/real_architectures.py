"""Tracing on real architectures (issue 31): SD 1.5, SDXL, SD3-medium and Flux-schnell built from their published
configs with random weights (benchmarks/architectures.py; not part of the test suite).

    .venv/bin/python benchmarks/real_architectures.py --arch sd15 --size 256 --steps 3 --budget-s 900
    .venv/bin/python benchmarks/real_architectures.py --arch sd3 --arch flux --size 256 --steps 2 --rounds 3
    .venv/bin/python benchmarks/real_architectures.py --gpu-suite          # one H200 run, ≤ 8 min (gpu_all.sh)

Per architecture, each in its own process: the folder is built (or --source DIR is used), loaded as a user's
folder, and untraced runs (GhostViewer's own call, without the tracer or the record) are interleaved round-robin with
traced runs at block depth (and leaf depth with --leaf; on by default for sd15), the order rotating each round. Printed:
median wall and CPU time (time.process_time, all threads) per variant, the ratio of the medians and the single-round
ratios' median and range, bytes recorded per step, statistics rows per step, peak host memory per variant (VmHWM,
reset before each run) and on CUDA the peak device memory; then, in a process without torch, as the window does it:
the record read (RunRecord, steps, the heat map's grid), the time from opening the run in the window (offscreen, no
engine) to its timeline and heat map drawn, and the heat map's redraw. With --device cuda: a run on a CUDA
generator and one on a CPU generator, each replayed twice (`ghostviewer replay`: bit-identical or the first
divergence). The load average is printed with each figure: on a shared machine, the CPU-time ratio matters most.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROMPT = "a red circle on a blue background, top left"
RESULT = "RESULT "


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def reset_peak_rss() -> bool:
    """Linux: reset VmHWM (writing 5 to clear_refs) so the next reading is this run's peak."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


# -- the measurement (a torch process per architecture) ----------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import replace

    import torch

    from ghostviewer.engine.loading.pipelines import load_pipeline
    from ghostviewer.engine.run.runner import build_call, execute_run, prepare_settings
    from ghostviewer.record import RunRecord
    from ghostviewer.spec import RunSpec

    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    started = time.perf_counter()
    # The engine loads with low_cpu_mem_usage=False: diffusers allocates each model in torch's default dtype before
    # reading the weights in, so an SDXL U-Net read as bfloat16 first takes 10 GiB as float32. Half precision
    # parameters from the start keep the peak at the folder's size (the tracing measured is the same).
    half = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(args.dtype or "")
    before = torch.get_default_dtype()
    torch.set_default_dtype(half or before)
    try:
        loaded = load_pipeline(str(args.source), device=args.device, dtype=args.dtype)
    finally:
        torch.set_default_dtype(before)
    load_s = time.perf_counter() - started
    spec = RunSpec(prompt=PROMPT, steps=args.steps, width=args.size, height=args.size, seed=0,
                   source=str(args.source), device=args.device)
    runs = Path(tempfile.mkdtemp(prefix="gv-real-runs-", dir=args.runs_parent))

    def untraced(steps: int) -> None:
        resolved, _ = prepare_settings(loaded, replace(spec, steps=steps))
        with torch.inference_mode():
            build_call(loaded, resolved).invoke({})

    def traced(steps: int, depth: str) -> Path:
        result = execute_run(loaded, replace(spec, steps=steps, trace_depth=depth), runs)
        return Path(result["run_dir"])

    variants: dict[str, Any] = {"untraced": lambda steps: untraced(steps),
                                "block": lambda steps: traced(steps, "block")}
    if args.leaf:
        variants["leaf"] = lambda steps: traced(steps, "leaf")
    for variant in variants.values():  # warm-up: oneDNN's kernels, the allocator, the prompt cache
        made = variant(args.warmup_steps)
        if isinstance(made, Path):
            shutil.rmtree(made, ignore_errors=True)
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    peak: dict[str, float] = {}
    device_peak: dict[str, float] = {}
    last_run: dict[str, Path] = {}
    loads: list[list[float]] = []
    names = list(variants)
    rounds_started = time.perf_counter()
    for index in range(args.rounds):
        round_started = time.perf_counter()
        order = names[index % len(names):] + names[:index % len(names)]  # rotate: no variant always first
        for name in order:
            reset_peak_rss()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            sync()
            w0, c0 = time.perf_counter(), time.process_time()
            made = variants[name](args.steps)
            sync()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
            if (rss := peak_rss_mib()) is not None:
                peak[name] = max(peak.get(name, 0.0), rss)
            if cuda:
                device_peak[name] = max(device_peak.get(name, 0.0), torch.cuda.max_memory_allocated() / 2**20)
            if isinstance(made, Path):
                if name in last_run:
                    shutil.rmtree(last_run[name], ignore_errors=True)
                last_run[name] = made
        loads.append(load())
        round_s = time.perf_counter() - round_started
        print(f"  round {index + 1}: " + ", ".join(f"{n} {wall[n][-1]:.2f} s wall / {cpu[n][-1]:.2f} s cpu"
                                                   for n in names) + f"; load {loads[-1]}", file=sys.stderr,
              flush=True)
        if time.perf_counter() - rounds_started + round_s > args.budget_s:
            break
    figures: dict[str, Any] = {}
    for name in names:
        entry: dict[str, Any] = {
            "wall_median_s": round(statistics.median(wall[name]), 3),
            "cpu_median_s": round(statistics.median(cpu[name]), 3),
            "peak_host_mib": peak.get(name),
        }
        if cuda:
            entry["peak_device_mib"] = round(device_peak[name], 1)
        if name != "untraced":
            for kind, times in (("wall", wall), ("cpu", cpu)):
                ratios = [t / u for t, u in zip(times[name], times["untraced"], strict=True)]
                entry[f"{kind}_ratio_of_medians"] = round(statistics.median(times[name]) /
                                                          statistics.median(times["untraced"]), 3)
                entry[f"{kind}_ratio_round_median"] = round(statistics.median(ratios), 3)
                entry[f"{kind}_ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
            run_dir = last_run[name]
            record = RunRecord(run_dir)
            size = folder_bytes(run_dir)
            entry.update({"bytes_per_step": round(size / args.steps), "record_bytes": size,
                          "stats_rows_per_step": len(record.stats(phase="denoise", step=args.steps - 1)),
                          "stats_rows": len(record.stats()), "verdict": (record.verdict or {}).get("label"),
                          "run_dir": str(run_dir)})
        figures[name] = entry
    result: dict[str, Any] = {
        "architecture": args.arch, "size": args.size, "steps": args.steps, "device": args.device,
        "dtype": args.dtype or "as saved", "rounds": len(wall["untraced"]), "torch_threads": torch.get_num_threads(),
        "load_s": round(load_s, 1), "load_average_per_round": loads, "variants": figures,
        "runs_dir": str(runs),
    }
    if cuda:
        result["gpu"] = torch.cuda.get_device_name()
        result["replay"] = replay_check(loaded, spec, runs)
    return result


def replay_check(loaded: Any, spec: Any, runs: Path) -> dict[str, Any]:
    """A run on each generator device, replayed twice in this process: bit-identical, or where it diverged."""
    from dataclasses import replace

    from ghostviewer.engine.loops.replay import replay_run
    from ghostviewer.engine.run.runner import execute_run

    checks = {}
    for generator in ("cuda", "cpu"):
        run = execute_run(loaded, replace(spec, generator_device=generator), runs)
        report = replay_run(run["run_dir"], times=2, pipeline=loaded.pipe, runs_dir=runs)
        checks[generator] = {"reproduced": report["reproduced"], "summary": report["summary"],
                             "first_divergence": report["first_divergence"]}
    return checks


# -- the window (a process without torch, as the GUI is) ---------------------------------------------------------


def open_in_window(run_dir: Path, settings_dir: Path) -> dict[str, Any]:
    from PySide6.QtWidgets import QApplication

    from benchmarks.many_runs import spin
    from ghostviewer.gui.app import application, create_window
    from ghostviewer.gui.app_settings import AppSettings
    from ghostviewer.gui.models.stat_grid_model import read_grid
    from ghostviewer.record import RunRecord

    started = time.perf_counter()
    record = RunRecord(run_dir)
    steps = record.steps()
    grid, _cell = read_grid(record) or (None, None)
    read_s = time.perf_counter() - started
    app = application()
    window = create_window(AppSettings(settings_dir / "settings.ini"), dialogs=False)
    window.resize(1366, 768)
    window.show()
    next(d for d in window.docks if d.windowTitle() == "Heat map").raise_()
    QApplication.processEvents()
    spin(0.5)
    heatmap, timeline = window.heatmap, window.state.timeline
    started = time.perf_counter()
    window.state.opener.open_run(run_dir)
    spin(60, lambda: timeline.count > 0 and heatmap.grid is not None and not heatmap.loading)
    heatmap.plot.repaint()
    open_s = time.perf_counter() - started
    draws = []
    for _ in range(5):
        t = time.perf_counter()
        heatmap._draw()
        heatmap.plot.repaint()
        draws.append(time.perf_counter() - t)
    figures = {"record_read_s": round(read_s, 3), "record_steps": len(steps),
               "grid_modules": len(grid.modules) if grid is not None else 0,
               "grid_columns": len(grid.columns) if grid is not None else 0,
               "open_to_heatmap_s": round(open_s, 3), "heatmap_draw_ms": round(1000 * statistics.median(draws), 1),
               "heatmap_drawn": heatmap.grid is not None}
    window.state.controller.shutdown()
    window.close()
    app.processEvents()
    return figures


# -- orchestration ------------------------------------------------------------------------------------------------


def child(arguments: list[str], timeout_s: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not env.get("DISPLAY"):
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
    done = subprocess.run([sys.executable, __file__, *arguments], stdout=subprocess.PIPE, text=True, env=env,
                          timeout=timeout_s, check=False)
    line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith(RESULT)), None)
    if line is None:
        return {"error": f"exit {done.returncode}: {done.stdout[-2000:]}"}
    return json.loads(line[len(RESULT):])


def one_architecture(args: argparse.Namespace, arch: str, work: Path) -> dict[str, Any]:
    build: dict[str, Any] = {}
    source = args.source
    if source is None:
        source = (args.keep or work) / arch
        if not (source / "model_index.json").is_file():
            command = [str(HERE / "architectures.py"), arch, "--keep", str(source),
                       "--device", args.device if args.device == "cuda" else "cpu"]
            if args.build_dtype:
                command += ["--dtype", args.build_dtype]
            started = time.perf_counter()
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            done = subprocess.run([sys.executable, *command], check=False, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, timeout=args.timeout_s)
            if done.returncode != 0:  # the next job still runs
                return {"error": f"building {arch} failed: {done.stderr.strip().splitlines()[-1:]}"}
            build = {"build_s": round(time.perf_counter() - started, 1)}
    info_file = Path(source) / "architecture.json"
    if info_file.is_file():
        info = json.loads(info_file.read_text())
        build.update({k: info[k] for k in ("label", "scaled", "total_parameters", "bytes", "dtype") if k in info})
    dtype = args.dtype or build.get("dtype")  # by default, the dtype the folder was built in
    leaf = args.leaf if args.leaf is not None else arch == "sd15"
    command = ["--measure", "--arch", arch, "--source", str(source), "--size", str(args.size), "--steps",
               str(args.steps), "--rounds", str(args.rounds), "--budget-s", str(args.budget_s), "--device",
               args.device, "--warmup-steps", str(args.warmup_steps), "--runs-parent", str(work)]
    command += ["--dtype", dtype] if dtype else []
    command += ["--leaf"] if leaf else ["--no-leaf"]
    result = {**build, "load_before": load(), **child(command, args.timeout_s), "load_after": load()}
    window: dict[str, Any] = {}
    for name, entry in result.get("variants", {}).items():
        if "run_dir" in entry and args.window:
            settings = work / f"settings-{name}"
            settings.mkdir(exist_ok=True)
            window[name] = child(["--open-run", entry["run_dir"], "--settings-dir", str(settings)], 300)
    result["window"] = window
    if "runs_dir" in result:
        shutil.rmtree(result["runs_dir"], ignore_errors=True)
    return result


def ratios(v: dict[str, Any], kind: str) -> str:
    low, high = v[f"{kind}_ratio_range"]
    return (f"{v[f'{kind}_median_s']:.2f} s {kind} ({v[f'{kind}_ratio_of_medians']:.3f}×; rounds "
            f"{v[f'{kind}_ratio_round_median']:.3f}×, {low:.3f}–{high:.3f})")


def summary(result: dict[str, Any]) -> str:
    if "variants" not in result:
        return f"{result.get('architecture', '?')}: {result.get('error')}"
    lines = [f"{result['architecture']} ({result.get('label', '')}; scaled: {result.get('scaled', '?')}) "
             f"{result['size']} px, {result['steps']} steps, {result['device']} {result['dtype']}, "
             f"{result['rounds']} interleaved rounds; load average {result['load_before']} → {result['load_after']}"]
    base = result["variants"]["untraced"]
    lines.append(f"  untraced   {base['wall_median_s']:.2f} s wall, {base['cpu_median_s']:.2f} s cpu, "
                 f"peak host {base['peak_host_mib']} MiB" + (f", device {base['peak_device_mib']} MiB"
                                                             if "peak_device_mib" in base else ""))
    for name, v in result["variants"].items():
        if name == "untraced":
            continue
        window = result.get("window", {}).get(name, {})
        lines.append(f"  {name:<10} {ratios(v, 'wall')}, {ratios(v, 'cpu')}; "
                     f"{v['bytes_per_step'] / 1024:.0f} KiB/step, "
                     f"{v['stats_rows_per_step']} stats rows/step, peak host {v['peak_host_mib']} MiB"
                     + (f", device {v['peak_device_mib']} MiB" if "peak_device_mib" in v else "")
                     + (f"; window: read {window.get('record_read_s')} s, open→heat map "
                        f"{window.get('open_to_heatmap_s')} s, heat map draw {window.get('heatmap_draw_ms')} ms "
                        f"({window.get('grid_modules')} rows)" if "open_to_heatmap_s" in window
                        else f"; window: {window.get('error', 'not measured')}"))
    if "replay" in result:
        lines.append("  replay: " + ", ".join(f"{g} generator {c['summary']}" for g, c in result["replay"].items()))
    return "\n".join(lines)


GPU_SUITE: list[dict[str, Any]] = [  # ≤ 6 min on one H200 (gpu_all.sh adds the demo's 2): most wanted first
    {"arch": "sd15", "size": 512, "steps": 20, "dtype": "float16", "leaf": True, "rounds": 7, "budget_s": 60},
    {"arch": "sdxl", "size": 1024, "steps": 20, "dtype": "float16", "leaf": False, "rounds": 5, "budget_s": 60},
    {"arch": "sd15", "size": 512, "steps": 20, "dtype": "bfloat16", "leaf": False, "rounds": 5, "budget_s": 30},
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--arch", action="append", help="sd15, sdxl, sd3, flux (repeatable; default sd15)")
    parser.add_argument("--source", type=Path, help="an architecture's folder built before (one --arch)")
    parser.add_argument("--keep", type=Path, help="build the folders here and keep them")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=99, help="at most this many interleaved rounds")
    parser.add_argument("--budget-s", type=float, default=900.0, help="no new round once this is spent")
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), help="load in this dtype")
    parser.add_argument("--build-dtype", choices=("float32", "float16", "bfloat16"),
                        help="build in this dtype (default: the architecture's, architectures.py)")
    parser.add_argument("--leaf", action=argparse.BooleanOptionalAction, default=None,
                        help="also trace at leaf depth (default: for sd15 only)")
    parser.add_argument("--window", action=argparse.BooleanOptionalAction, default=True,
                        help="open the traced runs in the window (offscreen)")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per child process")
    parser.add_argument("--gpu-suite", action="store_true", help="the GPU figures of issue 31 in one go")
    parser.add_argument("--json", type=Path, help="write every result here (JSON lines)")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runs-parent", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--open-run", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--settings-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.open_run is not None:
        print(RESULT + json.dumps(open_in_window(args.open_run, args.settings_dir)), flush=True)
        return 0
    if args.measure:
        args.arch = args.arch[0]
        print(RESULT + json.dumps(measure(args)), flush=True)
        return 0
    jobs = [dict(job) for job in GPU_SUITE] if args.gpu_suite else [{"arch": a} for a in (args.arch or ["sd15"])]
    if args.gpu_suite:
        args.device, args.build_dtype = "cuda", "float16"
    if args.source is not None and len(jobs) != 1:
        parser.error("--source takes one --arch")
    work = Path(tempfile.mkdtemp(prefix="gv-real-arch-"))
    try:
        for index, job in enumerate(jobs):
            for done in {j["arch"] for j in jobs[:index]} - {j["arch"] for j in jobs[index:]}:
                shutil.rmtree(work / done, ignore_errors=True)  # a built folder no later job needs
            for key, value in job.items():
                if key != "arch":
                    setattr(args, key, value)
            result = {"architecture": job["arch"], **one_architecture(args, job["arch"], work)}
            print(summary(result), flush=True)
            if args.json:
                with args.json.open("a") as out:
                    out.write(json.dumps(result) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
