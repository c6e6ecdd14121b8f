"""Judgement that travels: a weight-edited copy of the demo (no hooks) is judged by the demo's baseline by
architecture and says so; --baseline FILE chooses one; --reference names where the copy leaves a known-good run."""

from __future__ import annotations

from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.analysis.baseline_store import SHIPPED_BASELINES
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR
from ghostviewer.record import RunRecord
from tests.engine.edited_demo import edited_demo

PROMPT = "a red circle on a blue background"


def _vae_cast(t: dict) -> None:  # type: ignore[type-arg]
    t["decoder.conv_out.bias"][0] += 0.4
    t["decoder.conv_out.bias"][2] -= 0.4


def test_a_copy_with_edited_weights_is_judged_by_architecture_and_says_how(tmp_path: Path) -> None:
    folder = edited_demo(tmp_path, "vae-cast", "vae/diffusion_pytorch_model.safetensors", _vae_cast)
    result = api.run(str(folder), PROMPT, seed=3, runs_dir=tmp_path / "runs")
    judged = result["baseline"]
    assert judged["match"] == "architecture" and judged["file"].endswith("6cfa9657ba199fbf.json")
    assert judged["differences"] == ["weights of vae differ from the baseline's"]
    assert result["verdict"]["label"] in ("color_cast", "off_prompt") and "background" in result["verdict"]["reason"]
    assert result["verdict"]["prompt_check"] == {"judged": True}  # the demo's vocabulary: its colour check applies
    notes = [e.message for e in RunRecord(result["run_dir"]).events(kind="baseline")]
    assert any("of the same architecture" in n and "weights of vae differ" in n for n in notes)


def test_the_demo_keeps_its_exact_baseline_and_other_steps_use_normalised_time(tmp_path: Path) -> None:
    result = api.run("demo", PROMPT, seed=3, runs_dir=tmp_path)
    assert result["baseline"]["match"] == "exact" and result["verdict"]["label"] == "ok"
    # 14 steps: another count than the baseline's 20, near the low end of STEPS_RATIO (less work than above it)
    result = api.run("demo", PROMPT, seed=3, steps=14, runs_dir=tmp_path)
    assert result["baseline"]["differences"] == ["steps 14 vs 20: compared on normalised time"]
    assert result["verdict"]["label"] == "ok" and result["first_anomaly"] is None


def test_a_baseline_file_is_chosen_explicitly_and_a_bad_one_refused(tmp_path: Path) -> None:
    shipped = next(SHIPPED_BASELINES.glob("*.json"))
    # 14 steps: still judged in every phase by the 20-step file (STEPS_RATIO), so its prompt check is made
    result = api.run("demo", "a photo of a cat", seed=1, steps=14, runs_dir=tmp_path, baseline=shipped)
    assert result["baseline"]["given"] is True and result["baseline"]["file"] == str(shipped)
    assert result["verdict"]["prompt_check"]["judged"] is False
    assert "names no palette colour" in result["verdict"]["prompt_check"]["reason"]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(GhostError, match="not a GhostViewer baseline"):
        api.run("demo", PROMPT, seed=1, runs_dir=tmp_path, baseline=tmp_path / "bad.json")


def test_a_reference_names_where_the_suspect_leaves_its_range(tmp_path: Path) -> None:
    def scale(t: dict) -> None:  # type: ignore[type-arg]
        t["mid_block.resnets.0.conv2.weight"] *= 20.0
        t["mid_block.resnets.0.conv2.bias"] *= 20.0

    folder = edited_demo(tmp_path, "scaled", "unet/diffusion_pytorch_model.safetensors", scale)
    # 4 steps: the suspect and its reference run with the same settings, and the departure is at step 0
    result = api.run(str(folder), PROMPT, seed=2, steps=4, runs_dir=tmp_path / "runs", reference="demo")
    side = result["reference"]
    assert Path(side["run_dir"]).is_dir() and side["source"] == "demo"
    departure = side["first_departure"]
    assert departure["module"].startswith("unet.mid_block.resnets.0") and departure["step"] == 0
    assert departure["ratio"] > 2 and "leaves the reference's range" in side["summary"]
    healthy = api.run("demo", PROMPT, seed=2, steps=4, runs_dir=tmp_path / "runs",
                      reference=str(DEMO_PIPELINE_DIR))
    assert healthy["reference"]["first_departure"] is None


def test_cli_run_takes_a_baseline_file_and_refuses_a_bad_one_in_one_line(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import json

    from ghostviewer.cli import main

    shipped = next(SHIPPED_BASELINES.glob("*.json"))
    code = main(["run", "--pipeline", "demo", "--prompt", PROMPT, "--seed", "4", "--runs-dir", str(tmp_path),
                 "--baseline", str(shipped), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["baseline"]["given"] is True and out["baseline"]["match"] == "exact"
    (tmp_path / "bad.json").write_text("[]")
    assert main(["run", "--pipeline", "demo", "--prompt", PROMPT, "--runs-dir", str(tmp_path),
                 "--baseline", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "not a GhostViewer baseline" in err and "Traceback" not in err
