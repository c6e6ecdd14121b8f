"""GhostViewer's own LoRA runs on the demo pipeline, with tiny LoRAs made by PEFT on the demo U-Net's attention
projections: the LoRA changes the image and is recorded (file, sha256, scale), is always unloaded after the run (the
next plain run gives the plain image bit for bit, the pipeline's weights, modules and flags as before — fused or
not), fused and unfused give close images, the run replays bit-identical, a zero-B LoRA or a zero scale is named "LoRA
has no effect", adapters found loaded are named "LoRA left loaded" (GhostViewer's run and a watched call), and every
bad input is refused before anything runs, in one line (exit 2 from the command line)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

import ghostviewer
from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.engine.loading.pipelines import load_pipeline
from ghostviewer.record import RunRecord
from ghostviewer.spec import UserError
from ghostviewer.spec.prompt_lists import ListOptions
from tests.engine.tiny_lora import lora_states, save_lora

PROMPT = "a red circle on a blue background"
STEPS = 2  # every claim here is about the LoRA's effect and its unloading, which show from the first step


@pytest.fixture(scope="module")
def files(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """LoRAs made with PEFT on a copy of the demo U-Net: `zero` as PEFT initialises it (lora_B all zeros), `good`
    with a random lora_B, `nan` with a NaN in one lora_B; and the bad files: keys of another model, a pickle."""
    root = tmp_path_factory.mktemp("loras")
    state, good = lora_states(demo_loaded.pipe.unet)
    nan = {k: v.clone() for k, v in good.items()}
    next(v for k, v in nan.items() if "lora_B" in k)[0, 0] = float("nan")
    paths = {"zero": save_lora(state, root, "zero.safetensors"), "good": save_lora(good, root, "good.safetensors"),
             "nan": save_lora(nan, root, "nan.safetensors")}
    key = next(k for k in good if "lora_A" in k)
    paths["other"] = root / "other.safetensors"
    save_file({f"unet.{key.replace('down_blocks.1', 'down_blocks.7')}": good[key]}, paths["other"])
    paths["pickle"] = root / "pickle.safetensors"
    torch.save({f"unet.{key}": good[key]}, paths["pickle"])
    return paths


def _pixels(path: str | Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _run(pipe: Any, runs_dir: Path, **kwargs: Any) -> dict[str, Any]:
    return api.run(pipe, PROMPT, steps=STEPS, seed=1, runs_dir=runs_dir, **kwargs)


def _state(pipe: Any) -> dict[str, Any]:
    """Everything a LoRA run could leave behind on the pipeline: module names, weights, grad flags."""
    return {name: ([n for n, _ in module.named_modules()],
                   {k: v.detach().clone() for k, v in module.state_dict().items()},
                   [p.requires_grad for p in module.parameters()])
            for name, module in pipe.components.items() if isinstance(module, torch.nn.Module)}


def _same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        a[n][0] == b[n][0] and a[n][2] == b[n][2] and a[n][1].keys() == b[n][1].keys()
        and all(torch.equal(a[n][1][k], b[n][1][k]) for k in a[n][1]) for n in a)


@pytest.fixture(scope="module")
def plain(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    return _pixels(_run(demo_loaded.pipe, tmp_path_factory.mktemp("plain"))["image"])


def test_a_lora_run_changes_the_image_is_recorded_and_unloaded(demo_loaded, runs_dir: Path, files, plain) -> None:
    pipe = demo_loaded.pipe
    before = _state(pipe)
    result = _run(pipe, runs_dir, lora=[f"{files['good']}:0.8"])
    assert not np.array_equal(_pixels(result["image"]), plain)
    record = RunRecord(result["run_dir"])
    assert record.settings["adapters"] == [f"{files['good'].resolve()}:0.8"]
    assert "fuse_lora" not in record.settings
    (lora,) = record.environment["loras"]
    assert lora["sha256"] == hashlib.sha256(files["good"].read_bytes()).hexdigest()
    assert (lora["scale"], lora["fused"], lora["components"]) == (0.8, False, ["unet"])
    assert not record.events(kind="lora")  # a LoRA that does something, nothing left loaded: no finding
    # Unloaded: the pipeline exactly as before, and the next plain run the plain image bit for bit.
    assert _same_state(before, _state(pipe))
    after = _run(pipe, runs_dir)
    assert np.array_equal(_pixels(after["image"]), plain)
    assert "adapters" not in RunRecord(after["run_dir"]).settings  # a plain record reads as it always has
    report = api.replay(result["run_dir"], times=1, pipeline=pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True and report["first_divergence"] is None
    assert _same_state(before, _state(pipe))


def test_fused_and_unfused_give_close_images_and_fusing_leaves_no_trace(demo_loaded, runs_dir: Path,
                                                                        files) -> None:
    pipe = demo_loaded.pipe
    before = _state(pipe)
    unfused = _run(pipe, runs_dir, lora=[f"{files['good']}:0.8"])
    fused = _run(pipe, runs_dir, lora=[f"{files['good']}:0.8"], fuse_lora=True)
    assert RunRecord(fused["run_dir"]).settings["fuse_lora"] is True
    assert RunRecord(fused["run_dir"]).environment["loras"][0]["fused"] is True
    difference = np.abs(_pixels(fused["image"]).astype(int) - _pixels(unfused["image"]).astype(int))
    assert difference.max() <= 2, difference.max()  # float rounding of W + s·BA against W·x + s·B·A·x
    assert _same_state(before, _state(pipe))  # the weights put back bit for bit, not unfused by subtraction
    report = api.replay(fused["run_dir"], times=1, pipeline=pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True


def test_a_lora_that_changes_nothing_is_named(demo_loaded, runs_dir: Path, files, plain) -> None:
    zero = _run(demo_loaded.pipe, runs_dir, lora=[str(files["zero"])])
    assert np.array_equal(_pixels(zero["image"]), plain)
    (finding,) = RunRecord(zero["run_dir"]).events(kind="lora")
    assert finding.message.startswith("LoRA has no effect:") and "lora_B weights are all zeros" in finding.message
    assert finding.data["finding"] == "lora_no_effect" and finding.data["file"] == str(files["zero"].resolve())
    assert finding.data["max_lora_B"] == 0 and finding.data["layers"] > 0
    off = _run(demo_loaded.pipe, runs_dir, lora=[f"{files['good']}:0"])
    (finding,) = RunRecord(off["run_dir"]).events(kind="lora")
    assert "its scale is 0" in finding.message and finding.data["scales"] == [0.0]


@pytest.fixture
def own_pipe() -> Any:
    """A demo pipeline of this test's own: the test leaves adapters on it."""
    return load_pipeline("demo", device="cpu").pipe


def test_adapters_found_loaded_are_named_and_a_lora_run_on_them_refused(own_pipe: Any, runs_dir: Path,
                                                                         files) -> None:
    own_pipe.load_lora_weights(str(files["good"]), adapter_name="users")
    result = _run(own_pipe, runs_dir)
    (finding,) = [e for e in RunRecord(result["run_dir"]).events(kind="lora")
                  if e.data["finding"] == "lora_left_loaded"]
    assert "already had LoRA adapters loaded before the run (unet: users)" in finding.message
    assert finding.data["how"] == "preexisting"
    with pytest.raises(UserError, match=r"already has LoRA adapters loaded \(unet: users\)"):
        _run(own_pipe, runs_dir, lora=[str(files["zero"])])
    assert own_pipe.get_list_adapters() == {"unet": ["users"]}  # the user's adapter left as it was


@pytest.mark.parametrize("removal, words", [
    ("unload_lora_weights", "LoRA left loaded: style was fused into the weights and then unloaded without"),
    ("delete_adapters", "LoRA left loaded: adapter 'style' is fused into 56 layers of the unet though it is no "
                        "longer an active adapter"),
], ids=["unloaded", "deleted"])
def test_a_watched_call_after_a_fused_lora_was_removed_names_it_left_loaded(own_pipe: Any, runs_dir: Path, files,
                                                                            removal: str, words: str) -> None:
    own_pipe.set_progress_bar_config(disable=True)
    own_pipe.load_lora_weights(str(files["good"]), adapter_name="style")
    own_pipe.fuse_lora(components=["unet"])
    # without unfuse_lora() first: the fused change stays in the weights
    own_pipe.unload_lora_weights() if removal == "unload_lora_weights" else own_pipe.delete_adapters("style")
    with ghostviewer.watch(own_pipe, runs_dir=runs_dir) as watcher:
        own_pipe(PROMPT, num_inference_steps=2, output_type="np", generator=torch.Generator().manual_seed(1))
    (run,) = watcher.runs
    (finding,) = RunRecord(run["run_dir"]).events(kind="lora")
    assert finding.message.startswith(words), finding.message
    assert finding.data["finding"] == "lora_left_loaded"
    assert finding.data["how"] == ("fused_unloaded" if removal == "unload_lora_weights" else "fused_inactive")


def test_a_nan_fuse_is_refused_and_leaves_the_pipeline_as_it_was(demo_loaded, runs_dir: Path, files) -> None:
    before = _state(demo_loaded.pipe)
    with pytest.raises(UserError) as refused:
        _run(demo_loaded.pipe, runs_dir, lora=[str(files["nan"])], fuse_lora=True)
    assert "gives NaN weights (diffusers' safe_fusing refused it)" in str(refused.value)
    assert "\n" not in str(refused.value) and not list(runs_dir.iterdir())
    assert _same_state(before, _state(demo_loaded.pipe))


@pytest.mark.parametrize("lora, words", [
    ("{missing}", r"--lora .*nope\.safetensors: no such file"),
    ("{pickle}", r"not a safetensors file .* never from pickle"),
    ("{good}:strong", r"the scale 'strong' is not a number"),
    ("{good}:nan", "the scale must be a finite number"),
    ("{other}", r"its key 'unet\.down_blocks\.7\..*lora_A\.weight' matches no module of the pipeline's unet "
                r"\(UNet2DConditionModel\)"),
    ("{folder}", "not a file"),
], ids=["missing", "pickle", "scale-word", "scale-nan", "other-model", "folder"])
def test_the_command_line_refuses_bad_loras_in_one_line(runs_dir: Path, files, capsys, lora: str,
                                                        words: str) -> None:
    paths = {**{k: str(v) for k, v in files.items()}, "missing": str(runs_dir / "nope.safetensors"),
             "folder": str(runs_dir)}
    argv = ["run", "--prompt", PROMPT, "--steps", str(STEPS), "--runs-dir", str(runs_dir), "--lora",
            lora.format(**paths)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(words, err[0]), err
    assert not list(runs_dir.iterdir())


def test_the_command_line_runs_loras_and_says_what_it_found(runs_dir: Path, files, capsys) -> None:
    argv = ["run", "--prompt", PROMPT, "--steps", str(STEPS), "--runs-dir", str(runs_dir)]
    assert main([*argv, "--fuse-lora"]) == 2
    assert "--fuse-lora needs a --lora FILE" in capsys.readouterr().err
    assert main([*argv, "--lora", f"{files['good']}:0.5", "--lora", str(files["zero"]), "--fuse-lora"]) == 0
    out = capsys.readouterr().out
    assert "verdict: ok" in out and "finding: LoRA has no effect:" in out and "zero.safetensors" in out
    (run,) = runs_dir.iterdir()
    settings = RunRecord(run).settings
    assert settings["adapters"] == [f"{files['good'].resolve()}:0.5", f"{files['zero'].resolve()}:1.0"]
    assert settings["fuse_lora"] is True


def test_a_sweep_row_names_its_lora(demo_loaded, tmp_path: Path, runs_dir: Path, files, plain) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(f"prompt,lora\n{PROMPT},\n{PROMPT},{files['good']}:0.8\n")
    # The LoRA is outside the list's folder: read only because the user allows it (a list of someone else's
    # could otherwise read any file of yours, spec/prompt_lists.py).
    report = api.sweep(rows, seeds="1", source=demo_loaded.pipe, steps=STEPS, runs_dir=runs_dir,
                       list_options=ListOptions(outside_files=True))
    assert report["total"] == 2 and report["failed"] == 0
    plain_run, lora_run = report["runs"]
    assert np.array_equal(_pixels(plain_run["image"]), plain)
    assert RunRecord(lora_run["run_dir"]).settings["adapters"] == [f"{files['good'].resolve()}:0.8"]
    assert not np.array_equal(_pixels(lora_run["image"]), plain)
