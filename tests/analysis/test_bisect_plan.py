"""The bisection plan: which blocks may hold the culprit, and a half of them covered exactly, coarse first."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from ghostviewer.analysis.bisect_plan import (
    Forest,
    budget,
    candidates,
    choose_half,
    covered,
    innermost,
    inside,
    upstream_modules,
)
from tests.analysis.records import pipeline_rows, stat

DENOISER = ("unet.down", "unet.mid", "unet.up")
BYPASSABLE = ["text_encoder", *DENOISER, "vae.decoder"]
ORDER = ["text_encoder", *DENOISER, "vae.decoder"]


def test_budget_is_log2_plus_a_confirmation() -> None:
    assert [budget(n) for n in (0, -1, 1, 2, 3, 4, 8, 9, 100)] == [0, 0, 1, 2, 3, 3, 4, 5, 8]


def test_inside_is_by_path_component() -> None:
    assert inside("unet.mid_block", "unet.mid_block") and inside("unet.mid_block.resnets.0", "unet.mid_block")
    assert not inside("unet.mid_block2", "unet.mid_block") and not inside("unet", "unet.mid_block")


def test_candidates_ran_before_the_anomaly_in_its_phase() -> None:
    rows = pipeline_rows(steps=2, bad={(1, "unet.mid"): {"nan": 4}})
    anomaly = {"phase": "denoise", "step": 1, "module": "unet.mid", "kind": "nan"}
    # unet.up ran at step 0, before the NaN at step 1; the encoder (another phase) and the decoder (later) cannot
    # have caused it.
    assert candidates(BYPASSABLE, ORDER, rows, anomaly) == list(DENOISER)
    at_step_0 = pipeline_rows(steps=2, bad={(0, "unet.mid"): {"nan": 4}})
    assert candidates(BYPASSABLE, ORDER, at_step_0, {**anomaly, "step": 0}) == ["unet.down", "unet.mid"]


def test_candidates_without_an_anomaly_are_every_bypassable_block_that_ran() -> None:
    rows = pipeline_rows()
    assert candidates([*BYPASSABLE, "never.ran"], ORDER, rows, None) == ORDER
    assert candidates(["unet.mid", "vae.decoder"], ORDER, rows, None) == ["unet.mid", "vae.decoder"]  # order's order


def test_already_bypassed_blocks_and_their_insides_are_no_candidates() -> None:
    order = ["unet.down", "unet.down.resnets.0", "unet.mid", "unet.up"]
    rows = pipeline_rows(steps=1, denoiser=order)
    assert candidates(order, order, rows, None, already_bypassed=["unet.down"]) == ["unet.mid", "unet.up"]


def test_an_enclosing_block_recorded_after_the_anomaly_is_kept() -> None:
    # Forward hooks fire innermost first: "unet" is recorded after its blocks, the NaN one included.
    order = ["unet.down", "unet.mid", "unet.up", "unet"]
    rows = pipeline_rows(steps=1, denoiser=order, bad={(0, "unet.mid"): {"nan": 1}})
    anomaly = {"phase": "denoise", "step": 0, "module": "unet.mid", "kind": "nan"}
    assert upstream_modules(rows, anomaly) == {"unet.down", "unet.mid", "unet"}


def test_a_module_called_twice_in_a_phase_is_marked_at_the_call_that_was_anomalous() -> None:
    rows = [stat("encode", None, "text_encoder", 0), stat("encode", None, "text_encoder", 1, call=1, nan=3),
            stat("encode", None, "pooler", 2), stat("encode", None, "text_encoder", 3, call=2)]
    anomaly = {"phase": "encode", "step": None, "module": "text_encoder", "kind": "nan"}
    assert upstream_modules(rows, anomaly) == {"text_encoder"}  # the pooler ran after the NaN call
    # An anomaly the rows do not show (a drift): the module's last call is the safe mark.
    drift = {**anomaly, "kind": "drift"}
    assert upstream_modules([stat("encode", None, "text_encoder", 0), *rows[2:]], drift) == {"text_encoder", "pooler"}


def test_forest_nesting_and_weights() -> None:
    forest = Forest(["unet.down", "unet.down.resnets.0", "unet.down.resnets.0.conv", "unet.down.attn", "unet.mid"])
    assert forest.parent("unet.down.resnets.0.conv") == "unet.down.resnets.0"
    assert forest.parent("unet.down") is None and forest.children(None) == ["unet.down", "unet.mid"]
    assert forest.children("unet.down") == ["unet.down.resnets.0", "unet.down.attn"]
    assert forest.weight("unet.down") == 4 and forest.weight("unet.mid") == 1


def test_choose_half_of_flat_blocks_takes_the_downstream_half() -> None:
    blocks = [f"unet.b{i}" for i in range(8)]
    assert choose_half(blocks) == ["unet.b7", "unet.b6", "unet.b5", "unet.b4"]
    assert choose_half(blocks[:3]) == ["unet.b2"]
    assert choose_half(["unet.b0"]) == []


def test_choose_half_takes_whole_components_then_whole_blocks() -> None:
    assert choose_half(["text_encoder.l0", "text_encoder.l1", "unet.a", "unet.b"]) == ["unet.a", "unet.b"]
    nested = ["unet.down", "unet.down.r0", "unet.down.r1", "unet.mid", "unet.up", "unet.up.r0"]
    assert choose_half(nested) == ["unet.up", "unet.mid"]  # 3 of 6: a 2-block subtree and a leaf
    deep = ["unet.down", "unet.down.r0", "unet.down.r1", "unet.down.r2", "unet.mid"]
    # unet.down (4) is too big for 2: its children are taken instead and unet.down itself stays out.
    assert choose_half(deep) == ["unet.mid", "unet.down.r2"]
    assert covered(["unet.down"], deep) == ["unet.down", "unet.down.r0", "unet.down.r1", "unet.down.r2"]


def test_innermost_is_the_deepest() -> None:
    assert innermost(["unet", "unet.mid_block", "unet.mid_block.resnets.1"]) == "unet.mid_block.resnets.1"


def _bisect(possible: list[str], culprit: str) -> tuple[str, int]:
    """The halving loop of engine/loops/bisect_blocks.py with a perfect oracle: the symptom goes exactly when a
    bypassed block encloses the culprit."""
    reruns = 0
    while len(possible) > 1:
        cover = covered(choose_half(possible), possible)
        reruns += 1
        possible = cover if culprit in cover else [p for p in possible if p not in cover]
    return possible[0], reruns


_paths = st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=4).map(lambda p: "m." + ".".join(p)),
                  min_size=1, max_size=30, unique=True)


@settings(max_examples=60, deadline=None)
@given(_paths)
def test_every_half_covers_exactly_floor_half(paths: list[str]) -> None:
    paths = sorted(paths, key=lambda p: -p.count("."))  # innermost first, as hooks record them
    chosen = choose_half(paths)
    assert len(covered(chosen, paths)) == len(paths) // 2
    assert len(set(chosen)) == len(chosen) and set(chosen) <= set(paths)


@settings(max_examples=60, deadline=None)
@given(_paths, st.data())
def test_a_single_culprit_is_isolated_within_the_budget(paths: list[str], data: st.DataObject) -> None:
    culprit = data.draw(st.sampled_from(paths))
    found, reruns = _bisect(paths, culprit)
    assert found == culprit
    assert reruns <= (math.ceil(math.log2(len(paths))) if len(paths) > 1 else 0)
    assert reruns + 1 <= budget(len(paths))  # one re-run left to confirm the culprit alone
