"""Hostile bundles the older corpus did not try: a database that computes (a virtual table of its own, a generated
column), Python beside the repro that would shadow a module, names deeper or longer than GhostViewer writes, and a
manifest whose prompt and seed are not the run's. Each is refused by `inspect` (and `open_bundle`) in one line, exit
2, leaving nothing; export never writes a bundle its own reader would refuse. Torch-free: runs are written by the
real RunWriter (tests/gui/fake_runs.py)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ghostviewer.cli import main as cli_main
from ghostviewer.record.bundle import BundleError, export_bundle, open_bundle
from tests.gui.fake_runs import write_fake_run

Edit = Callable[[dict[str, Any], dict[str, bytes]], None]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-bundles")
    run = write_fake_run(root / "runs", steps=2, run_id="r1")
    return Path(export_bundle([run], root / "good.zip")["bundle"])


def _rebuild(good: Path, out: Path, edit: Edit) -> Path:
    """A copy of the good bundle after edit(manifest, members), re-hashed so that only the flaw is left."""
    with zipfile.ZipFile(good) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        members = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    edit(manifest, members)
    manifest["files"] = [{"name": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                         for n, d in members.items()]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr("manifest.json", json.dumps(manifest))
    return out


def _with_sql(tmp_path: Path, statement: str) -> Edit:
    def edit(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        db = tmp_path / "edited.sqlite"
        db.write_bytes(members["runs/r1/run.sqlite"])
        conn = sqlite3.connect(db)
        conn.execute(statement)
        conn.commit()
        conn.close()
        members["runs/r1/run.sqlite"] = db.read_bytes()
    return edit


def _tensors(header: dict[str, Any], data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _lying_blob(tmp_path: Path, blob: bytes) -> Edit:
    """Step 1's tensors (kept inside the database) replaced by a serialization whose header lies."""
    def edit(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        db = tmp_path / "edited.sqlite"
        db.write_bytes(members["runs/r1/run.sqlite"])
        conn = sqlite3.connect(db)
        assert conn.execute("UPDATE blobs SET data = ? WHERE name = 'step_0001'", (blob,)).rowcount == 1
        conn.commit()
        conn.close()
        members["runs/r1/run.sqlite"] = db.read_bytes()
    return edit


F32 = {"dtype": "F32", "shape": [2]}
LIES: dict[str, bytes] = {
    "offsets-past-the-end": _tensors({"latents": {**F32, "data_offsets": [0, 4096]}}, bytes(8)),
    "overlapping": _tensors({"latents": {**F32, "data_offsets": [0, 8]}, "x0": {**F32, "data_offsets": [4, 12]}},
                            bytes(12)),
    "huge-header-length": struct.pack("<Q", 2**63) + b"{}",
    "unknown-dtype": _tensors({"latents": {"dtype": "Q99", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)),
    "shape-overflows": _tensors({"latents": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 8]}},
                                bytes(8)),
    "pickle-named-safetensors": b"\x80\x04\x95" + bytes(200),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_tensors_header_that_lies_is_refused_by_inspect(lie: str, good: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _rebuild(good, tmp_path / f"{lie}.zip", _lying_blob(tmp_path, LIES[lie]))
    _refused(bundle, tmp_path, capsys, "has unreadable tensors run.sqlite#step_0001")


def _member(name: str, data: bytes = b"x") -> Edit:
    return lambda manifest, members: members.__setitem__(name, data)


def _settings(**changes: Any) -> Edit:
    return lambda manifest, members: manifest["runs"][0].update(changes)


def _refused(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], match: str) -> None:
    for argv in (["inspect", str(bundle)], ["inspect", "--json", str(bundle)]):
        code = cli_main(argv)
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert code == 2, (argv, code, err)
        assert err.startswith("ghostviewer: ") and "\n" not in err and "Traceback" not in err, err
        assert match in err, err
        if "--json" in argv:
            assert json.loads(captured.out)["exit_code"] == 2
    dest = tmp_path / "dest"
    with pytest.raises(BundleError, match=match):
        open_bundle(bundle, dest)
    assert not dest.exists() or not any(dest.iterdir())  # nothing left behind


CASES: dict[str, tuple[Callable[[Path], Edit], str]] = {
    # SQLite runs what a schema says while it is read: only GhostViewer's own event index may be virtual
    "virtual-table": (lambda t: _with_sql(t, "CREATE VIRTUAL TABLE other USING fts5(a)"), "unexpected virtual table"),
    "generated-column": (lambda t: _with_sql(t, "ALTER TABLE events ADD COLUMN z BLOB GENERATED ALWAYS AS "
                                                "(zeroblob(900000000)) VIRTUAL"), "unexpected generated column"),
    "view": (lambda t: _with_sql(t, "CREATE VIEW v AS SELECT 1"), "unexpected view"),
    # `python repro.py` imports torch.py from its own folder first: no Python but GhostViewer's repro scripts
    "shadowing-module": (lambda t: _member("runs/r1/isolate/torch.py", b"open('/tmp/pwned', 'w')\n"), "Python code"),
    "python-in-images": (lambda t: _member("runs/r1/images/x.py"), "Python code"),
    "deep-member": (lambda t: _member("runs/r1/" + "a/" * 500 + "x.txt"), "a name GhostViewer does not write"),
    "long-member": (lambda t: _member("runs/r1/" + "a" * 300 + ".txt"), "a name GhostViewer does not write"),
    # inspect shows the manifest's prompt and seed: they must be the run's own
    "edited-prompt": (lambda t: _settings(prompt="a harmless prompt"), "the bundle was edited"),
    "edited-seed": (lambda t: _settings(seed=12345), "the bundle was edited"),
    "edited-steps": (lambda t: _settings(steps=[1, 2]), "the bundle was edited"),
    "edited-status": (lambda t: _settings(status="failed"), "the manifest says status 'failed'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_bundle_is_refused_in_one_line(case: str, good: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    make, match = CASES[case]
    _refused(_rebuild(good, tmp_path / f"{case}.zip", make(tmp_path)), tmp_path, capsys, match)


def test_the_repro_scripts_are_still_bundled(good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _rebuild(good, tmp_path / "isolate.zip", _member("runs/r1/isolate/repro.py", b"print('repro')\n"))
    assert cli_main(["inspect", str(bundle)]) == 0, capsys.readouterr().err
    assert (open_bundle(bundle, tmp_path / "dest")[0] / "isolate" / "repro.py").is_file()


def test_export_never_writes_a_bundle_its_reader_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_fake_run(tmp_path / "runs", steps=2, run_id="edited")
    conn = sqlite3.connect(run / "run.sqlite")
    conn.execute("CREATE TRIGGER t AFTER INSERT ON events BEGIN DELETE FROM steps; END")
    conn.commit()
    conn.close()
    before = (run / "run.sqlite").read_bytes()
    out = tmp_path / "report.zip"
    assert cli_main(["export", str(run), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "unexpected trigger 't'" in err and "not bundling it" in err and "\n" not in err, err
    assert not out.exists() and (run / "run.sqlite").read_bytes() == before


def test_a_manifest_number_too_large_for_a_float_is_refused(good: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """1e999 is valid JSON that parses to infinity, which `inspect --json` could not write back."""
    bundle = tmp_path / "huge.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bundle, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "manifest.json":
                manifest = json.loads(data)
                manifest["runs"][0]["elapsed_s"] = 12345.5
                data = json.dumps(manifest).replace("12345.5", "1e999").encode()
            dst.writestr(name, data)
    _refused(bundle, tmp_path, capsys, "1e999 is not a finite number")


def test_export_to_an_empty_name_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`-o "$OUT"` with OUT unset: said as such, not "  already exists" (Path("") is the current folder)."""
    run = write_fake_run(tmp_path / "runs", steps=1, run_id="r")
    assert cli_main(["export", str(run), "-o", ""]) == 2
    assert capsys.readouterr().err.strip() == "ghostviewer: -o names no file: give the bundle a name such as report.zip"
