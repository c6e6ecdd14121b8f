"""Which baseline judges a run whose model or settings differ from the one a baseline was built on, and how.

A baseline records the architecture it was built on (each component's class, structure — its tensors' names and
shapes — and config) besides its exact identity (weight hashes) and settings. A run uses the baseline of its exact
weights and settings when there is one; else the nearest baseline of the same architecture (the same pipeline
class, components, classes and structures), saying how it differs:

- other weights (a fine-tune, a merged LoRA, a swapped VAE, a conversion): judged with the architecture margins,
  calibrated on a differently-trained healthy copy of the demo (benchmarks/false_alarms_architecture.py);
- another config value that keeps the structure (a VAE scaling factor): listed;
- other steps: compared on normalised denoising time (step k of K in the bucket of k/K, its neighbours' limits
  included) within STEPS_RATIO of the baseline's; further apart, only the text encoder;
- another size: compared on per-pixel statistics (mean, std, per-channel means, the image's colour statistics;
  not absmax, which grows with the pixel count), where the outputs' shapes differ only in their size;
- another scheduler: the denoising steps are not compared (another sampler walks another path); encode, decode
  and the image are;
- other guidance: only the text encoder is compared (guidance changes the latents' path and the image's colours);
- another dtype: compared as is (listed);
- another kind of call (img2img, inpaint, ControlNet against text-to-image, or the other way round), another
  strength or another ControlNet scale: only the text encoder is compared (the call starts from other latents, or
  is steered otherwise, to another image), and only where the text encoder is the baseline's (class, structure);
  measured on the demo (benchmarks/false_alarms_kinds.py): healthy img2img runs judged in every phase by the
  text-to-image baseline all drift (30/30, at unet.time_embedding: img2img starts at a later timestep), judged by
  the text encoder only none do (0/30) — as few false alarms as no baseline, and the text encoder still judged;
- other LoRA scales (the same LoRA files): judged as other weights; LoRAs fused or not, or another batch size:
  compared as is (listed; a batch's outputs of another shape are not compared).
Numpy-free; the engine describes the pipeline (engine/run/baseline_lookup.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ghostviewer.analysis.baseline import Baseline, call_of

# Margins when the weights differ. Calibrated (benchmarks/false_alarms_architecture.py, 2026-12-01) on a
# differently-trained healthy copy of the demo judged by the demo's baseline, 50 calls: worst excess beyond the
# healthy extremes, in scale units — module stats 2.92 (pipeline.noise_pred), channel means 2.17, channel subspace
# 2.42, colour statistics 0.45 — against the exact model's own 0.82 / 0.58 / 0.08 / 0.06. The exact margins still
# hold twice that; tighter ones would flag the copy. On 50 held-out calls the worst was 5.20 (module), 4.50
# (subspace), 2.32 (colour), two blank images of the copy among them: the margins cannot come down.
# Exact-weight baselines keep their own (analysis/baseline.py).
ARCH_MARGIN = 6.0
ARCH_CHANNEL_MARGIN = 6.0
ARCH_COLOUR_MARGIN = 3.0
ALL_PHASES = frozenset({"encode", "denoise", "decode", "image"})
# Run steps / baseline steps within which denoising is compared on normalised time. Measured on the demo against its
# 20-step baseline (benchmarks/false_alarms_architecture.py --demo-steps): 30 steps 0 drift alarms in 20 runs, 10
# steps 1 (pipeline.noise_pred), 3 steps a drift at scheduler.step in most runs.
STEPS_RATIO = (2 / 3, 1.5)
MAX_CONFIG_DIFFERENCES = 4  # config keys listed per component


@dataclass(frozen=True)
class MatchPlan:
    """How a baseline judges a run: what differs, and which checks are made."""

    match: str  # "exact" | "architecture"
    differences: tuple[str, ...]
    phases: frozenset[str]
    run_steps: int | None
    per_pixel: bool
    weights_differ: bool

    @property
    def cost(self) -> tuple[int, int, int, int]:
        """Smaller is nearer: phases not judged, another kind of call, settings that differ, components whose
        weights differ."""
        settings = sum(1 for d in self.differences if not d.startswith(("weights", "config")))
        weights = sum(1 for d in self.differences if d.startswith("weights"))
        other_kind = any(d.startswith("kind ") for d in self.differences)
        return len(ALL_PHASES - self.phases), int(other_kind), settings, weights

    def to_json(self) -> dict[str, Any]:
        return {"match": self.match, "differences": list(self.differences),
                "judged": sorted(self.phases), "run_steps": self.run_steps, "per_pixel": self.per_pixel,
                "weights_differ": self.weights_differ}


def structure_mismatch(built: Mapping[str, Any], run: Mapping[str, Any]) -> str | None:
    """Why two architectures (engine/run/baseline_lookup.architecture_of) are not the same; None when they are."""
    if not built or not built.get("components"):
        return "the baseline records no architecture (built before GhostViewer recorded one)"
    if built.get("class") != run.get("class"):
        return f"pipeline class {run.get('class')} vs {built.get('class')}"
    ours, theirs = dict(run.get("components") or {}), dict(built.get("components") or {})
    if set(ours) != set(theirs):
        extra, missing = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
        return "components differ" + (f": {', '.join(extra)} not in the baseline" if extra else "") + (
            f"; {', '.join(missing)} missing" if missing else "")
    for name in sorted(ours):
        a, b = ours[name] or {}, theirs[name] or {}
        if a.get("class") != b.get("class"):
            return f"{name} is {a.get('class')}, the baseline's {b.get('class')}"
        if a.get("structure") != b.get("structure"):
            return f"{name}'s tensors (names and shapes) differ from the baseline's"
    return None


def _config_differences(built: Mapping[str, Any], run: Mapping[str, Any]) -> list[str]:
    found = []
    theirs = built.get("components") or {}
    for name, ours in sorted((run.get("components") or {}).items()):
        a, b = (ours or {}).get("config") or {}, (theirs.get(name) or {}).get("config") or {}
        if not a or not b:  # one side recorded no config of it (a text encoder's, before 2026-12): nothing to say
            continue
        keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        if keys:
            shown = ", ".join(f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in keys[:MAX_CONFIG_DIFFERENCES])
            more = f" (+{len(keys) - MAX_CONFIG_DIFFERENCES} more)" if len(keys) > MAX_CONFIG_DIFFERENCES else ""
            found.append(f"config of {name}: {shown}{more}")
    return found


def _size(settings: Mapping[str, Any]) -> str:
    return f"{settings.get('width')}×{settings.get('height')}"


def plan_match(baseline: Baseline, identity: Mapping[str, Any] | None, architecture: Mapping[str, Any],
               settings: Mapping[str, Any], unknown_weights: str = "a pipeline object in memory") -> MatchPlan | str:
    """How `baseline` would judge a run of this pipeline (identity: its weight hashes, None when unknown, and
    `unknown_weights` why) at these baseline settings (analysis.baseline.settings_of); a one-line reason when it
    cannot."""
    run_call, built_call = call_of(settings), call_of(baseline.settings)
    if run_call["kind"] != built_call["kind"]:
        return _other_kind(baseline, identity, architecture, run_call["kind"], built_call["kind"], unknown_weights)
    same_weights = identity is not None and dict(identity) == dict(baseline.identity)
    differences: list[str] = []
    if not same_weights:
        why = structure_mismatch(baseline.architecture, architecture)
        if why is not None:
            return why
        ours = dict((identity or {}).get("weight_hashes") or {})
        theirs = dict(baseline.identity.get("weight_hashes") or {})
        differing = [c for c in sorted(set(ours) | set(theirs)) if ours.get(c) != theirs.get(c)]
        if not ours:
            differences.append(f"weights unknown ({unknown_weights}): judged as other weights")
        differences += [f"weights of {c} differ from the baseline's" for c in differing if ours]
        differences += _config_differences(baseline.architecture, architecture)
    built = baseline.settings
    phases = set(ALL_PHASES)
    run_steps = None
    per_pixel = False
    if settings.get("guidance") != built.get("guidance"):
        phases &= {"encode"}
        differences.append(f"guidance {settings.get('guidance')} vs {built.get('guidance')}: only the text encoder "
                           "compared (guidance changes the latents' path and the image's colours)")
    if settings.get("scheduler") != built.get("scheduler"):
        phases -= {"denoise"}
        differences.append(f"scheduler {settings.get('scheduler')} vs {built.get('scheduler')}: denoising steps not "
                           "compared (another sampler walks another path)")
    if settings.get("steps") != built.get("steps"):
        run_steps = int(settings.get("steps") or 1)
        ratio = run_steps / max(int(built.get("steps") or 1), 1)
        if STEPS_RATIO[0] <= ratio <= STEPS_RATIO[1]:
            differences.append(f"steps {settings.get('steps')} vs {built.get('steps')}: compared on normalised time")
        else:
            phases &= {"encode"}
            differences.append(f"steps {settings.get('steps')} vs {built.get('steps')}: too far apart for normalised "
                               "time (another path to another image): only the text encoder compared")
    if (settings.get("width"), settings.get("height")) != (built.get("width"), built.get("height")):
        per_pixel = True
        differences.append(f"size {_size(settings)} vs {_size(built)}: compared on per-pixel statistics "
                           "(mean, std, channel means, colours; not absmax)")
    if settings.get("dtype") != built.get("dtype"):
        differences.append(f"dtype {settings.get('dtype')} vs {built.get('dtype')}")
    call_phases, call_differences, scales_differ = _call_differences(run_call, built_call)
    phases &= call_phases
    differences += call_differences
    if phases == {"encode"} and "text_encoder" not in (architecture.get("components") or {}):
        return "nothing left to compare"
    exact = same_weights and not differences
    return MatchPlan("exact" if exact else "architecture", tuple(differences), frozenset(phases), run_steps,
                     per_pixel, not same_weights or scales_differ)


def _call_differences(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> tuple[set[str], list[str], bool]:
    """(the phases still judged, what differs, whether the LoRA scales do) between two calls of one kind."""
    phases, differences = set(ALL_PHASES), []
    for key, what in (("strength", "strength"), ("controlnet_scale", "ControlNet scale")):
        if ours[key] != theirs[key]:
            phases &= {"encode"}
            differences.append(f"{what} {ours[key]} vs {theirs[key]}: only the text encoder compared (the call "
                               "starts from other latents, or is steered otherwise, to another image)")
    scales_differ = ours["lora_scales"] != theirs["lora_scales"]
    if scales_differ:
        differences.append(f"LoRA scales {ours['lora_scales']} vs {theirs['lora_scales']}: judged as other weights")
    if ours["fuse_lora"] != theirs["fuse_lora"]:
        differences.append(f"LoRAs {'fused' if ours['fuse_lora'] else 'not fused'} vs "
                           f"{'fused' if theirs['fuse_lora'] else 'not fused'}: compared as is")
    if ours["batch"] != theirs["batch"]:
        differences.append(f"batch {ours['batch']} vs {theirs['batch']}: outputs of another shape not compared")
    return phases, differences, scales_differ


def _other_kind(baseline: Baseline, identity: Mapping[str, Any] | None, architecture: Mapping[str, Any],
                kind: str, built: str, unknown_weights: str) -> MatchPlan | str:
    """A run of another kind of call than the baseline's: only its text encoder is compared, and only where it is
    the baseline's (class and structure; other weights judged with the architecture margins)."""
    ours, theirs = dict(architecture.get("components") or {}), dict(baseline.architecture.get("components") or {})
    if not theirs:
        return "the baseline records no architecture (built before GhostViewer recorded one)"
    encoders = sorted(name for name in theirs if name.startswith(("text_encoder", "tokenizer")))
    if not any(name.startswith("text_encoder") for name in encoders):
        return f"a {kind} call against a {built} baseline: nothing left to compare (no text encoder)"
    for name in encoders:
        a, b = ours.get(name) or {}, theirs[name] or {}
        if a.get("class") != b.get("class") or a.get("structure") != b.get("structure"):
            return f"a {kind} call against a {built} baseline, and its {name} is not the baseline's"
    mine = dict((identity or {}).get("weight_hashes") or {})
    built_hashes = dict(baseline.identity.get("weight_hashes") or {})
    # a LoRA (lora_<i>) may change the text encoder: its hashes count as the text encoder's weights
    judged = sorted({n for n in (*mine, *built_hashes) if n.startswith(("text_encoder", "lora_"))})
    differing = [n for n in judged if mine.get(n) != built_hashes.get(n)]
    differences = [f"kind {kind} vs {built}: only the text encoder compared (another kind of call starts from other "
                   "latents to another image)"]
    if not mine:
        differences.append(f"weights unknown ({unknown_weights}): judged as other weights")
    differences += [f"weights of {n} differ from the baseline's" for n in differing if mine]
    return MatchPlan("architecture", tuple(differences), frozenset({"encode"}), None, False,
                     not mine or bool(differing))


def judging_view(baseline: Baseline, plan: MatchPlan) -> Baseline:
    """The baseline as it judges a run of that plan: the same envelopes, the run's step count for normalised time,
    the phases judged, per-pixel statistics, and the architecture margins when the weights differ."""
    if plan.match == "exact":
        return baseline
    # A view is read-only and depends only on these: kept on the stored baseline (which the store caches), so a
    # sweep's runs of one kind share it instead of recomputing every envelope's limits per run.
    views: dict[tuple[Any, ...], Baseline] = vars(baseline).setdefault("_judging_views", {})
    key = (plan.run_steps, plan.phases, plan.per_pixel, plan.weights_differ, baseline.margin,
           baseline.channel_margin, baseline.colour_margin, len(baseline.modules), len(baseline.channels))
    view = views.get(key)
    if view is None:
        margins: dict[str, float] = {}
        if plan.weights_differ:
            margins = {"margin": max(baseline.margin, ARCH_MARGIN),
                       "channel_margin": max(baseline.channel_margin, ARCH_CHANNEL_MARGIN),
                       "colour_margin": max(baseline.colour_margin, ARCH_COLOUR_MARGIN)}
        view = replace(baseline, run_steps=plan.run_steps,
                       phases=None if plan.phases == ALL_PHASES else plan.phases, per_pixel=plan.per_pixel, **margins)
        views[key] = view
    view.path = baseline.path
    return view


@dataclass(frozen=True)
class BaselineChoice:
    """The baseline a run is judged against, the view that judges it, and how it was chosen."""

    baseline: Baseline  # the judging view
    source: Baseline  # as stored
    plan: MatchPlan
    given: bool = False

    def to_json(self) -> dict[str, Any]:
        """The run's `baseline` field: {"file", "key", "match", "differences", "judged", ...}."""
        return {"file": str(self.source.path) if self.source.path else None, "key": self.source.key,
                **self.plan.to_json(), "given": self.given, "runs": self.source.meta.get("runs")}

    def describe(self) -> str:
        where = self.source.path or self.source.key
        runs = self.source.meta.get("runs", "?")
        how = "given" if self.given else ("exact" if self.plan.match == "exact" else "of the same architecture")
        text = f"using baseline {where} ({how}, {runs} healthy runs)"
        return f"{text}: {'; '.join(self.plan.differences)}" if self.plan.differences else text


def nearest(candidates: Iterable[Baseline], identity: Mapping[str, Any] | None, architecture: Mapping[str, Any],
            settings: Mapping[str, Any], unknown_weights: str = "a pipeline object in memory"
            ) -> tuple[BaselineChoice | None, list[str]]:
    """The nearest usable baseline among `candidates` (exact first, then fewest phases left out, fewest settings
    and weights that differ), and the reasons the others of the same pipeline class were not used."""
    best: tuple[tuple[int, ...], Baseline, MatchPlan] | None = None
    refused: list[str] = []
    for baseline in candidates:
        plan = plan_match(baseline, identity, architecture, settings, unknown_weights)
        if isinstance(plan, str):
            if baseline.identity.get("class") == architecture.get("class"):
                refused.append(f"{Path(str(baseline.path)).name if baseline.path else baseline.key}: {plan}")
            continue
        cost = (-1, 0, 0, 0) if plan.match == "exact" else plan.cost
        if best is None or cost < best[0]:
            best = (cost, baseline, plan)
    if best is None:
        return None, refused
    return BaselineChoice(judging_view(best[1], best[2]), best[1], best[2]), refused
