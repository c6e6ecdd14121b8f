"""The probe battery as a `probe` study (`ghostviewer probe`): each probe compares the pipeline with itself under two
settings (engine/judge_model/probes.py), and each of its runs is an ordinary traced, judged run kept in the study
(role: the run's part, e.g. "prompt_effect.other"), so the history shows the battery as one row and every verdict
has its images as evidence.

Runs are shared between probes: the base run (prompt, seed, S steps) is the first half of every comparison, so
the battery is 12 runs — base, other prompt, negative prompt, other guidance, other seed, base again, float16,
SDPA math kernel, a batch of two (with its two images made alone), one word traced to every leaf, S/2 and 2S steps
(and on a CPU a float32 run of 2 steps, float16's pair there; and the base prompt at leaf depth when the one word
shows a failure, to tell a short prompt's fault from one of every prompt).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ghostviewer.analysis import probe_rules as rules
from ghostviewer.analysis.compare import compare_runs
from ghostviewer.engine.families import adapter_for
from ghostviewer.engine.judge_model.probes import (
    BY_NAME,
    DEFAULT_PROMPT,
    FALLBACK_PROMPT,
    OTHER_PROMPT,
    PROBE_NAMES,
    short_prompt,
)
from ghostviewer.engine.loading.pipelines import LoadedPipeline, load_pipeline
from ghostviewer.engine.loops.recorded import wrap_pipeline
from ghostviewer.engine.run.batch_variance import KINDS as BATCH_KINDS
from ghostviewer.engine.run.runner import CancelToken, RunFailed, execute_run
from ghostviewer.record import RecordError, RunRecord, StudyWriter
from ghostviewer.spec import RunSpec

ProgressFn = Callable[[dict[str, Any]], None]
DEFAULT_STEPS = 10  # enough for the demo's DDIM to draw its shapes; convergence runs S/2, S and 2S steps
# float16 on a CPU runs ~30x slower than float32 (the demo's VAE decode alone takes ~2 s), so there the pair is
# compared at 2 steps (a float32 run of 2 steps added); an overflow shows from the first step, and the decode —
# where the classic float16 overflow lives — runs in full either way.
FP16_CPU_STEPS = 2


def float16_copy(loaded: LoadedPipeline, allow_pickle: bool = False, config: Any = None) -> LoadedPipeline:
    """The same pipeline in float16: loaded again from its source, or a converted copy of an object in memory
    (the user's own object is left as it is)."""
    if loaded.source_kind == "memory":
        return wrap_pipeline(copy.deepcopy(loaded.pipe).to(torch.float16))
    return load_pipeline(loaded.source, device=loaded.device, dtype="float16", allow_pickle=allow_pickle,
                         config=config)


def math_attention() -> AbstractContextManager[Any]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


class _Battery:
    """The study's runs, each made once and kept by its key."""

    def __init__(self, loaded: LoadedPipeline, study: StudyWriter, cancel: CancelToken | None,
                 emit: ProgressFn) -> None:
        self.loaded, self.study, self.cancel, self.emit = loaded, study, cancel, emit
        self.results: dict[str, dict[str, Any]] = {}

    def run(self, key: str, spec: RunSpec, loaded: LoadedPipeline | None = None,
            context: Callable[[], AbstractContextManager[Any]] = nullcontext, **options: Any) -> dict[str, Any]:
        if key in self.results:
            return self.results[key]
        self.emit({"event": "probe_run", "run": key, "done": len(self.results)})
        try:
            with context():
                result = execute_run(loaded or self.loaded, spec, self.study.runs_dir, self.cancel, **options)
        except RunFailed as exc:
            result = {"run_dir": str(exc.run_dir), "status": "failed", "error": str(exc), "image": None}
        self.results[key] = result
        self.study.add_run(result["run_dir"], {"probe_run": key}, role=key, summary=result)
        self.study.set_progress(len(self.results))
        return result


def _image(result: dict[str, Any]) -> np.ndarray | None:
    path = result.get("image")
    if not path:
        return None
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    except OSError:
        return None


def _label(result: dict[str, Any]) -> str | None:
    return (result.get("verdict") or {}).get("label") or result.get("status")


def _evidence(a: dict[str, Any], b: dict[str, Any], **extra: Any) -> dict[str, Any]:
    difference = rules.image_difference(_image(a), _image(b))
    return {"runs": [a["run_dir"], b["run_dir"]], "images": [a.get("image"), b.get("image")],
            "verdicts": [_label(a), _label(b)],
            "mean_abs_diff": None if difference is None else round(difference, 6), **extra}


def _finding(name: str, ok: bool, evidence: dict[str, Any], skipped: str | None = None) -> dict[str, Any]:
    probe = BY_NAME[name]
    failed = [r for r, label in zip(evidence.get("runs", []), evidence.get("verdicts", []), strict=False)
              if label == "failed"]
    finding = None if ok else probe.finding
    if failed:  # a run that crashed answers nothing: said as such, not as the probe's finding
        ok, finding = False, f"could not tell: a run failed ({Path(failed[0]).name}; see its log)"
    found = {"probe": name, "ok": ok, "finding": finding, "evidence": evidence,
             "bug_class": probe.bug_class, "compared": probe.question}
    if skipped:
        found["skipped"] = skipped
    return found


def _effect(name: str, a: dict[str, Any], b: dict[str, Any], **extra: Any) -> dict[str, Any]:
    evidence = _evidence(a, b, tolerance=rules.NO_EFFECT, **extra)
    difference = evidence["mean_abs_diff"]
    return _finding(name, difference is not None and difference >= rules.NO_EFFECT, evidence)


def _rows(result: dict[str, Any]) -> list[Any]:
    try:
        return RunRecord(result["run_dir"]).stats()
    except RecordError:
        return []


def _agreement(name: str, a: dict[str, Any], b: dict[str, Any], tolerance: float, **extra: Any) -> dict[str, Any]:
    """Same verdict and images within `tolerance`; where they part: the first module beyond MODULE_DEPARTURE."""
    evidence = _evidence(a, b, tolerance=tolerance, **extra)
    difference = evidence["mean_abs_diff"]
    ok = difference is not None and difference <= tolerance and evidence["verdicts"][0] == evidence["verdicts"][1]
    rows_a, rows_b = _rows(a), _rows(b)
    evidence["largest_module_departure"] = round(rules.largest_departure(rows_a, rows_b), 6)
    evidence["module_tolerance"] = rules.MODULE_DEPARTURE
    evidence["first_departure"] = None if ok else rules.first_departure(rows_a, rows_b)
    return _finding(name, ok, evidence)


def run_probes(
    loaded: LoadedPipeline,
    runs_dir: str | Path,
    *,
    prompt: str | None = None,
    seed: int = 0,
    steps: int = DEFAULT_STEPS,
    probes: tuple[str, ...] | None = None,
    allow_pickle: bool = False,
    config: Any = None,
    on_progress: ProgressFn | None = None,
    cancel: CancelToken | None = None,
) -> dict[str, Any]:
    """CONTRACT's `probe` dict: {"findings": [{"probe", "ok", "finding", "evidence", "bug_class", …}, …], "ok",
    "failed", "study_dir", "runs", "elapsed_s"}; `probes` picks some of PROBE_NAMES (default: all)."""
    started = time.perf_counter()
    chosen = tuple(probes or PROBE_NAMES)
    unknown = [p for p in chosen if p not in PROBE_NAMES]
    if unknown:
        from ghostviewer.engine.errors import GhostError

        raise GhostError(f"unknown probe {unknown[0]!r}; known: {', '.join(PROBE_NAMES)}")
    text = prompt if prompt is not None else DEFAULT_PROMPT
    other = OTHER_PROMPT if text.strip() != OTHER_PROMPT else FALLBACK_PROMPT
    guidance = float(adapter_for(loaded.pipe).guidance)
    base = RunSpec(prompt=text, seed=int(seed), steps=int(steps), guidance=guidance, source=loaded.source,
                   device=loaded.device)
    params = {"source": loaded.source, "prompt": text, "seed": base.seed, "steps": base.steps,
              "guidance": guidance, "probes": list(chosen)}
    study = StudyWriter.create(Path(runs_dir), "probe", params)
    emit = on_progress or (lambda _event: None)
    findings: list[dict[str, Any]] = []
    with study:
        battery = _Battery(loaded, study, cancel, emit)
        stopped = cancel is not None and cancel.is_cancelled()  # cancelled while it waited: nothing runs
        first = {} if stopped else battery.run("base", base)
        for name in chosen:
            if stopped or first.get("status") == "cancelled":
                stopped = True
                break
            emit({"event": "probe", "probe": name})
            finding = _judge(name, battery, base, first, other, guidance, allow_pickle, config)
            if cancel is not None and cancel.is_cancelled():  # its runs were cut short: no judgement from them
                stopped = True
                break
            findings.append(finding)
        failed = [f["probe"] for f in findings if not f["ok"]]
        said = "; ".join(str(f["finding"]) for f in findings if not f["ok"])
        summary = (f"all {len(findings)} probes passed" if not failed
                   else f"{len(failed)} of {len(findings)} probes failed: {said}")
        if stopped:
            summary = f"cancelled after {len(findings)} of {len(chosen)} probes" + (f"; {summary}" if findings else "")
        report = {
            "summary": summary,
            "status": "cancelled" if stopped else "done",
            "findings": findings,
            "ok": not failed and not stopped,
            "failed": failed,
            "settings": params,
            "study_dir": str(study.path),
            "runs": len(battery.results),
            "elapsed_s": round(time.perf_counter() - started, 3),
        }
        study.finish(report["status"], result=report)
    return report


def _judge(name: str, battery: _Battery, base: RunSpec, first: dict[str, Any], other: str, guidance: float,
           allow_pickle: bool, config: Any) -> dict[str, Any]:
    if name == "prompt_effect":
        return _effect(name, first, battery.run("prompt_effect.other", replace(base, prompt=other)),
                       prompts=[base.prompt, other])
    if name == "negative_effect":
        if guidance <= 1.0:
            return _finding(name, True, {}, skipped=f"guidance {guidance:g}: no classifier-free guidance, no "
                                                    "negative prompt to test")
        return _effect(name, first, battery.run("negative_effect.negative", replace(base, negative_prompt=other)),
                       negative_prompts=["", other])
    if name == "guidance_effect":
        lower = max(1.5, round(guidance / 2.5, 3)) if guidance > 1.5 else 1.0
        if lower == guidance:
            return _finding(name, True, {}, skipped=f"guidance {guidance:g}: no second scale to compare")
        return _effect(name, first, battery.run("guidance_effect.lower", replace(base, guidance=lower)),
                       guidance=[guidance, lower])
    if name == "seed_effect":
        return _effect(name, first, battery.run("seed_effect.other", replace(base, seed=base.seed + 1)),
                       seeds=[base.seed, base.seed + 1])
    if name == "determinism":
        again = battery.run("determinism.again", base)
        evidence = _evidence(first, again)
        try:
            check = compare_runs(first["run_dir"], again["run_dir"])
        except RecordError as exc:
            return _finding(name, False, {**evidence, "error": str(exc)})
        evidence["first_divergence"] = check["first_divergence"]
        evidence["environment_diff"] = check["environment_diff"]
        return _finding(name, bool(check["reproduced"]), evidence)
    if name == "fp16_agreement":
        if any(d == "float16" for d in battery.loaded.dtypes.values()):
            return _finding(name, True, {}, skipped="the pipeline is already in float16: no float32 run to compare")
        half = float16_copy(battery.loaded, allow_pickle, config)
        pair = base if battery.loaded.device != "cpu" else replace(base, steps=min(base.steps, FP16_CPU_STEPS))
        reference = first if pair is base else battery.run("fp16_agreement.float32", pair)
        return _agreement(name, reference, battery.run("fp16_agreement.float16", replace(pair, dtype="float16"),
                                                       half), rules.FP16_AGREEMENT, dtypes=["as loaded", "float16"],
                          steps=pair.steps)
    if name == "attention_backend":
        math = battery.run("attention_backend.math", base, context=math_attention)
        return _agreement(name, first, math, rules.BACKEND_AGREEMENT, backends=["default", "math"],
                          processors=sorted(_processors(battery.loaded.pipe)))
    if name == "batch_variance":
        if base.kind not in BATCH_KINDS:
            return _finding(name, True, {}, skipped=f"batch variance is not checked for {base.kind} calls")
        batch = battery.run("batch_variance.batch", replace(base, batch=2), check_batch_variance=True)
        report = batch.get("batch_variance") or {}
        evidence = {"runs": [batch["run_dir"]], "images": [batch.get("image")], "verdicts": [_label(batch)],
                    "max_abs_diff": report.get("max_abs_diff"), "differ": report.get("differ"),
                    "tolerance": report.get("tolerance")}
        return _finding(name, bool(report) and not report.get("differ"), evidence)
    if name == "short_prompt":
        return _short_prompt(battery, base, first)
    if name == "convergence":
        fewer = max(1, base.steps // 2)
        half_steps = battery.run("convergence.half", replace(base, steps=fewer))
        double = battery.run("convergence.double", replace(base, steps=base.steps * 2))
        d_first = rules.image_difference(_image(half_steps), _image(first))
        d_second = rules.image_difference(_image(first), _image(double))
        evidence = {"runs": [half_steps["run_dir"], first["run_dir"], double["run_dir"]],
                    "images": [half_steps.get("image"), first.get("image"), double.get("image")],
                    "steps": [fewer, base.steps, base.steps * 2],
                    "verdicts": [_label(half_steps), _label(first), _label(double)],
                    "mean_abs_diff": [None if d is None else round(d, 6) for d in (d_first, d_second)],
                    "rule": f"d(S,2S) <= {rules.CONVERGED} or < {rules.CONVERGES} x d(S/2,S)"}
        return _finding(name, rules.converges(d_first, d_second), evidence)
    raise AssertionError(name)


SEVERE_VERDICTS = ("blank", "noise", "nan")  # an image a short prompt alone should never make


def _failure(result: dict[str, Any]) -> dict[str, Any] | None:
    """The run's first failure (not a warning): the first anomaly, unless that is only its first warning."""
    anomaly = result.get("first_anomaly")
    return None if not anomaly or anomaly == result.get("first_warning") else anomaly


def _short_prompt(battery: _Battery, base: RunSpec, first: dict[str, Any]) -> dict[str, Any]:
    """One word, traced to every leaf (a layer that goes to zero inside a block shows only there) and judged with no
    baseline (a word the baseline's prompts never had may drift by right): it fails when that run alone has a
    failure, or alone makes a blank, noise or NaN image. A failure the base prompt has at leaf depth too is not the
    short prompt's."""
    word = short_prompt(base.prompt)
    short = battery.run("short_prompt.short", replace(base, prompt=word, trace_depth="leaf"), baseline=None)
    evidence = {**_evidence(first, short), "prompts": [base.prompt, word], "first_failure": _failure(short)}
    bad_image = _label(short) in SEVERE_VERDICTS and _label(first) not in SEVERE_VERDICTS
    failure = evidence["first_failure"]
    if failure is not None and not bad_image:
        long = battery.run("short_prompt.base_leaf", replace(base, trace_depth="leaf"), baseline=None)
        theirs = _failure(long)
        evidence["runs"].append(long["run_dir"])
        evidence["base_first_failure"] = theirs
        if theirs is not None and (theirs.get("module"), theirs.get("kind")) == (failure.get("module"),
                                                                                  failure.get("kind")):
            failure = None  # every prompt has it: not the short prompt's (the verdicts and other probes say it)
    return _finding("short_prompt", failure is None and not bad_image, evidence)


def _processors(pipe: Any) -> set[str]:
    names: set[str] = set()
    for component in pipe.components.values():
        processors = getattr(component, "attn_processors", None)
        if isinstance(processors, dict):
            names.update(type(p).__name__ for p in processors.values())
    return names
