"""Which blocks bisection by bypass has to consider, and which half of them the next re-run bypasses.

Candidates. A bypassable block is a candidate when it ran in the bad run and could have caused its first anomaly:
it ran, in the anomaly's phase, before the anomalous output was recorded, or it encloses the anomalous module.
A block that runs only after the first anomaly cannot cause it, and a block of an earlier phase would have
shown the anomaly in its own phase (an earlier phase that hands on wrong but finite values is the one case
this misses; bisection then ends with `culprit: null` and says where the first anomaly was). In the denoising
loop "before" includes every earlier step, so an anomaly at step 3 keeps every block of the denoiser. A bad
run without an anomaly (a bad verdict alone) keeps every block that ran.

Halving. Bypassing a block bypasses everything inside it, so a re-run that bypasses a set of blocks asks "is the
culprit inside one of these subtrees?". Among the possible culprits P, `choose_half` picks blocks whose
subtrees cover exactly ⌊|P|/2⌋ of P, coarse first: whole components, then whole blocks, descending into a block
(which then stays out) only when it is too big to fit. That always comes out exact (a block too big to fit has
at least as many candidates below it as are still needed), so every answer at least halves P:
a single culprit among N candidates takes ⌈log2 N⌉ re-runs to isolate, plus at most one to confirm it alone.
The half is taken from the downstream end, nearest the first anomaly: the anomaly usually sits in the culprit,
so the first answers tend to land on it, and a last re-run that bypassed the culprit alone is its confirmation.

A drift (a silent ghost, analysis.symptom) is not halved. A re-run that bypasses the first-drift module M, or a
block around it, answers "gone" whatever the culprit is: nothing the bypass leaves untouched had drifted. A re-run
that bypasses blocks upstream of M changes M's input, and that alone can take M back inside its envelope: on the
demo, bypassing unet.down_blocks.0.resnets.0 hides a ×1.5 unet.down_blocks.1.resnets.0, unet.mid_block.resnets.0
a ×1.5 mid_block.resnets.1, unet.up_blocks.0.resnets.1 a ×1.5 up_blocks.1.resnets.0 (each time the faulty block
is back inside its envelope), and a halving that believed those answers would name the wrong block. So for a
drift the suspect is the innermost bypassable block around M (`innermost`), bypassed alone once; activation
patching (engine.patching), which restores healthy values instead of removing a block, is the check that
carries weight.

Time. When the first anomaly is at denoising step k > 0, a bypass at every step changes steps 0 … k−1 too, and a
fault that depends on the trajectory (a user's hook that fires once the latents grow past a threshold) then never
fires: any bypass looks like a cure. So bisection bypasses from step k first (`MODULE@k:`), which keeps the
trajectory up to the failure as it was; the blocks that ran only after the anomaly in step k (`after_in_step`)
cannot have caused it there and are not candidates of that search. When no block bypassed from step k explains the
failure, the fault may be fed by an earlier step's output (the latents a block left at step k − 1): bypasses start
from k − 1, then k − 2, every block a candidate. Only then does it bypass whole runs, and a block named then that
runs after the anomaly in its step is named only when activation patching confirms it. """

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ghostviewer.analysis.anomaly import AnomalyDetector, is_warning
from ghostviewer.record import StatRow


def budget(candidates: int) -> int:
    """⌈log2 N⌉ + 1 re-runs for a single culprit among N candidates (0 when there is nothing to try)."""
    return 0 if candidates <= 0 else math.ceil(math.log2(candidates)) + 1


def inside(module: str, block: str) -> bool:
    """`module` is `block` itself or lies inside it."""
    return module == block or module.startswith(block + ".")


def upstream_modules(rows: Sequence[StatRow], anomaly: Mapping[str, Any]) -> set[str]:
    """Modules that ran in the anomaly's phase before the anomalous output was recorded, or that enclose it."""
    phase, step, module = anomaly.get("phase"), anomaly.get("step"), str(anomaly.get("module"))
    mark = _anomaly_seq(rows, phase, step, module)
    found: set[str] = set()
    for row in rows:
        if row.phase != phase:
            continue
        if (mark is not None and row.seq <= mark) or inside(module, row.module):
            found.add(row.module)
    return found


def _anomaly_seq(rows: Sequence[StatRow], phase: Any, step: Any, module: str) -> int | None:
    """The seq of the anomalous output: found again by the detector that found it (a module may run twice in a
    phase, e.g. the text encoder for the prompt and the negative prompt); else its last call, a safe superset."""
    detector = AnomalyDetector()
    for row in rows:
        kind = detector.classify(row)
        if kind and (not is_warning(kind, row.module) or (row.phase, row.step, row.module) == (phase, step, module)):
            if (row.phase, row.step, row.module) == (phase, step, module):
                return row.seq
            break
    marks = [r.seq for r in rows if r.phase == phase and r.step == step and r.module == module]
    return max(marks) if marks else None


def after_in_step(rows: Sequence[StatRow], anomaly: Mapping[str, Any]) -> set[str]:
    """Modules that ran only after the anomalous output in the anomaly's own phase and step (and do not enclose it):
    they may have shaped earlier steps, but not the anomaly itself, and bypassing them from its step on cannot
    remove it."""
    phase, step, module = anomaly.get("phase"), anomaly.get("step"), str(anomaly.get("module"))
    mark = _anomaly_seq(rows, phase, step, module)
    if mark is None:
        return set()
    here = [r for r in rows if r.phase == phase and r.step == step]
    before = {r.module for r in here if r.seq <= mark}
    return {r.module for r in here if r.seq > mark and r.module not in before and not inside(module, r.module)}


def enclosing(blocks: Sequence[str], module: str) -> list[str]:
    """The blocks that are or enclose `module`, innermost first (the first anomaly's own block, its parent...)."""
    return sorted((b for b in blocks if inside(module, b)), key=lambda b: -b.count("."))


def candidates(
    bypassable: Iterable[str], order: Sequence[str], rows: Sequence[StatRow], anomaly: Mapping[str, Any] | None,
    already_bypassed: Iterable[str] = (),
) -> list[str]:
    """Bypassable blocks that may have caused the anomaly, in first-execution order (module docstring)."""
    ran = set(order)
    keep = upstream_modules(rows, anomaly) if anomaly is not None else ran
    skipped = list(already_bypassed)
    allowed = set(bypassable)
    return [
        m for m in order
        if m in allowed and m in ran and m in keep and not any(inside(m, b) for b in skipped)
    ]


class Forest:
    """The nesting of a set of candidate blocks (by path), in execution order."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = list(nodes)
        # Built once by walking each path's dotted prefixes (the nodes enclosing it), not by comparing every pair:
        # choose_half asks for weights and children many times per re-run.
        present = set(self.nodes)
        self._parent: dict[str, str | None] = {}
        self._children: dict[str | None, list[str]] = {}
        self._weight: dict[str, int] = dict.fromkeys(present, 0)
        for node in self.nodes:
            enclosing = [p for p in _prefixes(node) if p in present]  # nearest first
            self._parent[node] = enclosing[0] if enclosing else None
            self._children.setdefault(self._parent[node], []).append(node)
            for block in (node, *enclosing):
                self._weight[block] += 1

    def parent(self, node: str) -> str | None:
        """The nearest enclosing node, if any."""
        return self._parent[node]

    def children(self, node: str | None) -> list[str]:
        """Direct children in execution order; None: the roots."""
        return list(self._children.get(node, ()))

    def weight(self, node: str) -> int:
        """How many nodes its bypass covers (itself and everything inside it)."""
        return self._weight[node] if node in self._weight else sum(1 for n in self.nodes if inside(n, node))


def _prefixes(path: str) -> list[str]:
    """The dotted paths strictly enclosing `path`, nearest first ("a.b.c": "a.b", "a")."""
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def covered(blocks: Iterable[str], possible: Iterable[str]) -> list[str]:
    """The possible culprits a bypass of `blocks` covers."""
    chosen = list(blocks)
    return [p for p in possible if any(inside(p, b) for b in chosen)]


def innermost(blocks: Sequence[str]) -> str:
    """The deepest of nested blocks (e.g. those around a first-drift module)."""
    return max(blocks, key=lambda b: b.count("."))


def choose_half(possible: Sequence[str]) -> list[str]:
    """Blocks to bypass together so that exactly ⌊|P|/2⌋ of the possible culprits are covered, coarsest first."""
    forest = Forest(possible)
    chosen: list[str] = []

    def fill(nodes: list[str], remaining: int) -> int:
        for node in reversed(nodes):  # downstream first
            if remaining == 0:
                break
            weight = forest.weight(node)
            if weight <= remaining:
                chosen.append(node)
                remaining -= weight
            else:
                remaining = fill(forest.children(node), remaining)
        return remaining

    remaining = len(possible) // 2
    roots = forest.children(None)
    components = list(dict.fromkeys(r.split(".", 1)[0] for r in roots))
    for component in reversed(components):  # a whole component first, when it fits; downstream first
        group = [r for r in roots if r.split(".", 1)[0] == component]
        size = sum(forest.weight(r) for r in group)
        if remaining == 0:
            break
        if size <= remaining:
            chosen.extend(group)
            remaining -= size
        else:
            remaining = fill(group, remaining)
    if remaining:  # cannot happen (see the module docstring); a wrong plan must not pass silently
        raise AssertionError(f"could not cover half of {list(possible)}")
    return chosen
