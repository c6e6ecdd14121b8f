"""Watching the user's own calls on the real demo pipeline: the caller's output unchanged, bit for bit, whatever it
asks for; the call recorded exactly; the pipeline itself again afterwards, however the watch ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import StableDiffusionImg2ImgPipeline
from PIL import Image

import ghostviewer
from ghostviewer.record import RunRecord, StudyRecord, list_entries
from tests.engine.overlapping_calls import call_overlapping
from tests.engine.test_runner import assert_no_leftovers

PROMPT = "a red circle on a blue background, top left"


def _call(pipe, steps: int = 4, seed: int = 3, **kwargs):
    return pipe(PROMPT, num_inference_steps=steps, generator=torch.Generator().manual_seed(seed), **kwargs)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, Image.Image):
        return isinstance(b, Image.Image) and a.mode == b.mode and np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# The demo's own step count (healthy against its 20-step baseline) for numpy output; 4 steps for the other output
# kinds, which the baseline also judges healthy (its time is normalised) at a fifth of the cost.
@pytest.mark.parametrize(("output", "steps"), [({"output_type": "np"}, 20), ({"output_type": "pil"}, 4),
                                               ({"output_type": "pt"}, 4), ({"output_type": "latent"}, 4),
                                               ({"output_type": "np", "return_dict": False}, 4)])
def test_the_callers_output_is_unchanged_bit_for_bit(demo_loaded, runs_dir: Path, output: dict, steps: int) -> None:
    pipe = demo_loaded.pipe
    plain = _call(pipe, steps=steps, **output)
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        watched = _call(pipe, steps=steps, **output)
        assert type(pipe).__name__ == "StableDiffusionPipeline" and type(pipe) is not type(plain)  # the instance's
    assert type(watched) is type(plain)
    if isinstance(plain, tuple):
        assert _same(list(plain), list(watched))
    else:
        assert _same(plain.images, watched.images)
    assert_no_leftovers(pipe)
    assert "_ghostviewer_watcher" not in vars(type(pipe))  # the class is the pipeline's own again
    (run,) = watcher.runs
    record = RunRecord(run["run_dir"])
    assert record.status == "done" and [s.index for s in record.steps()] == list(range(steps))
    assert "unet.mid_block" in record.modules()
    assert run["verdict"]["label"] == "ok" and run["first_anomaly"] is None
    assert len(run["images"]) == (0 if output["output_type"] == "latent" else 1)
    assert record.call == run["call"] and run["call"]["kwargs"]["output_type"] == output["output_type"]


@pytest.mark.parametrize("kind", ["img2img", "inpaint"])
def test_img2img_and_inpaint_built_from_the_demo_are_watched_exactly(demo_loaded, runs_dir: Path, kind: str) -> None:
    from diffusers import StableDiffusionInpaintPipeline

    cls = StableDiffusionImg2ImgPipeline if kind == "img2img" else StableDiffusionInpaintPipeline
    pipe = cls.from_pipe(demo_loaded.pipe)
    init = Image.fromarray(np.full((64, 64, 3), (200, 40, 40), np.uint8))
    kwargs = {"image": init, "strength": 0.5, "output_type": "np"}
    if kind == "inpaint":
        kwargs["mask_image"] = Image.fromarray(np.tile(np.arange(64, dtype=np.uint8)[None] * 4, (64, 1)))
    plain = _call(pipe, steps=8, **kwargs)
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        watched = _call(pipe, steps=8, **kwargs)
    assert np.array_equal(plain.images, watched.images)
    (run,) = watcher.runs
    record = RunRecord(run["run_dir"])
    assert record.settings["kind"] == kind and record.settings["strength"] == 0.5
    if kind == "inpaint":
        mask = record.call["kwargs"]["mask_image"]["$image"]
        assert np.array_equal(np.asarray(Image.open(Path(run["run_dir"]) / mask)),
                              np.asarray(kwargs["mask_image"]))
    assert [s.index for s in record.steps()] == [0, 1, 2, 3]  # strength 0.5 of 8 steps
    image_ref = record.call["kwargs"]["image"]["$image"]
    assert np.array_equal(np.asarray(Image.open(Path(run["run_dir"]) / image_ref)), np.asarray(init))
    assert record.call["kind"] == kind and record.call["generators"][0]["seed"] == 3
    assert_no_leftovers(pipe)


def test_the_callers_callback_still_runs_and_its_tensor_inputs_are_kept(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    seen: list[tuple[int, list[str]]] = []

    def callback(_pipe, index, _timestep, tensors):
        seen.append((index, sorted(tensors)))
        return tensors

    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        _call(pipe, output_type="np", callback_on_step_end=callback,
              callback_on_step_end_tensor_inputs=["prompt_embeds"])
    assert [i for i, _ in seen] == [0, 1, 2, 3]
    assert all(names == ["latents", "prompt_embeds"] for _, names in seen)
    (run,) = watcher.runs
    assert run["call"]["unrecorded"] == ["callback_on_step_end"]  # an opaque callable: named, not dropped
    assert len(RunRecord(run["run_dir"]).steps()) == 4


def test_the_call_is_recorded_with_its_tensors_generators_and_pipeline_state(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    latents = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(1))
    generators = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)]
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        pipe([PROMPT, "a blue square on a green background"], num_inference_steps=2, latents=latents,
             generator=generators, output_type="np", guidance_scale=6.0)
    (run,) = watcher.runs
    record = RunRecord(run["run_dir"])
    call = record.call
    assert call["kwargs"]["prompt"] == [PROMPT, "a blue square on a green background"]
    assert call["kwargs"]["generator"] == [{"$generator": 0}, {"$generator": 1}]
    assert [g["seed"] for g in call["generators"]] == [5, 6]
    stored = record.tensors("call_inputs")
    assert np.array_equal(stored[call["kwargs"]["latents"]["$tensor"]], latents.numpy())
    assert np.array_equal(stored["generator_0_state"], torch.Generator().manual_seed(5).get_state().numpy())
    assert call["scheduler"]["class"] == type(pipe.scheduler).__name__
    assert call["attention_processors"]["unet"] and call["thread"]["main"] is True
    assert record.settings["batch"] == 2 and record.settings["seed"] == 5 and record.settings["guidance"] == 6.0
    assert len(run["images"]) == 2 and len(run["verdicts"]) == 2 and record.verdicts == run["verdicts"]


def test_a_batch_names_the_one_sample_that_went_nan(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe

    def poison(_pipe, index, _timestep, tensors):
        if index == 1:
            latents = tensors["latents"].clone()
            latents[2] = float("nan")
            return {"latents": latents}
        return {}

    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        _call(pipe, num_images_per_prompt=4, output_type="np", callback_on_step_end=poison)
    (run,) = watcher.runs
    assert [v["label"] == "nan" for v in run["verdicts"]] == [False, False, True, False]
    assert run["verdict"]["label"] == "nan"
    first = run["first_anomaly"]  # named where the caller's code made it: its step callback, at step 1
    assert first["kind"] == "nan" and first["step"] == 1 and first["sample"] == 2
    assert first["module"] == "pipeline.callback_on_step_end"
    assert run["sample_anomalies"][2]["step"] == 1 and run["sample_anomalies"][0] is None
    record = RunRecord(run["run_dir"])
    assert any("image 3 of 4" in e.message for e in record.events())
    assert record.tensors("initial_noise")["samples"].shape == (4, 4, 16, 16)  # each image can be re-made alone
    assert record.sample_anomalies == run["sample_anomalies"]


def test_the_pipelines_own_error_reaches_the_caller_and_is_recorded(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        with pytest.raises(ValueError, match="Provide either `prompt` or `prompt_embeds`"):
            pipe(num_inference_steps=2, output_type="np")
    assert_no_leftovers(pipe)
    assert "_ghostviewer_watcher" not in vars(type(pipe))
    assert watcher.summary()["failed"] == 1 and watcher.runs[0]["status"] == "failed"
    assert RunRecord(watcher.runs[0]["run_dir"]).status == "failed"


def test_an_error_in_the_callers_callback_reaches_it_as_raised(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe

    def broken(_pipe, index, _timestep, tensors):
        if index == 1:
            raise RuntimeError("boom") from KeyError("the cause")
        return tensors

    with ghostviewer.watch(pipe, runs_dir=runs_dir, keep="anomalies") as watcher:
        with pytest.raises(RuntimeError, match="boom") as raised:
            _call(pipe, output_type="np", callback_on_step_end=broken)
    assert isinstance(raised.value.__cause__, KeyError)
    record = RunRecord(watcher.runs[0]["run_dir"])  # a failed call is kept whatever the policy
    assert record.status == "failed" and [s.index for s in record.steps()] == [0]
    assert_no_leftovers(pipe)


def test_keep_anomalies_keeps_a_summary_row_of_healthy_calls(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=runs_dir, keep="anomalies") as watcher:
        _call(pipe, steps=20, output_type="np")  # healthy: judged against the demo's baseline, made at 20 steps
        _call(pipe, steps=2, output_type="np", latents=torch.full((1, 4, 16, 16), float("nan")))
    summary = watcher.summary()
    assert {k: summary[k] for k in ("calls", "kept", "failed", "failure_rate")} == {
        "calls": 2, "kept": 1, "failed": 1, "failure_rate": 0.5}
    healthy, bad = watcher.runs
    assert healthy["run_dir"] is None and not healthy["kept"] and bad["kept"]
    assert RunRecord(bad["run_dir"]).first_anomaly is not None
    study = StudyRecord(summary["study_dir"])
    assert study.kind == "watch" and study.status == "done"
    assert [(r.role, r.verdict) for r in study.runs()] == [("summary", "ok"), ("member", "nan")]
    assert [p.name for p in study.runs_dir.iterdir()] == [Path(bad["run_dir"]).name]
    assert [entry.path for entry in list_entries(runs_dir)] == [study.path]  # the history: one row


def test_every_nth_call_and_the_ring(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe  # 4-step calls: judged ok (normalised time against the 20-step baseline), none kept as bad
    with ghostviewer.watch(pipe, runs_dir=runs_dir, keep=2) as every_other:
        for seed in range(4):
            _call(pipe, seed=seed, output_type="np")
    assert [r["kept"] for r in every_other.runs] == [True, False, True, False]
    with ghostviewer.watch(pipe, runs_dir=runs_dir, keep="anomalies", ring=1) as ring:
        for seed in range(3):
            _call(pipe, seed=seed, output_type="np")
    study = StudyRecord(ring.summary()["study_dir"])
    assert len(list(study.runs_dir.iterdir())) == 1 and ring.summary()["calls"] == 3
    # The calls the ring deleted afterwards read as not kept everywhere: their dicts, the counts, the study's rows.
    assert [(r["kept"], r.get("evicted", False)) for r in ring.runs] == [(False, True), (False, True), (True, False)]
    assert ring.runs[0]["run_dir"] is None and ring.summary()["kept"] == 1
    assert [(r.role, r.note) for r in study.runs()] == [("summary", "evicted (ring or max_bytes)")] * 2 + \
        [("member", "")]
    with ghostviewer.watch(pipe, runs_dir=runs_dir, max_bytes=1) as capped:
        for seed in range(2):
            _call(pipe, seed=seed, output_type="np")
    assert len(list(StudyRecord(capped.summary()["study_dir"]).runs_dir.iterdir())) == 1  # the newest stays


def test_two_threads_get_two_records_and_the_overlap_is_a_finding(demo_loaded, runs_dir: Path) -> None:
    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=runs_dir) as watcher:
        call_overlapping(pipe, watcher, _call, {"output_type": "np"}, {"output_type": "np"})
    assert len(watcher.runs) == 2 and all(r["status"] == "done" for r in watcher.runs)
    for run in watcher.runs:
        record = RunRecord(run["run_dir"])
        events = record.events(kind="concurrency")
        assert events and "overlapped" in events[0].message
        # each call's own module statistics, its own thread's: 4 steps of the U-Net's middle block, no more
        assert len(record.stats("unet.mid_block", phase="denoise")) == 4
    assert_no_leftovers(pipe)


def test_a_process_watch_catches_pipelines_made_later(demo_loaded, runs_dir: Path) -> None:
    from diffusers import DiffusionPipeline

    original = DiffusionPipeline.__dict__["register_modules"]
    process = ghostviewer.watch_process(runs_dir=runs_dir, keep="anomalies")
    try:
        made = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
        assert type(made).__dict__.get("_ghostviewer_watcher") is process.watcher
        assert type(demo_loaded.pipe).__dict__.get("_ghostviewer_watcher") is process.watcher  # found, existing
    finally:
        summary = process.stop()
    assert DiffusionPipeline.__dict__["register_modules"] is original
    assert "_ghostviewer_watcher" not in vars(type(demo_loaded.pipe)) and summary["calls"] == 0


@pytest.mark.slow
def test_import_ghostviewer_does_not_import_torch() -> None:
    # `ghostviewer.watch` itself resolving to the engine's is what every watch test here uses
    light = "import sys, ghostviewer; print('torch' in sys.modules, 'watch' in dir(ghostviewer))"
    assert subprocess.run([sys.executable, "-c", light], capture_output=True, text=True).stdout.split() == [
        "False", "True"]


def test_an_unmodified_program_runs_watched_with_its_own_exit_code(tmp_path: Path, runs_dir: Path) -> None:
    """What `ghostviewer record -- python app.py` does: the program's pipelines watched, its exit code kept."""
    import io

    from ghostviewer.engine.loading.pipelines import DEMO_PIPELINE_DIR
    from ghostviewer.engine.watch import run_program

    app = tmp_path / "app.py"
    app.write_text(
        "import sys, torch\n"
        "from diffusers import StableDiffusionPipeline\n"
        f"pipe = StableDiffusionPipeline.from_pretrained({str(DEMO_PIPELINE_DIR)!r})\n"
        "pipe.set_progress_bar_config(disable=True)\n"
        "pipe(sys.argv[1], num_inference_steps=2, generator=torch.Generator().manual_seed(0))\n"
        "sys.exit(3)\n"
    )
    err = io.StringIO()
    code, summary = run_program(["python", str(app), "a red circle"], runs_dir=runs_dir, stderr=err)
    assert code == 3 and summary["calls"] == 1 and summary["kept"] == 1
    assert "1 pipeline calls watched" in err.getvalue()
    (child,) = StudyRecord(summary["study_dir"]).runs()
    assert RunRecord(child.run_dir).settings["prompt"] == "a red circle"


def test_a_program_imports_what_python_would_let_it(tmp_path: Path, runs_dir: Path, monkeypatch) -> None:  # noqa: ANN001
    """A script imports the modules beside it; `-m package` runs a package of the current folder (as `python` puts
    the script's folder, or the current one, first on sys.path); sys.path is as it was afterwards."""
    import io
    import sys

    from ghostviewer.engine.watch import run_program

    app, package = tmp_path / "app" / "main.py", tmp_path / "cwd" / "svc_pkg"
    package.mkdir(parents=True)
    app.parent.mkdir()
    (app.parent / "gv_sibling_helper.py").write_text("CODE = 5\n")
    app.write_text("import sys, gv_sibling_helper\nsys.exit(gv_sibling_helper.CODE)\n")
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import sys\nsys.exit(int(sys.argv[1]))\n")
    before = list(sys.path)
    assert run_program(["python", str(app)], runs_dir=runs_dir, stderr=io.StringIO())[0] == 5
    monkeypatch.chdir(package.parent)
    assert run_program(["python", "-m", "svc_pkg", "6"], runs_dir=runs_dir, stderr=io.StringIO())[0] == 6
    assert sys.path == before


def test_a_wrong_argument_or_a_second_watcher_is_refused_leaving_nothing(demo_loaded, runs_dir: Path) -> None:
    from ghostviewer.engine.errors import GhostError

    with pytest.raises(GhostError, match="takes a diffusers pipeline"):
        ghostviewer.attach("demo", runs_dir=runs_dir)
    with ghostviewer.watch(demo_loaded.pipe, runs_dir=runs_dir):
        with pytest.raises(GhostError, match="already watched"):
            ghostviewer.attach(demo_loaded.pipe, runs_dir=runs_dir)
    assert len(list_entries(runs_dir)) == 1 and "_ghostviewer_watcher" not in vars(type(demo_loaded.pipe))


def test_a_watcher_never_detached_closes_its_study_when_the_program_ends(runs_dir: Path) -> None:
    from ghostviewer.record import list_studies

    program = ("import sys, torch, ghostviewer\n"
               "from ghostviewer.engine.loading.pipelines import load_pipeline\n"
               "pipe = load_pipeline('demo', device='cpu').pipe\n"
               "watcher = ghostviewer.attach(pipe, runs_dir=sys.argv[1], keep='anomalies')\n"
               "pipe('a red circle', num_inference_steps=2, generator=torch.Generator().manual_seed(0))\n")
    done = subprocess.run([sys.executable, "-c", program, str(runs_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (study,) = list_studies(runs_dir)
    assert study.status == "done" and study.result["calls"] == 1


def test_a_watched_pipeline_the_program_lets_go_of_is_freed(demo_loaded, runs_dir: Path) -> None:
    import gc
    import weakref

    with ghostviewer.watch(demo_loaded.pipe, runs_dir=runs_dir) as watcher:
        other = StableDiffusionImg2ImgPipeline.from_pipe(demo_loaded.pipe)
        watcher.add(other)
        other(PROMPT, image=Image.new("RGB", (64, 64)), num_inference_steps=2, output_type="np")
        gone = weakref.ref(other)
        del other
        gc.collect()
        assert gone() is None
