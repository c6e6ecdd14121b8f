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
        assert code == 2 and message in err and out == ""
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


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
