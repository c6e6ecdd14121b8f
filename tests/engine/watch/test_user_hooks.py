"""A watched call records the user's own code on the pipeline's modules (forward hooks, pre-hooks, a forward set on an
instance) — never GhostViewer's — and a replay or bisection from the folder that does not reproduce says that a
pipeline loaded from the folder lacks it; on the object the hooks are on, the replay reproduces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import ghostviewer
from ghostviewer import api
from ghostviewer.record import RunRecord

PROMPT = "a red circle on a blue background"


def _nan_from_step_1():  # noqa: ANN202 - a user's forward hook that breaks the U-Net's up block after one step
    calls = {"n": 0}

    def poison(_module, _args, output):  # noqa: ANN001, ANN202
        calls["n"] += 1
        return output if calls["n"] <= 2 else torch.full_like(output, float("nan"))  # 2 calls a step (CFG)

    return poison


def _watched(pipe, runs_dir: Path) -> dict:  # noqa: ANN001
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        pipe(PROMPT, num_inference_steps=3, generator=torch.Generator().manual_seed(2), output_type="np")
    (run,) = watcher.runs
    return run


def _watched_with_poison(pipe, runs_dir: Path) -> dict:  # noqa: ANN001
    """A watched call whose U-Net up block a hook of the user's breaks from step 1 (the hook removed after)."""
    handle = pipe.unet.up_blocks[1].register_forward_hook(_nan_from_step_1())
    try:
        return _watched(pipe, runs_dir)
    finally:
        handle.remove()


def test_the_users_hooks_are_in_the_call_record_and_ghostviewers_are_not(demo_loaded, tmp_path: Path) -> None:
    pipe = demo_loaded.pipe
    assert RunRecord(_watched(pipe, tmp_path / "plain")["run_dir"]).call["user_hooks"] == []
    hook = pipe.unet.up_blocks[1].register_forward_hook(lambda _m, _a, output: output)
    pre = pipe.vae.decoder.register_forward_pre_hook(lambda _m, args: args)
    try:
        hooks = RunRecord(_watched(pipe, tmp_path / "hooked")["run_dir"]).call["user_hooks"]
    finally:
        hook.remove()
        pre.remove()
    assert sorted((h["module"], h["kind"]) for h in hooks) == [("unet.up_blocks.1", "forward hook"),
                                                                ("vae.decoder", "forward pre-hook")]
    assert all(not name.startswith("ghostviewer") for name in (h["name"] for h in hooks))


def test_a_replay_from_the_folder_names_the_hooks_it_lacks_and_the_object_reproduces(demo_loaded,
                                                                                      tmp_path: Path) -> None:
    pipe = demo_loaded.pipe
    run = _watched_with_poison(pipe, tmp_path / "watched")
    assert run["first_anomaly"]["module"] == "unet.up_blocks.1"
    report = api.replay(run["run_dir"], times=1, runs_dir=tmp_path / "replays")  # the demo folder: no hook
    assert not report["reproduced"] and "re-run it with pipeline=" in report["summary"]
    assert "poison on unet.up_blocks.1" in report["summary"] and report["user_hooks"][0]["module"] == "unet.up_blocks.1"

    result = api.bisect(run["run_dir"], runs_dir=tmp_path / "bisect")
    assert result["culprit"] is None and "re-run it with pipeline=" in result["reason"]

    handle = pipe.unet.up_blocks[1].register_forward_hook(_nan_from_step_1())
    try:
        again = api.replay(run["run_dir"], times=1, pipeline=pipe, runs_dir=tmp_path / "on-the-object")
    finally:
        handle.remove()
    assert again["reproduced"] and "user_hooks" not in again


def _counting_hook():  # noqa: ANN202 - the user's state: the 2nd text-encoder call of theirs comes out halved
    calls = {"n": 0}

    def halve_the_second(_module, _args, output):  # noqa: ANN001, ANN202
        calls["n"] += 1
        return (output[0] * 0.5, *output[1:]) if calls["n"] == 2 else output

    return halve_the_second, calls


def test_a_hook_that_counts_calls_sees_the_same_calls_watched_as_unwatched(demo_loaded, tmp_path: Path) -> None:
    """GhostViewer's own text-encoder call (the prompt's embeddings) is not one of the user's: watching must not
    move a stateful user fault to another call."""
    pipe = demo_loaded.pipe

    def call():  # noqa: ANN202
        return pipe(PROMPT, num_inference_steps=2, generator=torch.Generator().manual_seed(5), output_type="np").images

    hook, plain_calls = _counting_hook()
    handle = pipe.text_encoder.register_forward_hook(hook)
    try:
        plain = call()
    finally:
        handle.remove()
    hook, watched_calls = _counting_hook()
    handle = pipe.text_encoder.register_forward_hook(hook)
    try:
        with ghostviewer.watch(pipe, runs_dir=tmp_path / "runs-for-counting") as watcher:
            watched = call()
        assert pipe.text_encoder._forward_hooks  # put back after GhostViewer's own call
    finally:
        handle.remove()
    assert not pipe.text_encoder._forward_hooks  # the user's handle still removes it
    assert watched_calls["n"] == plain_calls["n"] and np.array_equal(watched, plain)
    assert RunRecord(watcher.runs[0]["run_dir"]).call["user_hooks"][0]["module"] == "text_encoder"


def test_an_isolation_on_the_folders_pipeline_names_the_hooks_it_lacks(demo_loaded, tmp_path: Path,
                                                                       capsys) -> None:  # noqa: ANN001
    from ghostviewer.cli import main

    pipe = demo_loaded.pipe
    run = _watched_with_poison(pipe, tmp_path / "watched")
    capsys.readouterr()
    assert main(["isolate", run["run_dir"], "--module", "unet.up_blocks.1", "--step", "2", "-o",
                 str(tmp_path / "iso")]) == 0  # healthy here: the fault was the hook's
    assert "note: the watched pipeline had code of your own" in capsys.readouterr().out
    result = api.isolate(run["run_dir"], module="unet.up_blocks.1", step=2, out=tmp_path / "iso-api")
    assert result["output"]["nan"] == 0 and "poison on unet.up_blocks.1" in result["missing_user_code"]
    handle = pipe.unet.up_blocks[1].register_forward_hook(_nan_from_step_1())
    try:
        on_object = api.isolate(run["run_dir"], module="unet.up_blocks.1", step=2, out=tmp_path / "iso2",
                                pipeline=pipe)
    finally:
        handle.remove()
    assert "missing_user_code" not in on_object
