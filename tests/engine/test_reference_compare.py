"""A known-good model beside the suspect: `compare A B --reference SRC` re-runs the suspect's call on it, and the
same-inputs lockstep locates weight edits that move no whole-tensor statistic (a GroupNorm gain cut, two VAE
channels swapped) at the module that holds them; a failed weight audit is named as a run's likely cause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.engine.judge_model.audit_cite import bad_weights
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR, load_pipeline
from ghostviewer.engine.run.reference_run import suspect_of
from ghostviewer.record import RunRecord
from tests.engine.edited_demo import edited_demo

PROMPT = "a red circle on a blue background"
UNET = "unet/diffusion_pytorch_model.safetensors"
VAE = "vae/diffusion_pytorch_model.safetensors"
STEPS = 2  # each departure here is at step 0 or in the decode, each NaN from the first step


def _norm_gain(t: dict) -> None:  # type: ignore[type-arg]
    t["down_blocks.1.resnets.0.norm2.weight"] *= 0.2


def _swap_channels(t: dict) -> None:  # type: ignore[type-arg]
    for kind in ("weight", "bias"):
        w = t[f"decoder.up_blocks.0.resnets.0.conv2.{kind}"]
        w[[0, 1]] = w[[1, 0]].clone()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A healthy demo run and a run of a copy whose GroupNorm gain was cut (2 steps, same call)."""
    root = tmp_path_factory.mktemp("reference")
    folder = edited_demo(root, "norm-gain", UNET, _norm_gain)
    runs = root / "runs"
    good = api.run("demo", PROMPT, seed=5, steps=STEPS, runs_dir=runs)
    bad = api.run(str(folder), PROMPT, seed=5, steps=STEPS, runs_dir=runs)
    return {"good": Path(good["run_dir"]), "bad": Path(bad["run_dir"]), "root": root}


def test_compare_with_a_reference_locates_a_gain_cut_at_its_resnet(two_runs: dict[str, Path], capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["compare", str(two_runs["good"]), str(two_runs["bad"]), "--reference", "demo", "--json",
                 "--runs-dir", str(two_runs["root"] / "reference-runs")])
    out = json.loads(capsys.readouterr().out)
    side = out["reference"]
    assert code == 1 and side["suspect"] == "b" and side["suspect_run"] == str(two_runs["bad"])
    departure = side["first_departure"]
    assert side["by"] == "same inputs" and side["same_inputs"] is True
    assert departure["module"] == "unet.down_blocks.1.resnets.0" and departure["step"] == 0
    assert departure["ratio"] > departure["limit"] and "leaves the reference's range" in side["summary"]
    assert RunRecord(side["run_dir"]).settings["source"] == "demo"  # the reference's run, where asked
    assert Path(side["run_dir"]).parent == two_runs["root"] / "reference-runs"


def test_a_healthy_pair_stays_in_the_reference_range(two_runs: dict[str, Path], capsys) -> None:  # type: ignore[no-untyped-def]
    other = api.run("demo", PROMPT, seed=6, steps=STEPS, runs_dir=two_runs["root"] / "runs")
    code = main(["compare", str(two_runs["good"]), other["run_dir"], "--reference", str(DEMO_PIPELINE_DIR),
                 "--runs-dir", str(two_runs["root"] / "reference-runs")])
    text = capsys.readouterr().out
    assert code == 1  # the seeds differ; the reference finds nothing
    assert "stays within the reference's range" in text and "reference: run B" in text


def test_the_suspect_is_a_when_only_a_looks_bad(two_runs: dict[str, Path], tmp_path: Path) -> None:
    nan = api.run("demo", PROMPT, seed=7, steps=STEPS, faults=["nan-latents"], runs_dir=tmp_path)  # seed % 10 == 7
    assert nan["verdict"]["label"] != "ok"
    assert suspect_of(nan["run_dir"], two_runs["good"]) == ("a", Path(nan["run_dir"]))
    assert suspect_of(two_runs["good"], nan["run_dir"])[0] == "b"


def test_run_reference_locates_two_swapped_vae_channels(tmp_path: Path) -> None:
    folder = edited_demo(tmp_path, "vae-swap", VAE, _swap_channels)
    result = api.run(str(folder), PROMPT, seed=2, steps=STEPS, runs_dir=tmp_path / "runs", reference="demo")
    side = result["reference"]
    assert side["by"] == "same inputs"
    assert side["first_departure"]["module"] == "vae.decoder.up_blocks.0.resnets.0"
    assert side["first_departure"]["phase"] == "decode" and side["first_departure"]["step"] is None


def test_a_failed_audit_is_named_as_the_first_anomalys_likely_cause(tmp_path: Path) -> None:
    loaded = load_pipeline("demo", device="cpu")  # its own copy: a weight is broken below
    assert bad_weights(loaded.pipe)[0] == []
    assert bad_weights(loaded.pipe)[1]["cached"] == ["vae", "text_encoder", "unet"]  # once per load
    with torch.no_grad():
        loaded.pipe.unet.mid_block.resnets[0].conv1.weight[0, 0, 0, 0] = float("nan")
    findings, cost = bad_weights(loaded.pipe)
    assert cost["audited"] == ["unet"] and [f["kind"] for f in findings] == ["nan"]  # edited in place: read again
    result = api.run(loaded.pipe, PROMPT, seed=1, steps=STEPS, runs_dir=tmp_path)
    anomaly = result["first_anomaly"]
    assert anomaly["module"] == "unet.mid_block.resnets.0" and anomaly["kind"] == "nan"
    cause = anomaly["likely_cause"]
    assert cause["kind"] == "nan" and cause["tensor"] == "mid_block.resnets.0.conv1.weight"
    record = RunRecord(result["run_dir"])
    assert record.first_anomaly["likely_cause"] == cause
    notes = [e.message for e in record.events(kind="audit")]
    assert any(n.startswith("weight audit failed: NaN weights in unet.mid_block.resnets.0.conv1") for n in notes)
    assert any("likely cause of the first anomaly at unet.mid_block.resnets.0" in n for n in notes)


def test_every_bad_weight_is_logged_and_only_the_one_in_the_anomalys_module_cited(tmp_path: Path) -> None:
    loaded = load_pipeline("demo", device="cpu")
    with torch.no_grad():
        loaded.pipe.vae.decoder.conv_out.weight.zero_()  # a dead layer, in the decoder
        loaded.pipe.unet.conv_in.weight[0, 0, 0, 0] = float("inf")
    result = api.run(loaded.pipe, PROMPT, seed=1, steps=STEPS, runs_dir=tmp_path)
    assert result["first_anomaly"]["module"].startswith("unet.conv_in")
    assert result["first_anomaly"]["likely_cause"]["kind"] == "inf"
    notes = [e.message for e in RunRecord(result["run_dir"]).events(kind="audit")]
    assert "a dead (all-zero) layer in vae.decoder.conv_out.weight" in notes[0]
