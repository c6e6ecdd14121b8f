"""Bug-report bundles: a real run round-trips (export → inspect → open → same record), repro.py reproduces the
verdict, and hostile zips are refused with one line, writing nothing."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import struct
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ghostviewer.record import RecordError, RunRecord, RunWriter, StepInfo
from ghostviewer.record.bundle import (
    BUNDLE_VERSION,
    BundleError,
    estimate_bundle_size,
    export_bundle,
    inspect_bundle,
    open_bundle,
)
from tests.gui.fake_runs import write_fake_run
from tests.script_in_process import run_script

PYTHON = sys.executable


# -- real runs of the demo pipeline ------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_runs(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from ghostviewer.engine.run.runner import execute_run
    from ghostviewer.spec import RunSpec

    runs = tmp_path_factory.mktemp("bundle-runs")
    nan = execute_run(demo_loaded, RunSpec(prompt="red circle", seed=17, steps=4, faults=("nan-latents",)), runs)
    ok = execute_run(
        demo_loaded, RunSpec(prompt="a red circle on a blue background", seed=3, steps=4,
                                 capture=("unet.mid_block*",)), runs
    )
    assert nan["verdict"]["label"] == "nan" and ok["verdict"]["label"] == "ok" and ok["first_anomaly"] is None
    return {"nan": Path(nan["run_dir"]), "ok": Path(ok["run_dir"])}


def _same_record(a: RunRecord, b: RunRecord) -> None:
    assert a.run_id == b.run_id and a.settings == b.settings and a.environment == b.environment
    assert a.verdict == b.verdict and a.first_anomaly == b.first_anomaly and a.status == b.status
    assert a.steps() == b.steps()
    sa, sb = a.stats(), b.stats()
    assert len(sa) == len(sb) > 0
    for x, y in zip(sa, sb, strict=True):  # NaN != NaN: compare field by field, NaN-aware
        keys, values = ("phase", "step", "module", "call", "seq", "shape"), ("min", "max", "mean", "std", "absmax")
        assert [getattr(x, k) for k in keys] == [getattr(y, k) for k in keys]
        np.testing.assert_array_equal([getattr(x, k) for k in values], [getattr(y, k) for k in values])
    assert [e.message for e in a.events()] == [e.message for e in b.events()]
    assert a.image_path("final").read_bytes() == b.image_path("final").read_bytes()


def test_round_trip_keeps_the_record(real_runs: dict[str, Path], tmp_path: Path) -> None:
    bundle = tmp_path / "report.zip"
    result = export_bundle([real_runs["nan"], real_runs["ok"]], bundle)
    assert result["bundle"] == str(bundle) and result["size"] == bundle.stat().st_size
    assert [r["verdict"]["label"] for r in result["runs"]] == ["nan", "ok"]

    info = inspect_bundle(bundle)
    manifest = info["manifest"]
    assert manifest["bundle_version"] == BUNDLE_VERSION and manifest["ghostviewer"]
    nan = manifest["runs"][0]
    assert nan["first_anomaly"] == {"phase": "denoise", "step": 0, "module": "pipeline.prepare_latents", "kind": "nan"}
    assert nan["faults"] == ["nan-latents"] and nan["seed"] == 17 and nan["settings"]["steps"] == 4
    assert nan["pipeline"]["class"] == "StableDiffusionPipeline" and nan["pipeline"]["source"] == "demo"
    assert set(nan["pipeline"]["weight_hashes"]) == {"unet", "vae", "text_encoder"}
    assert nan["pipeline"]["components"]["unet"]["class"] == "UNet2DConditionModel"
    env = nan["environment"]
    assert {"python", "torch", "diffusers", "transformers", "device", "determinism", "os"} <= set(env)
    assert "--fault nan-latents" in nan["command"] and "--seed 17" in nan["command"]
    assert [r["run_id"] for r in info["runs"]] == [p.name for p in (real_runs["nan"], real_runs["ok"])]
    names = {f["name"] for f in info["files"]}
    assert {"README.txt", "repro.py", f"runs/{nan['run_id']}/run.sqlite"} <= names
    assert all(n.endswith((".sqlite", ".safetensors", ".png", ".txt", ".py")) for n in names)
    assert not any("/tensors/" not in n and n.endswith(".safetensors") for n in names)  # no weight files

    with zipfile.ZipFile(bundle) as zf:
        readme = zf.read("README.txt").decode()
    assert "verdict nan" in readme and "pipeline.prepare_latents" in readme and nan["command"] in readme

    runs = open_bundle(bundle, tmp_path / "opened")
    assert [p.name for p in runs] == [real_runs["nan"].name, real_runs["ok"].name]
    for original, opened in zip((real_runs["nan"], real_runs["ok"]), runs, strict=True):
        _same_record(RunRecord(original), RunRecord(opened))
        for step in range(4):
            a, b = RunRecord(original).step_tensors(step), RunRecord(opened).step_tensors(step)
            assert a.keys() == b.keys()
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
    assert any(k.startswith("fm/") for k in RunRecord(runs[1]).step_tensors(0))


def test_leaving_out_tensors_and_feature_maps(real_runs: dict[str, Path], tmp_path: Path) -> None:
    run = real_runs["ok"]
    full = estimate_bundle_size([run])
    no_maps = estimate_bundle_size([run], include_feature_maps=False)
    small = estimate_bundle_size([run], include_tensors=False)
    assert full > no_maps > small
    sizes = {}
    for name, options in {"full": {}, "no_maps": {"include_feature_maps": False},
                          "small": {"include_tensors": False}}.items():
        result = export_bundle([run], tmp_path / f"{name}.zip", **options)
        sizes[name] = result["size"]
        opened = RunRecord(open_bundle(tmp_path / f"{name}.zip", tmp_path / name)[0])
        _same_record(RunRecord(run), opened)  # stats, steps, events and final image always travel
        keys = set(opened.step_tensors(2))
        if name == "full":
            assert {"latents", "x0"} <= keys and any(k.startswith("fm/") for k in keys)
        elif name == "no_maps":
            assert {"latents", "x0"} <= keys and not any(k.startswith("fm/") for k in keys)
        else:
            assert keys == {"preview", "latents_preview"}  # the timeline still has its previews
        assert "latents" in opened.tensors("initial_noise")
    assert sizes["full"] > sizes["no_maps"] > sizes["small"]
    assert full >= sizes["full"]  # the estimate is an upper bound


def test_the_size_estimate_reads_only_the_tensors_headers(real_runs: dict[str, Path], tmp_path: Path) -> None:
    """The estimate needs each tensors blob's header alone (incremental blob I/O): the same headers safetensors
    reads from the whole blobs; a blob with no header (garbage, text, a number) is counted whole, not refused."""
    run = tmp_path / "copy"
    shutil.copytree(real_runs["ok"], run)
    record = RunRecord(run)
    headers = record.inline_tensor_headers()
    assert len(headers) >= 5  # the steps, the initial noise, the prompt, the channel means
    for step, header in headers:
        if step is not None:
            assert header is not None and set(header) - {"__metadata__"} == set(record.step_tensors(step))
    no_maps = estimate_bundle_size([run], include_feature_maps=False)
    small = estimate_bundle_size([run], include_tensors=False)
    conn = sqlite3.connect(run / "run.sqlite")
    for name, value in (("step_0001", os.urandom(512)), ("step_0002", "not a blob"), ("step_0003", 10**12)):
        conn.execute("UPDATE blobs SET data = ? WHERE name = ?", (value, name))
    conn.commit()
    conn.close()
    broken = {step: header for step, header in RunRecord(run).inline_tensor_headers()}
    assert broken[1] is None and broken[2] is None and broken[3] is None and broken[0] is not None
    assert estimate_bundle_size([run], include_tensors=False) > small  # those three counted whole
    assert estimate_bundle_size([run], include_feature_maps=False) > 0 and no_maps > 0


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "code", "how"), [("nan", 1, "subprocess"), ("ok", 0, "in-process")])
def test_repro_script_reproduces_the_verdict(real_runs: dict[str, Path], tmp_path: Path, kind: str,
                                             code: int, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "b.zip"
    export_bundle([real_runs[kind]], bundle)
    with zipfile.ZipFile(bundle) as zf:
        (tmp_path / "repro.py").write_bytes(zf.read("repro.py"))
    monkeypatch.setenv("GHOSTVIEWER_LOG_DIR", str(tmp_path / "logs"))
    args = ["--runs-dir", str(tmp_path / "replays")]
    if how == "subprocess":  # `python repro.py` as a user runs it; the other in-process (no second torch import)
        proc = subprocess.run([PYTHON, str(tmp_path / "repro.py"), *args], capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    else:
        proc = run_script(tmp_path / "repro.py", *args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"verdict {kind} (recorded: {kind})" in proc.stdout
    replayed = list((tmp_path / "replays").iterdir())
    assert len(replayed) == 1 and RunRecord(replayed[0]).settings["seed"] == RunRecord(real_runs[kind]).settings["seed"]


# -- torch-free: fake runs ----------------------------------------------------------------------------
def test_export_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="not a GhostViewer run") as info:
        export_bundle([tmp_path], tmp_path / "x.zip")
    assert "\n" not in str(info.value) and not (tmp_path / "x.zip").exists()
    run = write_fake_run(tmp_path / "runs", run_id="r1")
    with pytest.raises(BundleError, match="share the id"):
        export_bundle([run, run], tmp_path / "x.zip")


def test_a_run_still_being_written_is_copied_consistently(tmp_path: Path) -> None:
    writer = RunWriter.create(tmp_path / "runs", {"prompt": "p", "seed": 1, "steps": 3}, {"device": "cpu"})
    for step in range(2):
        writer.add_step(StepInfo(step, 900.0, None, 0.01, None, None, None, "rss"),
                        {"latents": np.full((4, 8, 8), step, np.float32)})
    assert (writer.path / "run.sqlite-wal").is_file()  # WAL mode, writer open
    bundle = tmp_path / "live.zip"
    export_bundle([writer.path], bundle)
    writer.finish("done", 1.0)
    opened = RunRecord(open_bundle(bundle, tmp_path / "out")[0])
    assert [s.index for s in opened.steps()] == [0, 1] and opened.status == "interrupted"  # no writer here
    assert float(opened.step_tensors(1)["latents"][0, 0, 0]) == 1.0
    assert not (opened.path / "run.sqlite-wal").exists()


@pytest.fixture
def good(tmp_path: Path) -> Path:
    run = write_fake_run(tmp_path / "runs", steps=3, run_id="r1", nan_at=1)
    return Path(export_bundle([run], tmp_path / "good.zip")["bundle"])


def _members(bundle: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    with zipfile.ZipFile(bundle) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        return manifest, {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}


def _rebuild(good: Path, out: Path, *, edit: Callable[[dict[str, Any], dict[str, bytes]], None] | None = None,
             relist: bool = True, extra: Callable[[zipfile.ZipFile], None] | None = None) -> Path:
    """A copy of a good bundle with one flaw: edit() changes manifest/members; relist re-hashes them."""
    import hashlib

    manifest, members = _members(good)
    if edit is not None:
        edit(manifest, members)
    if relist:
        manifest["files"] = [{"name": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                             for n, d in members.items()]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if extra is not None:
            extra(zf)
        if manifest is not None:
            zf.writestr("manifest.json", json.dumps(manifest))
    return out


def _refused(bundle: Path, tmp_path: Path, match: str, **kwargs: Any) -> None:
    dest = tmp_path / "dest"
    with pytest.raises(BundleError, match=match) as info:
        open_bundle(bundle, dest, **kwargs)
    assert "\n" not in str(info.value)
    assert not dest.exists() or not any(dest.iterdir())  # nothing left behind
    with pytest.raises(BundleError, match=match):
        inspect_bundle(bundle, **kwargs)


def _add_member(name: str, data: bytes = b"x", mode: int | None = None) -> Callable[[zipfile.ZipFile], None]:
    def add(zf: zipfile.ZipFile) -> None:
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.external_attr = mode << 16
        zf.writestr(info, data)

    return add


def test_the_good_bundle_opens(good: Path, tmp_path: Path) -> None:
    rebuilt = _rebuild(good, tmp_path / "same.zip")  # the test's own zip writer makes valid bundles too
    assert RunRecord(open_bundle(rebuilt, tmp_path / "dest")[0]).first_anomaly["step"] == 1
    first, second = open_bundle(good, tmp_path / "dest")[0], open_bundle(good, tmp_path / "dest")[0]
    assert first != second and first.parents[1].parent == tmp_path / "dest"  # always a NEW folder


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("/tmp/evil.txt", "absolute path"),
        ("C:/evil.txt", "absolute path"),
        ("../evil.txt", r"outside the bundle \('..'\)"),
        ("runs/r1/../../evil.txt", r"outside the bundle"),
        ("runs\\r1\\evil.txt", "backslash"),
        ("runs/r1/images/evil.exe", "not an expected file type"),
        ("runs/r1/images/evil.pkl", "not an expected file type"),
        ("runs/other/images/x.png", "outside the runs the manifest lists"),
    ],
)
def test_bad_member_names_are_refused(good: Path, tmp_path: Path, name: str, match: str) -> None:
    def edit(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        members[name] = b"x"

    _refused(_rebuild(good, tmp_path / "bad.zip", edit=edit), tmp_path, match)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()


@pytest.mark.parametrize("mode", [stat.S_IFLNK | 0o777, stat.S_IFCHR | 0o666, stat.S_IFIFO | 0o644])
def test_links_and_device_files_are_refused(good: Path, tmp_path: Path, mode: int) -> None:
    bundle = _rebuild(good, tmp_path / "bad.zip", extra=_add_member("runs/r1/images/link.png", b"/etc/passwd", mode))
    _refused(bundle, tmp_path, "link or a device file")


def test_duplicates_and_unlisted_members_are_refused(good: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about the duplicate it is asked to write
        dup = _rebuild(good, tmp_path / "dup.zip", extra=_add_member("README.txt", b"other"))
    _refused(dup, tmp_path, "appears twice")
    case = _rebuild(good, tmp_path / "case.zip", extra=_add_member("readme.TXT", b"other"))
    _refused(case, tmp_path, "appears twice")
    extra = _rebuild(good, tmp_path / "extra.zip", extra=_add_member("runs/r1/images/extra.png", b"x"))
    _refused(extra, tmp_path, "not listed in its manifest")
    folder = _rebuild(good, tmp_path / "folder.zip", extra=_add_member("runs/elsewhere/", b""))
    _refused(folder, tmp_path, "not listed in its manifest")

    def drop(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        members.pop("README.txt")

    missing = _rebuild(good, tmp_path / "missing.zip", edit=drop, relist=False)
    _refused(missing, tmp_path, "missing README.txt")


def test_zip_bombs_and_oversized_bundles_are_refused(good: Path, tmp_path: Path) -> None:
    def bomb(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        members["runs/r1/images/bomb.png"] = bytes(8 * 1024 * 1024)  # 8 MiB of zeros: ~1000:1

    _refused(_rebuild(good, tmp_path / "bomb.zip", edit=bomb), tmp_path, "zip bomb")
    _refused(good, tmp_path, "more than 1000 bytes", max_size=1000)


def test_tampered_members_are_refused(good: Path, tmp_path: Path) -> None:
    def tamper(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        data = bytearray(members["runs/r1/images/final.png"])
        data[100] ^= 0xFF
        members["runs/r1/images/final.png"] = bytes(data)

    _refused(_rebuild(good, tmp_path / "sha.zip", edit=tamper, relist=False), tmp_path, "does not match its sha256")

    def grow(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        members["README.txt"] += b"!"

    _refused(_rebuild(good, tmp_path / "size.zip", edit=grow, relist=False), tmp_path, "size its manifest gives")
    raw = bytearray(good.read_bytes())  # a flipped byte inside the compressed data: the CRC catches it
    with zipfile.ZipFile(good) as zf:
        info = zf.getinfo("runs/r1/run.sqlite")
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len + 40] ^= 0xFF
    flipped = tmp_path / "flipped.zip"
    flipped.write_bytes(bytes(raw))
    _refused(flipped, tmp_path, "corrupt|does not match")


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m.update(bundle_version=BUNDLE_VERSION + 1), "newer GhostViewer"),
        (lambda m: m.update(bundle_version="1"), "no valid bundle_version"),
        (lambda m: m.update(runs={}), "runs must be a non-empty list"),
        (lambda m: m["runs"][0].update(run_id="../x"), "bad run_id"),
        (lambda m: m["runs"][0].update(settings=[]), "settings must be an object"),
        (lambda m: m["runs"][0].update(seed="17"), "seed must be a whole number"),
        (lambda m: m["files"][0].update(sha256="zz"), "64 hex digits"),
        (lambda m: m["files"][0].update(size=-1), "size must be a whole number"),
    ],
)
def test_bad_manifests_are_refused(good: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None],
                                   match: str) -> None:
    manifest, members = _members(good)
    edit(manifest)
    bundle = tmp_path / "bad.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr("manifest.json", json.dumps(manifest))
    _refused(bundle, tmp_path, match)


def test_missing_or_broken_manifest_garbage_and_non_zip(good: Path, tmp_path: Path) -> None:
    _, members = _members(good)
    for name, manifest_bytes, match in [
        ("none.zip", None, "no manifest.json"),
        ("json.zip", b"{not json", "not valid JSON"),
        ("nan.zip", b'{"bundle_version": NaN}', "not valid JSON"),
        ("list.zip", b"[1, 2]", "not a JSON object"),
    ]:
        bundle = tmp_path / name
        with zipfile.ZipFile(bundle, "w") as zf:
            for member, data in members.items():
                zf.writestr(member, data)
            if manifest_bytes is not None:
                zf.writestr("manifest.json", manifest_bytes)
        _refused(bundle, tmp_path, match)
    garbage = tmp_path / "garbage.zip"
    garbage.write_bytes(os.urandom(4096))
    _refused(garbage, tmp_path, "not a readable zip file")
    text = tmp_path / "notes.zip"
    text.write_text("just some text\n")
    _refused(text, tmp_path, "not a readable zip file")
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    _refused(truncated, tmp_path, "not a readable zip file")
    _refused(tmp_path / "nowhere.zip", tmp_path, "no such bundle")
    _refused(tmp_path, tmp_path, "not a bundle file")


def test_nothing_in_a_bundle_is_ever_run(good: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"

    def booby_trap(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        members["repro.py"] = f"open({str(marker)!r}, 'w').write('ran')\n".encode()

    bundle = _rebuild(good, tmp_path / "trap.zip", edit=booby_trap)
    inspect_bundle(bundle)
    runs = open_bundle(bundle, tmp_path / "dest")
    RunRecord(runs[0]).summary()
    assert not marker.exists()


def test_a_database_with_triggers_is_refused(good: Path, tmp_path: Path) -> None:
    db = tmp_path / "run.sqlite"

    def trigger(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        db.write_bytes(members["runs/r1/run.sqlite"])
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TRIGGER t AFTER INSERT ON events BEGIN DELETE FROM steps; END")
        conn.close()
        members["runs/r1/run.sqlite"] = db.read_bytes()

    bundle = _rebuild(good, tmp_path / "trigger.zip", edit=trigger)
    with pytest.raises(BundleError, match="unexpected trigger"):
        open_bundle(bundle, tmp_path / "dest")
    assert not any((tmp_path / "dest").iterdir())


# -- the first bad module's inputs (export --with-inputs; issue 11 part 1) ----------------------------
ATTENTION = "unet.down_blocks.1.attentions.0"  # where short-prompt-attention strikes


@pytest.fixture(scope="module")
def attention_run(demo_loaded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ghostviewer.engine.run.runner import execute_run
    from ghostviewer.spec import RunSpec

    runs = tmp_path_factory.mktemp("bundle-attention")
    result = execute_run(demo_loaded, RunSpec(prompt="red circle", seed=0, steps=2,
                                                  faults=("short-prompt-attention",)), runs)
    assert result["first_anomaly"]["module"] == ATTENTION
    return Path(result["run_dir"])


@pytest.mark.slow
def test_with_inputs_bundles_the_first_bad_modules_inputs(attention_run: Path, real_runs: dict[str, Path],
                                                          demo_loaded, tmp_path: Path) -> None:
    from ghostviewer import api

    bundle = tmp_path / "inputs.zip"
    seen: list[dict[str, Any]] = []
    result = api.export([attention_run, real_runs["nan"]], bundle, with_inputs=True, pipeline=demo_loaded,
                        on_progress=seen.append)
    run_id, nan_id = attention_run.name, real_runs["nan"].name
    assert seen == [{"event": "isolating", "run_id": run_id, "module": ATTENTION, "step": 0}]  # nan: no re-run
    folder = f"runs/{run_id}/isolate"
    isolate = result["runs"][0]["isolate"]
    assert isolate["folder"] == folder and isolate["module"] == ATTENTION and isolate["step"] == 0
    assert isolate["repro"] == f"{folder}/repro.py" and isolate["rebuildable"] and isolate["reason"] is None
    assert isolate["output"]["nan"] == isolate["output"]["numel"] > 0
    assert isolate["faults"] == ["short-prompt-attention"]

    info = inspect_bundle(bundle)  # lists them, every member checked against its sha256
    names = {f["name"] for f in info["files"]}
    expected = {f"{folder}/{n}" for n in ("repro.py", "inputs.safetensors", "inputs.json", "weights.safetensors",
                                          "module.json", "README.txt")}
    assert expected <= names and set(isolate["files"]) == expected
    assert all(len(f["sha256"]) == 64 for f in info["files"] if f["name"] in expected)
    assert info["manifest"]["options"]["with_inputs"] is True
    assert info["runs"][0]["isolate"]["folder"] == folder
    why = info["manifest"]["runs"][1]["isolate"]
    assert why["folder"] is None and "pipeline.prepare_latents" in why["reason"] and "not by a module" in why["reason"]
    assert not any(n.startswith(f"runs/{nan_id}/isolate") for n in names)
    with zipfile.ZipFile(bundle) as zf:
        readme = zf.read("README.txt").decode()
    assert f"cd {folder} && python repro.py" in readme and "weights.safetensors" in readme
    assert "First bad module's inputs: none — the first bad tensor is pipeline.prepare_latents" in readme

    opened = open_bundle(bundle, tmp_path / "opened")[0]
    isolated = opened / "isolate"
    assert sorted(p.name for p in isolated.iterdir()) == sorted(n.rpartition("/")[2] for n in expected)
    with zipfile.ZipFile(bundle) as zf:
        assert (isolated / "inputs.safetensors").read_bytes() == zf.read(f"{folder}/inputs.safetensors")
    assert RunRecord(opened).first_anomaly["module"] == ATTENTION
    # standalone: GhostViewer and the tests refused while it runs (in this process; tests/engine/
    # test_user_ghosts_isolate.py runs an isolated repro.py as a real subprocess)
    proc = run_script(isolated / "repro.py", forbid=("ghostviewer", "tests"))
    assert proc.returncode == 1 and "NaN 12288" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_isolated_folders_hold_only_bundle_file_types(tmp_path: Path) -> None:
    run = write_fake_run(tmp_path / "runs", steps=2, run_id="r1", nan_at=1)
    folder = tmp_path / "isolated"
    folder.mkdir()
    (folder / "module.json").write_text(json.dumps({"module": "unet.mid_block", "step": 1, "rebuildable": False,
                                                    "build": {"kind": "none", "reason": "no config"}}))
    (folder / "README.md").write_text("# about\n")
    result = export_bundle([run], tmp_path / "ok.zip", isolated={"r1": folder})
    isolate = result["runs"][0]["isolate"]
    assert isolate["files"] == ["runs/r1/isolate/README.txt", "runs/r1/isolate/module.json"]  # .md travels as .txt
    assert isolate["repro"] is None and isolate["reason"] == "no config"
    assert "No repro.py: no config" in zipfile.ZipFile(tmp_path / "ok.zip").read("README.txt").decode()
    (folder / "weights.pt").write_bytes(b"pickle")
    with pytest.raises(BundleError, match="not an expected file type"):
        export_bundle([run], tmp_path / "bad.zip", isolated={"r1": folder})
    assert not (tmp_path / "bad.zip").exists()
    with pytest.raises(BundleError, match="not exported"):
        export_bundle([run], tmp_path / "bad.zip", isolated={"other": folder})


def test_a_manifest_pointing_isolate_elsewhere_is_refused(tmp_path: Path) -> None:
    run = write_fake_run(tmp_path / "runs", steps=2, run_id="r1")
    good = Path(export_bundle([run], tmp_path / "good.zip", not_isolated={"r1": "no anomaly"})["bundle"])
    assert inspect_bundle(good)["runs"][0]["isolate"] == {"folder": None, "reason": "no anomaly"}

    def elsewhere(manifest: dict[str, Any], members: dict[str, bytes]) -> None:
        manifest["runs"][0]["isolate"] = {"folder": "runs/r1/images"}

    _refused(_rebuild(good, tmp_path / "bad.zip", edit=elsewhere), tmp_path, "isolate folder must be")


def test_the_reproduce_line_and_repro_script_keep_a_run_past_the_memory_estimate() -> None:
    """A run made with --no-memory-check is reproduced with it (the estimate would refuse it again)."""
    import shlex

    from ghostviewer.cli import build_parser
    from ghostviewer.record.bundle_texts import command_line, repro_script

    settings = {"prompt": "a red circle", "seed": 3, "steps": 4, "width": 2048, "height": 2048, "source": "demo",
                "extra": {"memory_check": False}}
    line = command_line(settings)
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert "--no-memory-check" in line and args.no_memory_check and args.width == 2048
    assert "--no-memory-check" not in command_line({**settings, "extra": {}})
    script = repro_script({"runs": [{"run_id": "r", "settings": settings, "verdict": None}]})
    assert "memory_check=(s.get(\"extra\") or {}).get(\"memory_check\") is not False" in script
