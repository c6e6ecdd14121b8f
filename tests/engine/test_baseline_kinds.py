"""Baselines of the new kinds of call: `baseline build` makes img2img (and inpaint, ControlNet, LoRA) baselines, their
key says what changes activations without moving the key of text-to-image baselines, an img2img run is judged by the
img2img baseline (a silent ghost in it flagged, a healthy one not), one of another kind only by its text encoder, and
a build that cannot run is refused up front in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer.analysis.baseline import Baseline, baseline_key, settings_of
from ghostviewer.analysis.baseline_match import plan_match
from ghostviewer.analysis.baseline_store import SHIPPED_BASELINES
from ghostviewer.cli import main
from ghostviewer.engine.loops.baseline_build import build_baseline
from ghostviewer.engine.run.baseline_lookup import identity_of, key_settings
from ghostviewer.engine.run.runner import execute_run
from ghostviewer.spec import RunSpec

PROMPTS = ["a red circle on a blue background", "a green square on a white background",
           "a yellow triangle on a black background", "a blue star on an orange background"]
# two-step runs of white or black backgrounds may be judged saturated: the LoRA and ControlNet builds use others
COLOURFUL = ["a red circle on a blue background", "a yellow triangle on a green background",
             "a blue star on an orange background", "a green cross on a red background",
             "an orange square on a blue background"]
STEPS, STRENGTH = 4, 0.75  # int(4 × 0.75) = 3 denoising steps


def _init_images(folder: Path) -> list[Path]:
    """Two init images: a demo-like picture (a disc on a plain background) and a plain one."""
    yy, xx = np.mgrid[:64, :64]
    disc = np.where(((yy - 30) ** 2 + (xx - 34) ** 2 < 300)[..., None], (200, 40, 40), (40, 60, 200)).astype(np.uint8)
    paths = [folder / "disc.png", folder / "plain.png"]
    Image.fromarray(disc).save(paths[0])
    Image.fromarray(np.full((64, 64, 3), (230, 220, 40), np.uint8)).save(paths[1])
    return paths


@pytest.fixture(scope="module")
def img2img(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One img2img baseline, built once: 4 prompts × 3 seeds, rows naming their init image (from the list's folder)."""
    folder = tmp_path_factory.mktemp("img2img")
    inits = _init_images(folder)
    rows = folder / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": p, "init_image": inits[i % 2].name}) + "\n"
                            for i, p in enumerate(PROMPTS)))
    runs_dir = folder / "runs"
    built = build_baseline(demo_loaded, rows, [0, 1, 2], runs_dir, steps=STEPS, call={"strength": STRENGTH})
    return {"built": built, "runs_dir": runs_dir, "init": inits[0]}


def _img2img_run(loaded, state: dict, seed: int, **changes) -> dict:
    spec = RunSpec(prompt=PROMPTS[0], seed=seed, steps=STEPS, init_image=str(state["init"]), strength=STRENGTH)
    return execute_run(loaded, spec.updated(**changes) if changes else spec, state["runs_dir"])


def test_an_img2img_baseline_flags_a_silent_ghost_a_healthy_img2img_run_does_not(demo_loaded, img2img) -> None:
    built = img2img["built"]
    assert built["healthy"] >= 8 and built["settings"]["kind"] == "img2img" and built["settings"]["strength"] == 0.75
    healthy = _img2img_run(demo_loaded, img2img, seed=7)
    assert healthy["baseline"]["match"] == "exact" and healthy["baseline"]["key"] == built["key"]
    assert healthy["first_anomaly"] is None and healthy["verdict"]["label"] == "ok"
    ghost = _img2img_run(demo_loaded, img2img, seed=7, faults=["scaled-block"])  # ×1.5, no NaN: silent
    assert ghost["baseline"]["match"] == "exact"
    assert ghost["first_anomaly"] is not None and ghost["first_anomaly"]["kind"] == "drift"
    # named at the scaled resnet or the U-Net block after it (the envelope of 12 runs is wider than the shipped one's)
    assert ghost["first_anomaly"]["phase"] == "denoise" and ghost["first_anomaly"]["module"].startswith("unet.")


def test_other_kinds_and_strengths_are_judged_by_the_text_encoder_only(demo_loaded, img2img) -> None:
    other = _img2img_run(demo_loaded, img2img, seed=7, strength=0.5)  # its own kind, another strength
    assert other["baseline"]["key"] == img2img["built"]["key"] and other["baseline"]["judged"] == ["encode"]
    assert any(d.startswith("strength 0.5 vs 0.75: only the text encoder") for d in other["baseline"]["differences"])
    plain = execute_run(demo_loaded, RunSpec(prompt=PROMPTS[0], seed=7, steps=STEPS, init_image=str(img2img["init"]),
                                             mask=str(img2img["init"])), img2img["runs_dir"])  # inpaint: no baseline
    judged = plain["baseline"]
    assert judged["judged"] == ["encode"] and judged["differences"][0].startswith("kind inpaint vs ")
    assert plain["first_anomaly"] is None


def test_a_text_to_image_key_is_unchanged_and_the_call_is_in_the_key(demo_loaded) -> None:
    (shipped,) = sorted(SHIPPED_BASELINES.glob("*.json"))
    resolved = {**RunSpec(prompt="x").to_dict(), "scheduler": "ddim", "width": 64, "height": 64, "guidance": 7.5}
    assert baseline_key(identity_of(demo_loaded), key_settings(demo_loaded, resolved)) == shipped.stem
    img2img = settings_of({**resolved, "kind": "img2img", "strength": 0.8})
    assert img2img["kind"] == "img2img" and img2img["strength"] == 0.8
    assert settings_of({**resolved, "adapters": ["a.safetensors:0.5", "b.safetensors"], "fuse_lora": True})[
        "lora_scales"] == [0.5, 1.0]
    keys = {baseline_key({}, {**resolved, **call}) for call in (
        {}, {"kind": "img2img", "strength": 0.8}, {"kind": "img2img", "strength": 0.5}, {"batch": 2},
        {"kind": "controlnet", "controlnet_scale": 0.5}, {"adapters": ["a.safetensors:0.5"]},
        {"adapters": ["a.safetensors:0.5"], "fuse_lora": True})}
    assert len(keys) == 7


def test_other_lora_scales_are_judged_as_other_weights() -> None:
    settings = {"scheduler": "ddim", "steps": 4, "width": 64, "height": 64, "dtype": "float32", "guidance": 7.5}
    identity = {"class": "StableDiffusionPipeline", "weight_hashes": {"unet": "u", "lora_0": "l"}}
    built = Baseline(identity, {**settings, "lora_scales": [1.0]}, 4, {}, None)
    plan = plan_match(built, identity, {}, settings_of({**settings, "adapters": ["x.safetensors:0.5"]}))
    assert not isinstance(plan, str) and plan.weights_differ and plan.match == "architecture"
    assert plan.differences == ("LoRA scales [0.5] vs [1.0]: judged as other weights",)


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("refusals")
    _init_images(folder)
    (folder / "broken.png").write_text("not an image")
    return folder


@pytest.mark.parametrize("rows, flags, words", [
    ([{"prompt": PROMPTS[0], "init_image": "nope.png"}], [], "init_image nope.png: no such file"),
    ([{"prompt": PROMPTS[0], "init_image": "broken.png"}], [], "rows.jsonl entry 1: --init-image "),
    ([{"prompt": PROMPTS[0]}], ["--mask", "{folder}/plain.png"], "--mask needs --init-image"),
    ([{"prompt": PROMPTS[0], "init_image": "plain.png"}], ["--strength", "0.2"],
     "strength 0.2 with 4 steps runs int(4 × 0.2) = 0 denoising steps"),
    ([{"prompt": PROMPTS[0]}, {"prompt": PROMPTS[1], "init_image": "plain.png"}], [],
     "rows.jsonl entry 2: kind img2img where the first run has text2img: a baseline is one kind of call"),
])
def test_a_build_that_cannot_run_is_refused_up_front(refusals: Path, tmp_path: Path, capsys, rows: list[dict],
                                                     flags: list[str], words: str) -> None:
    listed = refusals / "rows.jsonl"
    listed.write_text("".join(json.dumps(row) + "\n" for row in rows))
    runs_dir = tmp_path / "runs"
    code = main(["baseline", "build", "--pipeline", "demo", "--prompts", str(listed), "--seeds", "0-2", "--steps",
                 str(STEPS), "--runs-dir", str(runs_dir), *(f.format(folder=refusals) for f in flags)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err
    assert not runs_dir.exists() or not any(runs_dir.iterdir())  # nothing ran, no study


@pytest.fixture(scope="module")
def adapters(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A LoRA file and a saved ControlNet for the demo, and a control image."""
    from tests.engine.tiny_controlnet import build_controlnet, control_image, save_controlnet
    from tests.engine.tiny_lora import lora_states, save_lora

    folder = tmp_path_factory.mktemp("adapters")
    _, good = lora_states(demo_loaded.pipe.unet)
    control_image().save(folder / "control.png")
    return {"lora": save_lora(good, folder, "good.safetensors"), "control": folder / "control.png",
            "controlnet": save_controlnet(build_controlnet(demo_loaded.pipe), folder / "controlnet")}


def _cli_build(runs_dir: Path, capsys, *flags: str) -> dict:
    code = main(["baseline", "build", "--pipeline", "demo", "--prompts", str(runs_dir.parent / "few.txt"),
                 "--seeds", "0-1", "--steps", "2", "--runs-dir", str(runs_dir), "--json", *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


@pytest.mark.parametrize("kind", ["lora", "controlnet"])
def test_cli_builds_lora_and_controlnet_baselines_that_their_runs_find(demo_loaded, adapters, tmp_path: Path,
                                                                       capsys, kind: str) -> None:
    (tmp_path / "few.txt").write_text("\n".join(COLOURFUL) + "\n")
    runs_dir = tmp_path / "runs"
    if kind == "lora":
        flags = ["--lora", f"{adapters['lora']}:0.5"]
        spec = RunSpec(prompt=PROMPTS[1], seed=9, steps=2, adapters=(f"{adapters['lora']}:0.5",))
        other = spec.updated(adapters=[f"{adapters['lora']}:1.0"])
        said = "LoRA scales [1.0] vs [0.5]: judged as other weights"
    else:
        flags = ["--control-image", str(adapters["control"]), "--controlnet", str(adapters["controlnet"])]
        spec = RunSpec(prompt=PROMPTS[1], seed=9, steps=2, control_image=str(adapters["control"]),
                       controlnet=str(adapters["controlnet"]))
        other = spec.updated(controlnet_scale=0.5)
        said = "ControlNet scale 0.5 vs 1.0: only the text encoder compared"
    built = _cli_build(runs_dir, capsys, *flags)
    assert built["healthy"] >= 8 and ("lora_scales" in built["settings"] or built["settings"]["kind"] == "controlnet")
    found = execute_run(demo_loaded, spec, runs_dir)
    # (whether it drifts is not asked: an envelope of 8 two-step runs is too narrow to spare every healthy run)
    assert found["baseline"]["match"] == "exact" and found["baseline"]["key"] == built["key"]
    nearest = execute_run(demo_loaded, other, runs_dir)["baseline"]
    assert nearest["key"] == built["key"] and said in nearest["differences"][0], nearest
    plain = execute_run(demo_loaded, RunSpec(prompt=PROMPTS[1], seed=9, steps=2), runs_dir)
    assert (plain["baseline"] or {}).get("key") != built["key"]  # a text-to-image run of the pipeline alone
