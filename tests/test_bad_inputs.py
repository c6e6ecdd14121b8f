"""The bad-input corpus, generated here: broken pipeline folders, bad settings, odd prompts, corrupt run folders,
malformed prompt lists and hostile bundles. Each gives exit code 2 and one line on the CLI (or a clean result
where the input is legal), and nothing already recorded is lost. Property-based tests (hypothesis) cover the
parsers and validators with inputs nobody would think of."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.cli import main as cli_main
from ghostviewer.record import RecordError, RunRecord
from ghostviewer.record.bundle import export_bundle
from ghostviewer.spec.checks import SettingsError, check_values
from ghostviewer.spec.prompt_lists import PromptListError, read_prompt_list
from ghostviewer.spec.seeds import SeedSpecError, parse_seeds
from tests.gui.fake_runs import write_fake_run
from tests.record.test_bundle import _add_member, _rebuild

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "resources" / "demo-pipeline"
pytestmark = pytest.mark.skipif(not (DEMO / "model_index.json").is_file(), reason="the demo pipeline is not built")
FEW = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- the corpus's shared state: a runs folder with a real run that no refusal may touch -----------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from ghostviewer import api

    root = tmp_path_factory.mktemp("corpus")
    archive = root / "archive"
    good = Path(api.run("demo", "a red circle on a blue background", seed=1, steps=3, runs_dir=archive)["run_dir"])
    return {"root": root, "archive": archive, "good": good}


def _fingerprint(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "run.lock"}


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], corpus: dict[str, Path]) -> str:
    """Run the CLI; assert exit 2, one line on stderr, no traceback, and the archive untouched. The line."""
    before, folders = _fingerprint(corpus["archive"]), sorted(corpus["archive"].iterdir())
    code = cli_main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, (argv, code, err)
    assert err.startswith("ghostviewer: ") and "\n" not in err and "Traceback" not in err, err
    assert _fingerprint(corpus["archive"]) == before and sorted(corpus["archive"].iterdir()) == folders
    return err


# -- pipeline folders -------------------------------------------------------------------------------------------
def _copy(corpus: dict[str, Path], name: str) -> Path:
    folder = corpus["root"] / "pipelines" / name
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(DEMO, folder)
    return folder


def _write(path: Path, data: bytes | str) -> None:
    path.unlink(missing_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _index_edit(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        index = json.loads((folder / "model_index.json").read_text())
        edit(index)
        _write(folder / "model_index.json", json.dumps(index))
    return apply


def _pickle_only(folder: Path) -> None:
    import torch
    from safetensors.torch import load_file

    weights = folder / "unet" / "diffusion_pytorch_model.safetensors"
    torch.save(load_file(str(weights)), folder / "unet" / "diffusion_pytorch_model.bin")
    weights.unlink()


def _custom_code(folder: Path) -> None:
    _index_edit(lambda index: index.update(unet=["my_unet", "MyUNet"]))(folder)
    code = f"open({str(folder.parent / 'PWNED')!r}, 'w')\nclass MyUNet: pass\n"
    _write(folder / "unet" / "my_unet.py", code)
    _write(folder / "my_unet.py", code)


UNET = "unet/diffusion_pytorch_model.safetensors"
PIPELINES: dict[str, Callable[[Path], None] | str] = {
    "missing": "/nonexistent/pipeline",
    "empty-folder": lambda f: [shutil.rmtree(f), f.mkdir()],  # type: ignore[dict-item]
    "invalid-json": lambda f: _write(f / "model_index.json", "{not json"),
    "json-not-an-object": lambda f: _write(f / "model_index.json", "[1, 2]"),
    "binary-model-index": lambda f: _write(f / "model_index.json", os.urandom(256)),
    "missing-component": lambda f: shutil.rmtree(f / "unet"),
    "no-weights": lambda f: (f / UNET).unlink(),
    "truncated-safetensors": lambda f: _write(f / UNET, (f / UNET).read_bytes()[: (f / UNET).stat().st_size // 2]),
    "random-safetensors": lambda f: _write(f / UNET, os.urandom(4096)),
    "empty-safetensors": lambda f: _write(f / UNET, b""),
    "wrong-shapes": lambda f: _write(f / UNET, (f / "vae" / "diffusion_pytorch_model.safetensors").read_bytes()),
    "pickle-only": _pickle_only,
    "custom-code": _custom_code,
    "unknown-class": _index_edit(lambda index: index.update(_class_name="NoSuchPipeline")),
    "broken-config": lambda f: _write(f / "unet" / "config.json", '{"block_out_channels": "x"}'),
}


@pytest.mark.parametrize("case", sorted(PIPELINES))
def test_broken_pipelines_are_refused(case: str, corpus: dict[str, Path], capsys) -> None:
    spec = PIPELINES[case]
    if isinstance(spec, str):
        source = spec
    else:
        folder = _copy(corpus, case)
        spec(folder)
        source = str(folder)
    for command in (["blocks"], ["run", "--prompt", "x", "--steps", "1", "--runs-dir", str(corpus["archive"])]):
        line = _refused([*command, "--pipeline", source], capsys, corpus)
        if case == "wrong-shapes":  # another model's weights: refused, never randomly initialised and run
            assert "unet's weights do not match its UNet2DConditionModel" in line and "conv_in.weight" in line
    assert not (corpus["root"] / "pipelines" / "PWNED").exists()  # nothing from the folder ran


def test_weights_left_on_the_meta_device_are_refused() -> None:
    import torch

    from ghostviewer.engine.errors import SourceError
    from ghostviewer.engine.loading.pipelines import check_weights_match

    with torch.device("meta"):
        model = torch.nn.Linear(2, 2)
    with pytest.raises(SourceError, match="unet was left without weights for 2 of its 2 tensors"):
        check_weights_match("unet", model, [])


@pytest.mark.parametrize("name", ["single.safetensors", "checkpoint.ckpt", "weights.bin", "notes.txt", "run"])
def test_files_that_are_not_pipelines_are_refused(name: str, corpus: dict[str, Path], capsys) -> None:
    if name == "run":
        _refused(["blocks", "--pipeline", str(corpus["good"])], capsys, corpus)  # a run, not a pipeline
        return
    path = corpus["root"] / name
    _write(path, os.urandom(2048))
    _refused(["blocks", "--pipeline", str(path)], capsys, corpus)
    _refused(["blocks", "--pipeline", "nobody/not-in-the-cache"], capsys, corpus)


@pytest.mark.slow
def test_pickle_with_allow_pickle_loads_without_chatter(corpus: dict[str, Path]) -> None:
    folder = _copy(corpus, "pickle-allowed")
    _pickle_only(folder)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_VERBOSITY")}
    done = subprocess.run([sys.executable, "-m", "ghostviewer", "blocks", "--pipeline", str(folder), "--allow-pickle",
                           "--json"], capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert done.returncode == 0 and json.loads(done.stdout)["blocks"]
    assert done.stderr == "", done.stderr  # no "no file named diffusion_pytorch_model.safetensors"


# -- settings -----------------------------------------------------------------------------------------------------
SETTINGS = {
    "steps-0": ["--steps", "0"], "steps-negative": ["--steps", "-3"], "steps-1001": ["--steps", "1001"],
    "steps-text": ["--steps", "many"], "seed-negative": ["--seed", "-5"], "seed-2**64": ["--seed", str(2**64)],
    "seed-text": ["--seed", "x"], "width-12": ["--width", "12"], "width-0": ["--width", "0"],
    "width-negative": ["--width", "-64"], "height-7": ["--height", "7"], "width-100000": ["--width", "100000"],
    "size-4096-memory": ["--width", "4096", "--height", "4096"],
    "guidance-nan": ["--guidance", "nan"], "guidance-inf": ["--guidance", "inf"], "guidance--inf": ["--guidance=-inf"],
    "guidance-negative": ["--guidance", "-1"], "guidance-1e308": ["--guidance", "1e308"],
    "guidance-text": ["--guidance", "lots"], "bypass-range-after-end": ["--bypass", "unet.mid_block@100:200"],
    "bypass-backwards": ["--bypass", "unet.mid_block@5:2"], "bypass-no-module": ["--bypass", "unet.nosuch"],
    "bypass-not-bypassable": ["--bypass", "unet.down_blocks.0"], "bypass-garbage": ["--bypass", "@@"],
    "capture-nothing": ["--capture", "nosuch.*"], "capture-empty": ["--capture", ""],
    "fault-unknown": ["--fault", "nosuch"], "scheduler-unknown": ["--scheduler", "nosuch"],
    "dtype-float64": ["--dtype", "float64"], "dtype-component": ["--dtype", "float32,nosuch=float16"],
    "device-tpu": ["--device", "tpu"], "trace-depth": ["--trace-depth", "deep"], "no-prompt": [],
}


@pytest.mark.parametrize("case", sorted(SETTINGS))
def test_bad_settings_are_refused_before_anything_runs(case: str, corpus: dict[str, Path], capsys) -> None:
    prompt = [] if case == "no-prompt" else ["--prompt", "a red circle"]
    line = _refused(["run", *prompt, "--steps", "2", *SETTINGS[case], "--runs-dir", str(corpus["archive"])],
                    capsys, corpus)
    if case.startswith("guidance-") and case != "guidance-text":
        assert "guidance must be a number from 0 to 100" in line  # the user's input, never a pipeline ghost
    if case == "size-4096-memory":
        assert "needs about" in line and "is free" in line and "--no-memory-check" in line


def test_guidance_inf_is_never_a_ghost_through_the_api(corpus: dict[str, Path]) -> None:
    from ghostviewer import api
    from ghostviewer.engine.errors import GhostError

    for bad in (math.inf, math.nan, -math.inf, "7.5", True):
        with pytest.raises(GhostError, match="guidance must be a number"):
            api.run("demo", "a red circle", guidance=bad, steps=1, runs_dir=corpus["archive"])  # type: ignore[arg-type]


def test_memory_check_can_be_turned_off(corpus: dict[str, Path]) -> None:
    from ghostviewer.engine.loading.pipelines import load_pipeline
    from ghostviewer.engine.run.runner import prepare_settings
    from ghostviewer.spec import RunSpec

    loaded = load_pipeline("demo", device="cpu")
    huge = RunSpec(prompt="x", width=8192, height=8192)
    with pytest.raises(Exception, match="needs about"):
        prepare_settings(loaded, huge)
    resolved, _ = prepare_settings(loaded, RunSpec(prompt="x", width=8192, height=8192,
                                                       extra={"memory_check": False}))
    assert resolved.width == 8192 and not resolved.memory_check


def test_the_memory_estimate_is_the_demo_measure_on_the_demo() -> None:
    from ghostviewer.engine.loading.pipelines import load_pipeline
    from ghostviewer.engine.run.settings import denoiser_shape
    from ghostviewer.spec.checks import DEMO_BYTES_PER_ELEMENT, DenoiserShape, estimate_run_bytes

    shape = denoiser_shape(load_pipeline("demo", device="cpu").pipe)
    assert shape == DenoiserShape()  # the calibration's own pipeline: factor 1
    assert estimate_run_bytes(512, 512, 7.5, shape) == int(128 * 128 * 4 * 2 * DEMO_BYTES_PER_ELEMENT)
    assert estimate_run_bytes(512, 512, 1.0, shape) * 2 == estimate_run_bytes(512, 512, 7.5, shape)  # no CFG batch


# -- prompts ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", ["", "a red\x00 circle\x1b[31m\x07\r\n on blue\u202e", "   "])
def test_odd_but_legal_prompts_run_and_are_recorded_as_given(prompt: str, corpus: dict[str, Path]) -> None:
    from ghostviewer import api

    result = api.run("demo", prompt, seed=2, steps=1, runs_dir=corpus["root"] / "legal")
    record = RunRecord(result["run_dir"])
    assert record.status == "done" and record.settings["prompt"] == prompt and result["verdict"]["label"]


def test_a_json_command_that_fails_still_prints_one_json_document(corpus: dict[str, Path], capsys) -> None:
    """CONTRACT: every --json command prints exactly one JSON document, a refused one too."""
    code = cli_main(["run", "--json", "--prompt", "x", "--steps", "0", "--runs-dir", str(corpus["archive"])])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith("ghostviewer: steps must be")
    assert json.loads(captured.out) == {"error": "steps must be at least 1, not 0", "exit_code": 2}
    assert cli_main(["run", "--prompt", "x", "--steps", "0", "--runs-dir", str(corpus["archive"])]) == 2
    assert capsys.readouterr().out == ""  # without --json, stdout stays empty


def test_a_prompt_of_bytes_that_are_not_utf8_is_refused_in_one_line(corpus: dict[str, Path], capsys) -> None:
    """A terminal or file in Latin-1 hands Python a lone surrogate: said with the byte, exit 2, nothing written."""
    line = _refused(["run", "--prompt", "caf\udce9", "--steps", "2", "--runs-dir", str(corpus["archive"])],
                    capsys, corpus)
    assert "not valid text" in line and "xe9" in line


def test_a_runs_folder_that_cannot_take_a_run_is_refused_in_one_line(corpus: dict[str, Path], capsys,
                                                                     tmp_path: Path) -> None:
    """No permission or a read-only disk: the user's folder, exit 2, not an internal error."""
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o555)
    try:
        if os.access(runs, os.W_OK):  # root writes anywhere: a path under /proc cannot take a folder for anyone
            runs = Path("/proc/1")
        line = _refused(["run", "--prompt", "x", "--steps", "2", "--runs-dir", str(runs)], capsys, corpus)
    finally:
        (tmp_path / "runs").chmod(0o755)
    assert "cannot create a run folder" in line and "internal error" not in line


def test_a_million_character_prompt_is_refused_in_one_line(corpus: dict[str, Path], capsys) -> None:
    from ghostviewer import api
    from ghostviewer.engine.errors import GhostError

    with pytest.raises(GhostError, match="at most 100,000") as info:
        api.run("demo", "red circle " * 100_000, steps=1, runs_dir=corpus["archive"])
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


# -- run folders --------------------------------------------------------------------------------------------------
def _run_copy(corpus: dict[str, Path], name: str) -> Path:
    target = corpus["root"] / "broken-runs" / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(corpus["good"], target)
    return target


def _set_final(relpath: str) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        conn = sqlite3.connect(run / "run.sqlite")
        conn.execute("UPDATE files SET relpath = ? WHERE name = 'final'", (relpath,))
        conn.commit()
        conn.close()
    return apply


def _sql(statement: str, *params: object) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        conn = sqlite3.connect(run / "run.sqlite")
        conn.execute(statement, params)
        conn.commit()
        conn.close()
    return apply


def _set_meta(key: str, value: str) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        conn = sqlite3.connect(run / "run.sqlite")
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))
        conn.commit()
        conn.close()
    return apply


def _symlink_final(run: Path) -> None:
    (run / "images" / "final.png").unlink()
    (run / "images" / "final.png").symlink_to("/etc/hostname")


def _foreign_db(run: Path) -> None:
    (run / "run.sqlite").unlink()
    conn = sqlite3.connect(run / "run.sqlite")
    conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '\"two\"')")
    conn.commit()
    conn.close()


RUN_FOLDERS: dict[str, Callable[[Path], None]] = {
    "missing-folder": lambda r: shutil.rmtree(r),
    "no-database": lambda r: (r / "run.sqlite").unlink(),
    "garbage-database": lambda r: _write(r / "run.sqlite", os.urandom(8192)),
    "empty-database": lambda r: _write(r / "run.sqlite", b""),
    "truncated-database": lambda r: _write(r / "run.sqlite", (r / "run.sqlite").read_bytes()[:1500]),
    "foreign-database": _foreign_db,
    "corrupt-step-tensors": _sql("UPDATE blobs SET data = ? WHERE name = 'step_0001'", os.urandom(512)),
    "missing-step-tensors": _sql("DELETE FROM blobs WHERE name = 'step_0001'"),
    "step-tensors-as-text": _sql("UPDATE blobs SET data = 'not a blob' WHERE name = 'step_0001'"),
    "step-tensors-as-number": _sql("UPDATE blobs SET data = 1000000000000 WHERE name = 'step_0001'"),
    "escaping-final-image": _set_final("../../../../etc/hostname"),
    "absolute-final-image": _set_final("/etc/hostname"),
    "symlinked-final-image": _symlink_final,
    "settings-a-list": _set_meta("settings", "[1, 2]"),
    "first-anomaly-a-number": _set_meta("first_anomaly", "5"),
}


@pytest.mark.parametrize("case", sorted(RUN_FOLDERS))
def test_corrupt_run_folders_are_refused(case: str, corpus: dict[str, Path], capsys) -> None:
    run = _run_copy(corpus, case)
    RUN_FOLDERS[case](run)
    before = _fingerprint(run) if run.exists() else {}
    out = corpus["root"] / f"{case}.zip"
    _refused(["compare", str(run), str(corpus["good"])], capsys, corpus)
    if case == "missing-step-tensors":  # export bundles what exists, as for a killed run: legal
        assert cli_main(["export", str(run), "-o", str(out)]) == 0 and out.is_file()
    else:
        _refused(["export", str(run), "-o", str(out)], capsys, corpus)
        assert not out.exists()
    if run.exists():
        assert _fingerprint(run) == before  # read-only: nothing in the broken folder changed


def test_export_and_isolate_never_overwrite_the_users_files(corpus: dict[str, Path], capsys) -> None:
    run = _run_copy(corpus, "overwrite-target")
    database = run / "run.sqlite"
    before = database.read_bytes()
    line = _refused(["export", str(run), "-o", str(database)], capsys, corpus)
    assert "already exists" in line and database.read_bytes() == before
    folder = corpus["root"] / "my-repro"
    folder.mkdir(exist_ok=True)
    (folder / "repro.py").write_text("# my own edits\n", encoding="utf-8")
    line = _refused(["isolate", str(run), "--module", "unet.mid_block", "-o", str(folder)], capsys, corpus)
    assert "not an empty folder" in line and (folder / "repro.py").read_text(encoding="utf-8") == "# my own edits\n"


def test_a_missing_final_image_is_said_not_crashed(corpus: dict[str, Path], capsys) -> None:
    run = _run_copy(corpus, "missing-final-image")
    (run / "images" / "final.png").unlink()
    record = RunRecord(run)
    assert record.image_path("final") is None and record.summary()["image"] is None
    assert cli_main(["compare", str(run), str(corpus["good"])]) == 1  # it differs from the run that has one
    assert "final image" in capsys.readouterr().out


@pytest.mark.parametrize("value", [None, "nan", "missing"])
def test_a_record_without_its_guidance_is_not_replayed_with_a_default(value: str | None, corpus: dict[str, Path],
                                                                      capsys) -> None:
    assert RunRecord(corpus["good"]).settings["guidance"] == 7.5  # the family's guidance, resolved and recorded
    run = _run_copy(corpus, f"guidance-{value}")
    conn = sqlite3.connect(run / "run.sqlite")
    recorded = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
    if value == "missing":
        del recorded["guidance"]
    else:
        recorded["guidance"] = None if value is None else math.nan
    conn.execute("UPDATE meta SET value = ? WHERE key = 'settings'", (json.dumps(recorded),))
    conn.commit()
    conn.close()
    line = _refused(["replay", str(run)], capsys, corpus)
    assert f"run {run.name} records" in line and "guidance" in line


# -- prompt lists -------------------------------------------------------------------------------------------------
PROMPT_LISTS: dict[str, tuple[str, bytes]] = {
    "csv-no-prompt-column": ("list.csv", b"text,seed\na,1\n"),
    "csv-extra-cells": ("list.csv", b"prompt,seed\na,1,2,3\n"),
    "csv-bad-seed": ("list.csv", b"prompt,seed\na,seven\n"),
    "csv-bad-steps": ("list.csv", b"prompt,steps\na,0.5\n"),
    "csv-guidance-nan": ("list.csv", b"prompt,guidance\na red circle,nan\n"),
    "csv-unclosed-quote": ("list.csv", b'prompt\n"a red circle\n'),  # not a prompt running to the end of the file
    "json-invalid": ("list.json", b'[{"prompt": "a"'),
    "json-not-a-list": ("list.json", b'{"prompt": "a"}'),
    "json-number-entries": ("list.json", b"[1, 2, 3]"),
    "json-no-prompt": ("list.json", b'[{"seed": 1}]'),
    "jsonl-bad-line": ("list.jsonl", b'{"prompt": "a"}\n{oops\n'),
    "jsonl-prompt-not-text": ("list.jsonl", b'{"prompt": 5}\n'),
    "txt-not-utf8": ("list.txt", b"a red circle\n\xff\xfe\xfa\n"),
    "unknown-suffix": ("list.yaml", b"- a red circle\n"),
    "empty-txt": ("list.txt", b"# only a comment\n\n"),  # a sweep of nothing would pass in CI: refused
}
LEGAL_LISTS: dict[str, tuple[str, bytes]] = {  # odd, but they parse: a clean result
    "csv-nul-in-prompt": ("list.csv", b"prompt\na\x00b\n"),
}


@pytest.mark.parametrize("case", sorted(PROMPT_LISTS))
def test_malformed_prompt_lists_are_refused(case: str, corpus: dict[str, Path], capsys) -> None:
    name, data = PROMPT_LISTS[case]
    path = corpus["root"] / "lists" / case / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    line = _refused(["sweep", str(path), "--seeds", "0", "--steps", "1", "--runs-dir", str(corpus["archive"])],
                    capsys, corpus)  # the archive is untouched: no sweep study was created
    if case == "csv-guidance-nan":  # refused up front, naming the entry, not when its run starts
        assert "list.csv entry 1: guidance must be a number from 0 to 100, not nan" in line
    if case == "csv-unclosed-quote":
        assert "list.csv: a quote opened after line 1 is never closed" in line
    if case == "empty-txt":
        assert "list.txt holds no prompts" in line


@pytest.mark.parametrize("case", sorted(LEGAL_LISTS))
def test_odd_but_legal_prompt_lists_sweep_cleanly(case: str, corpus: dict[str, Path], capsys) -> None:
    name, data = LEGAL_LISTS[case]
    path = corpus["root"] / "legal-lists" / case / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    code = cli_main(["sweep", str(path), "--seeds", "0", "--steps", "1", "--runs-dir", str(path.parent / "runs"),
                     "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and result["total"] == (0 if case == "empty-txt" else 1)


def test_a_missing_prompt_list_is_refused(corpus: dict[str, Path], capsys) -> None:
    _refused(["sweep", str(corpus["root"] / "nowhere.txt"), "--runs-dir", str(corpus["archive"])], capsys, corpus)


# -- bundles (the builders of tests/record/test_bundle.py) ----------------------------------------------------------
def _bundle_cases(good: Path, out: Path) -> dict[str, Path]:
    def with_member(name: str, data: bytes = b"x") -> Callable[[dict, dict], None]:
        return lambda manifest, members: members.__setitem__(name, data)

    def tamper(manifest: dict, members: dict) -> None:
        members["README.txt"] += b"!"

    cases = {
        "escaping-member": _rebuild(good, out / "escape.zip", edit=with_member("../evil.txt")),
        "absolute-member": _rebuild(good, out / "abs.zip", edit=with_member("/tmp/evil.txt")),
        "executable-member": _rebuild(good, out / "exe.zip", edit=with_member("runs/r1/images/evil.exe")),
        "pickle-member": _rebuild(good, out / "pkl.zip", edit=with_member("runs/r1/images/evil.pkl")),
        "symlink-member": _rebuild(good, out / "link.zip",
                                   extra=_add_member("runs/r1/images/l.png", b"/etc/passwd", 0o120777)),
        "tampered-member": _rebuild(good, out / "sha.zip", edit=tamper, relist=False),
        "zip-bomb": _rebuild(good, out / "bomb.zip", edit=with_member("runs/r1/images/b.png", bytes(8 << 20))),
    }
    for name, data in [("garbage.zip", os.urandom(4096)), ("truncated.zip", good.read_bytes()[:2000]),
                       ("text.zip", b"just text\n")]:
        (out / name).write_bytes(data)
        cases[name.removesuffix(".zip")] = out / name
    no_manifest = out / "no-manifest.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(no_manifest, "w") as dst:
        for item in src.namelist():
            if item != "manifest.json":
                dst.writestr(item, src.read(item))
    cases["no-manifest"] = no_manifest
    cases["missing"] = out / "nowhere.zip"
    return cases


def test_hostile_bundles_are_refused(corpus: dict[str, Path], capsys) -> None:
    out = corpus["root"] / "bundles"
    run = write_fake_run(out / "runs", steps=3, run_id="r1", nan_at=1)
    good = Path(export_bundle([run], out / "good.zip")["bundle"])
    cases = _bundle_cases(good, out)
    for _name, bundle in sorted(cases.items()):
        _refused(["inspect", str(bundle)], capsys, corpus)
    assert len(cases) == 12 and not (corpus["root"] / "evil.txt").exists()


# -- property-based ---------------------------------------------------------------------------------------------------
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                    st.lists(st.text(max_size=20), max_size=3))
_KEYS = st.sampled_from(["prompt", "negative_prompt", "seed", "steps", "guidance", "width", "height", "bypass",
                         "capture", "faults"])


@FEW
@given(st.dictionaries(_KEYS, _VALUES, max_size=10))
def test_settings_validation_only_ever_raises_its_own_error(values: dict) -> None:
    try:
        check_values(values)
    except SettingsError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert isinstance(values.get("prompt"), str)  # accepted: then it really is a valid prompt ...
    guidance = values.get("guidance")
    assert guidance is None or (math.isfinite(guidance) and 0 <= guidance <= 100)  # ... and a finite guidance


@FEW
@given(st.integers(1, 1000), st.floats(0, 100), st.sampled_from([None, 8, 64, 512, 1024]), st.integers(-1, 2**63 - 1))
def test_valid_settings_are_accepted(steps: int, guidance: float, size: int | None, seed: int) -> None:
    check_values({"prompt": "x", "steps": steps, "guidance": guidance, "width": size, "height": size, "seed": seed,
                  "bypass": [f"unet.mid_block@0:{steps}"]})


@FEW
@given(st.one_of(st.text(max_size=30), st.text(alphabet="0123456789-, ", max_size=30)))
def test_seed_specs_parse_or_say_why(spec: str) -> None:
    try:
        seeds = parse_seeds(spec)
    except SeedSpecError as exc:
        assert "\n" not in str(exc)
        return
    assert seeds and all(isinstance(s, int) and s >= 0 for s in seeds)


@FEW
@given(st.sampled_from([".txt", ".csv", ".json", ".jsonl"]), st.binary(max_size=300))
def test_prompt_lists_parse_or_say_why(tmp_path_factory: pytest.TempPathFactory, suffix: str, data: bytes) -> None:
    path = tmp_path_factory.mktemp("lists") / f"list{suffix}"
    path.write_bytes(data)
    try:
        items = read_prompt_list(path)
    except PromptListError as exc:
        assert "\n" not in str(exc)
        return
    assert all(isinstance(item["prompt"], str) for item in items)


@FEW
@given(st.binary(max_size=4096), st.booleans())
def test_garbage_databases_are_record_errors(tmp_path_factory: pytest.TempPathFactory, data: bytes,
                                             sqlite_header: bool) -> None:
    run = tmp_path_factory.mktemp("run")
    (run / "run.sqlite").write_bytes((b"SQLite format 3\x00" if sqlite_header else b"") + data)
    try:
        record = RunRecord(run)
        record.summary()
        record.steps()
    except RecordError as exc:
        assert "\n" not in str(exc).strip()
