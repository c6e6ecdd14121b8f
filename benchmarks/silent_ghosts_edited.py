#!/usr/bin/env python
"""Silent ghosts in the field: faults edited into the *weights* of a copy of the demo (no hooks), judged with no
exact baseline (the copy's weights are its own, so the demo's shipped baseline judges it by architecture) and
side by side with the demo as a known-good reference (`run --reference demo`).

The edits (benchmarks/demo_variants.py EDITS): a VAE decoder output bias shift, zeroed cross-attention output
projections in one U-Net block, a scaled resnet, q/k swapped in a text-encoder layer, a GroupNorm gain cut, two
channels of a decoder resnet swapped. Per edit × seed (healthy captions): flagged = verdict not 'ok' or a first
anomaly; located = the first anomaly names the module where the edit sits (or one inside it); image = the image
verdict alone. With the demo as the known-good reference (`run --reference demo`, compare_with_reference): side =
the side-by-side runs' first departure (two calls from the same noise, statistics set against each other); lock =
the reference's first departure as it is reported, which with the suspect's pipeline at hand is the same-inputs
lockstep's (engine/run/reference_lockstep.py: each traced module of the suspect's call run again as the reference's
module on the very same inputs). The last row: the differently-trained healthy copy, which must raise nothing
(its one flag: a caption it misdrew).

Measured 2026-12-01 (5 seeds each, 20 steps, 2 shared cores; s/run = the reference's whole cost per run: its run,
the side-by-side statistics and the lockstep call comparing steps 0-3, every 4th and the last — 5.6-17.8 s when it
compared every step, on a busier machine, with the same counts):

    weight edit            flagged  located  image | side flag  side loc  lock flag  lock loc  s/run
    vae-output-bias ±0.4     5/5      0/5     3/5  |    0/5       0/5       5/5       5/5      2.9
    zero-cross-attention     3/5      0/5     1/5  |    0/5       0/5       5/5       5/5      2.5
    scaled-resnet ×10        5/5      5/5     0/5  |    5/5       5/5       5/5       5/5      2.9
    swapped-qk-text          4/5      0/5     0/5  |    1/5       0/5       5/5       5/5      3.2
    norm-gain-cut ×0.2       0/5      0/5     0/5  |    0/5       0/5       5/5       5/5      3.3
    vae-swapped-channels     0/5      0/5     0/5  |    0/5       0/5       5/5       5/5      3.7
    healthy copy             1/5      -       0/5  |    0/5       -         0/5       -        3.7

Without a reference 5/30 are located (the scaled resnet); with one, side by side 5/30, in lockstep 30/30, each at
step 0 (or in the encode/decode phase) at the module that holds the edit, and the healthy copy departs nowhere in
lockstep (also over 20 more seeds, --edits "" --seeds 20: 0/20; there the side-by-side check, which is what is
reported when the lockstep finds nothing, named unet.conv_out's mean at step 1 in 1/20). Why side by side misses
them: two calls drift apart as they denoise, so its limits must be wide, and a channel swap or a bias keeps the
whole tensor's statistics; given the same inputs a module that is the reference's own is bit-identical, a healthy
fine-tune's differs by its component's typical amount, and an edited one stands out at once (reference_lockstep.py,
OUTLIER).

Gentler edits were tried first and are not flagged without a reference: the resnet conv ×3 (its block's stats move
< 0.1 scale units), a GroupNorm gain halved (3.5 < margin 6), the VAE bias ±0.25 (32 levels: within a healthy
model's own colour errors, 27).

Usage: python benchmarks/silent_ghosts_edited.py [--seeds 5] [--variant DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from benchmarks.demo_variants import EDITS, edited_copy, healthy_variant
from benchmarks.false_alarms import healthy_prompts
from benchmarks.false_alarms_architecture import DEFAULT_VARIANT
from ghostviewer.analysis.verdicts import image_verdict
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.engine.run.reference_run import compare_with_reference
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.spec import RunSpec


def _inside(module: str | None, at: str) -> bool:
    return module is not None and (module == at or module.startswith(at + "."))


def judge(loaded: Any, reference: Any, at: str | None, prompts: list[str], seeds: list[int], runs_dir: Path
          ) -> dict[str, Any]:
    row: dict[str, Any] = {"runs": len(seeds), "flagged": 0, "located": 0, "image_only": 0, "ref_flagged": 0,
                           "ref_located": 0, "side_flagged": 0, "side_located": 0, "by": Counter(),
                           "match": Counter(), "where": Counter(), "ref_where": Counter(), "seconds": 0.0}
    for prompt, seed in zip(prompts, seeds, strict=True):
        result = execute_run(loaded, RunSpec(prompt=prompt, seed=seed), runs_dir)
        label, anomaly = result["verdict"]["label"], result["first_anomaly"]
        row["match"][(result.get("baseline") or {}).get("match")] += 1
        row["flagged"] += label != "ok" or anomaly is not None
        row["image_only"] += image_verdict(np.asarray(Image.open(result["image"]).convert("RGB")))["label"] != "ok"
        if anomaly is not None:
            row["by"][f"{anomaly['kind']}({str(anomaly.get('stat', '')).split('[')[0]})"] += 1
            row["where"][anomaly["module"]] += 1
            row["located"] += at is not None and _inside(anomaly["module"], at)
        if label != "ok":
            row["by"][label] += 1
        started = time.perf_counter()
        side = compare_with_reference(result, reference, runs_dir, loaded)  # side by side + same inputs
        row["seconds"] += time.perf_counter() - started
        alone = side["side_by_side"]  # the side-by-side runs' own departure (statistics of two calls)
        if alone is not None:
            row["side_flagged"] += 1
            row["side_located"] += at is not None and _inside(alone["module"], at)
        departure = side["first_departure"]
        if departure is not None:
            row["ref_flagged"] += 1
            row["ref_where"][f"{departure['module']}@{departure['step']}:{departure['stat']}"] += 1
            row["ref_located"] += at is not None and _inside(departure["module"], at)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--variant", type=Path, default=DEFAULT_VARIANT)
    p.add_argument("--edits", default=",".join(EDITS))
    args = p.parse_args()
    prompts = healthy_prompts(args.seeds, seed=505)
    seeds = [4000 + i for i in range(args.seeds)]
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        demo = load_pipeline("demo", device="cpu")
        for name in [e for e in args.edits.split(",") if e]:
            folder = edited_copy(tmp_dir / name, name)
            rows[name] = judge(load_pipeline(str(folder), device="cpu"), demo, EDITS[name][2], prompts, seeds,
                               tmp_dir / "runs")
        healthy = load_pipeline(str(healthy_variant(args.variant)), device="cpu")
        rows["healthy copy (false alarms)"] = judge(healthy, demo, None, prompts, seeds, tmp_dir / "runs")
    print(f"{'weight edit':<24} {'match':<13} {'flagged':>8} {'located':>8} {'image':>6} | reference: "
          f"{'side flag':>9} {'side loc':>8} {'lock flag':>9} {'lock loc':>8} {'s/run':>6}  by / where")
    for name, row in rows.items():
        n = row["runs"]
        match = ",".join(f"{k}" for k in row["match"])
        print(f"{name:<24} {match:<13} {row['flagged']:>4}/{n:<3} {row['located']:>4}/{n:<3} "
              f"{row['image_only']:>3}/{n:<2} |            {row['side_flagged']:>5}/{n:<3} "
              f"{row['side_located']:>4}/{n:<3} "
              f"{row['ref_flagged']:>5}/{n:<3} {row['ref_located']:>4}/{n:<3} {row['seconds'] / n:>6.1f}  "
              f"{dict(row['by'])} {dict(row['where'].most_common(2))} ref {dict(row['ref_where'].most_common(2))}")


if __name__ == "__main__":
    main()
