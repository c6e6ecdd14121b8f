"""Round trip through RunWriter -> RunRecord with real SQLite, safetensors and PNG files."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer.record import (
    SCHEMA_VERSION,
    Event,
    RecordError,
    RunRecord,
    RunWriter,
    StatRow,
    StepInfo,
    StudyRecord,
    StudyWriter,
    list_runs,
    schema,
)

MODULES = [
    "text_encoder.encoder.layers.0",
    "unet.down_blocks.0.resnets.0",
    "unet.down_blocks.0.attentions.0",
    "unet.mid_block.resnets.0.conv1",
    "unet.up_blocks.1.resnets.0",
    "vae.decoder.up_blocks.2.resnets.1.conv1",
]
SETTINGS = {"prompt": "a ghost in a teacup", "seed": 7, "steps": 3, "guidance": 7.5}
ENVIRONMENT = {"device": "cpu", "dtype": "float32", "versions": {"numpy": np.__version__}}


def _row(phase: str, step: int | None, module: str, seq: int, value: float, call: int = 0) -> StatRow:
    return StatRow(
        phase, step, module, call, seq, (1, 4, 8, 8), "float32", -value, value, 0.0, 1.0, value, 0, 0
    )


def _write_run(runs_dir: Path) -> RunWriter:
    """A small, complete run: encode, 3 denoise steps (step 2 overflows, then NaN), decode."""
    writer = RunWriter.create(runs_dir, SETTINGS, ENVIRONMENT, run_id="run-a")
    seq = 0
    writer.event("phase", "encode started")
    writer.add_stats([_row("encode", None, MODULES[0], seq, 2.0)])
    seq += 1
    writer.save_tensors("initial_noise", {"latents": np.ones((1, 4, 8, 8), np.float32)})
    writer.commit()
    for step in range(3):
        rows = []
        for module in MODULES[1:5]:
            value = float(step + 1)
            if module.startswith("unet.mid_block") and step == 2:
                value = float("inf")
            rows.append(_row("denoise", step, module, seq, value))
            seq += 1
        rows.append(_row("denoise", step, MODULES[1], seq, 100.0, call=1))  # second call of a module
        seq += 1
        writer.add_stats(rows)
        if step == 2:
            writer.event("anomaly", "NaN found in unet.mid_block at step 2", level="warning", step=2, count=3)
        latents = np.full((1, 4, 8, 8), step, np.float16)
        preview = np.zeros((8, 8, 3), np.uint8)
        preview[..., 0] = 40 * step
        writer.add_step(
            StepInfo(step, 999.0 - step * 333, 14.6 / (step + 1), 0.05, 100, 120, 150, "rss"),
            tensors={"latents": latents, "x0": latents.astype(np.float32)},
            images={"preview": preview},
        )
    writer.add_stats([_row("decode", None, MODULES[5], seq, float("nan"))])
    writer.event("phase", "decode finished", level="info", image="final")
    writer.save_image("final", np.full((8, 8, 3), 0.5, np.float32))
    writer.set_verdict(
        {"label": "nan", "scores": {"nan_fraction": 1.0, "contrast": float("nan")}},
        {"phase": "denoise", "step": 2, "module": "unet.mid_block.resnets.0.conv1", "kind": "inf"},
    )
    return writer


@pytest.fixture()
def run(tmp_path: Path) -> RunRecord:
    writer = _write_run(tmp_path)
    writer.finish("done", elapsed_s=1.25)
    return RunRecord(tmp_path / "run-a")


def test_layout_and_meta(run: RunRecord, tmp_path: Path) -> None:
    folder = tmp_path / "run-a"
    assert (folder / "run.sqlite").is_file()
    assert not (folder / "run.sqlite-wal").exists()  # finished runs are folded back into one file
    assert not (folder / "tensors" / "step_0000.safetensors").exists()  # step tensors live in the database
    assert {"name": "step_0000", "kind": "tensors", "relpath": "run.sqlite#step_0000", "step": 0} in run.files()
    assert (folder / "tensors" / "initial_noise.safetensors").is_file()
    assert (folder / "images" / "step_0002_preview.png").is_file()
    assert not list(folder.rglob("*.tmp"))
    assert run.run_id == "run-a"
    assert run.schema_version == SCHEMA_VERSION
    assert run.status == "done" and run.complete
    assert run.settings == SETTINGS
    assert run.environment == ENVIRONMENT
    assert run.elapsed_s == 1.25
    assert run.error is None
    assert run.verdict == {"label": "nan", "scores": {"nan_fraction": 1.0, "contrast": None}}
    assert run.first_anomaly["module"] == "unet.mid_block.resnets.0.conv1"


def test_summary_is_contract_shape_and_json(run: RunRecord) -> None:
    summary = run.summary()
    for key in ("run_dir", "prompt", "seed", "steps", "verdict", "first_anomaly", "image", "elapsed_s"):
        assert key in summary
    assert summary["prompt"] == SETTINGS["prompt"] and summary["seed"] == 7 and summary["steps"] == 3
    assert summary["image"].endswith("final.png")
    json.dumps(summary, allow_nan=False)  # strictly JSON-safe


def test_steps_and_stats(run: RunRecord) -> None:
    steps = run.steps()
    assert [s.index for s in steps] == [0, 1, 2]
    assert steps[1] == StepInfo(1, 666.0, 7.3, 0.05, 100, 120, 150, "rss")
    rows = run.stats()
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    assert len(rows) == 1 + 3 * 5 + 1
    assert run.modules() == MODULES  # first-execution order
    enc = run.stats(phase="encode")
    assert enc[0].step is None and enc[0].shape == (1, 4, 8, 8)
    decode = run.stats(phase="decode")[0]
    assert math.isnan(decode.min) and math.isnan(decode.absmax)  # NaN round-trips
    mid = run.stats(module="unet.mid_block.resnets.0.conv1", step=2)[0]
    assert math.isinf(mid.max) and mid.max > 0 and math.isinf(mid.fp16_headroom)
    assert run.stats(module="unet.up_blocks.1.resnets.0", step=1)[0].fp16_headroom == pytest.approx(2 / 65504)


def test_glob_and_list_filters(run: RunRecord) -> None:
    resnets = {r.module for r in run.stats(module="unet.*.resnets.*")}
    assert resnets == {
        "unet.down_blocks.0.resnets.0",
        "unet.mid_block.resnets.0.conv1",
        "unet.up_blocks.1.resnets.0",
    }
    mixed = run.stats(module=["text_encoder.encoder.layers.0", "vae.*"], phase=None)
    assert [r.module for r in mixed] == [
        "text_encoder.encoder.layers.0",
        "vae.decoder.up_blocks.2.resnets.1.conv1",
    ]
    assert run.stats(module="nothing.*") == []
    assert run.stats(module="unet.down_blocks.0.*", phase="denoise", step=0)[0].module == MODULES[1]
    assert len(run.stats(module="unet.down_blocks.0.resnets.0", step=1)) == 2  # both calls


def test_series(run: RunRecord) -> None:
    steps, values = run.series("unet.down_blocks.0.resnets.0", "absmax")
    assert steps.tolist() == [0, 1, 2] and values.tolist() == [1.0, 2.0, 3.0]  # call 0 only
    _, headroom = run.series("unet.mid_block.resnets.0.conv1", "fp16_headroom")
    assert headroom[0] == pytest.approx(1 / 65504) and math.isinf(headroom[2])
    steps, values = run.series("vae.decoder.up_blocks.2.resnets.1.conv1", "mean", phase="decode")
    assert steps.tolist() == [0] and values.tolist() == [0.0]
    with pytest.raises(ValueError):
        run.series("unet.down_blocks.0.resnets.0", "median")


def test_tensors_and_images(run: RunRecord) -> None:
    tensors = run.step_tensors(1)
    assert set(tensors) == {"latents", "x0"}
    assert tensors["latents"].dtype == np.float16 and np.all(tensors["latents"] == 1)
    assert run.step_tensors(99) == {}
    assert run.tensors("initial_noise")["latents"].shape == (1, 4, 8, 8)
    with pytest.raises(KeyError):
        run.tensors("nope")
    preview = run.step_image_path(2, "preview")
    assert preview is not None and np.asarray(Image.open(preview))[0, 0, 0] == 80
    assert run.step_image_path(2, "missing") is None
    final = np.asarray(Image.open(run.image_path()))
    assert final.shape == (8, 8, 3) and final[0, 0, 0] == 128


def test_events_and_search(run: RunRecord) -> None:
    events = run.events()
    assert [e.message for e in events] == [
        "encode started",
        "NaN found in unet.mid_block at step 2",
        "decode finished",
    ]
    assert events[1] == Event(events[1].t, "warning", "anomaly", events[1].message, {"step": 2, "count": 3})
    assert [e.kind for e in run.events(search="nan")] == ["anomaly"]  # FTS, case-insensitive
    assert [e.message for e in run.events(search="decode OR encode")] == ["encode started", "decode finished"]
    assert run.events(search='"unbalanced') != [] or True  # malformed FTS: no crash
    assert [e.kind for e in run.events(search="unet.mid_block")] == ["anomaly"]  # falls back to LIKE
    assert [e.message for e in run.events(search='"unbalanced')] == []
    assert [e.message for e in run.events(level="info", kind="phase")] == [
        "encode started",
        "decode finished",
    ]
    assert run.events(search="started", kind="anomaly") == []


def test_like_fallback_without_fts(tmp_path: Path) -> None:
    writer = _write_run(tmp_path)
    writer.finish("done", 0.1)
    with sqlite3.connect(tmp_path / "run-a" / "run.sqlite") as conn:
        conn.execute("DROP TABLE events_fts")
    record = RunRecord(tmp_path / "run-a")
    assert [e.kind for e in record.events(search="NaN found")] == ["anomaly"]
    assert record.events(search="100%_x") == []  # LIKE wildcards are escaped


def test_final_image_all_nan_is_black(tmp_path: Path) -> None:
    with RunWriter.create(tmp_path, SETTINGS, ENVIRONMENT) as writer:
        image = np.full((16, 16, 3), np.nan, np.float32)
        image[0, 0] = np.inf
        path = writer.save_image("final", image)
    pixels = np.asarray(Image.open(path))
    assert pixels.dtype == np.uint8 and pixels.shape == (16, 16, 3)
    assert pixels[1:].max() == 0 and pixels[0, 0].tolist() == [255, 255, 255]
    record = RunRecord(writer.path)
    assert record.image_path() == path and record.status == "done"


def test_open_run_sees_committed_steps_only(tmp_path: Path) -> None:
    writer = RunWriter.create(tmp_path, SETTINGS, ENVIRONMENT)
    writer.add_stats([_row("denoise", 0, MODULES[1], 0, 1.0)])
    writer.add_step(
        StepInfo(0, 999.0, 14.6, 0.1, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)}
    )
    writer.add_stats([_row("denoise", 1, MODULES[1], 1, 1.0)])  # buffered, not committed
    writer.event("note", "not committed yet")
    record = RunRecord(writer.path)
    assert record.status == "running" and not record.complete
    assert [s.index for s in record.steps()] == [0]
    assert [r.step for r in record.stats()] == [0]
    assert record.events() == []
    writer.add_step(StepInfo(1, 500.0, 3.0, 0.1, None, None, None, "rss"))
    assert [s.index for s in record.steps()] == [0, 1] and len(record.events()) == 1
    writer.finish("cancelled", 0.3)
    assert record.status == "cancelled" and record.complete


def test_context_manager_failure_records_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with RunWriter.create(tmp_path, SETTINGS, ENVIRONMENT, run_id="bad") as writer:
            writer.add_stats([_row("encode", None, MODULES[0], 0, 1.0)])
            raise RuntimeError("boom")
    record = RunRecord(tmp_path / "bad")
    assert record.status == "failed" and record.error == "RuntimeError: boom"
    assert len(record.stats()) == 1  # what was buffered is kept
    assert record.elapsed_s is not None and record.elapsed_s >= 0
    with pytest.raises(RecordError):
        writer.event("late", "after finish")


def test_default_run_ids_unique_and_list_runs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    ids = []
    for i in range(3):
        writer = RunWriter.create(runs, {"prompt": str(i)}, {})
        ids.append(writer.run_id)
        writer.finish("done", 0.0)
    assert len(set(ids)) == 3
    assert all(len(run_id.split("-")) == 3 and len(run_id.split("-")[2]) == 6 for run_id in ids)
    (runs / "not-a-run").mkdir()
    (runs / "junk").mkdir()
    (runs / "junk" / "run.sqlite").write_bytes(b"garbage" * 100)
    listed = list_runs(runs)
    assert [r.settings["prompt"] for r in listed] == ["2", "1", "0"]  # newest first
    assert list_runs(tmp_path / "missing") == []
    with pytest.raises(RecordError, match="already exists"):
        RunWriter.create(runs, {}, {}, run_id=ids[0])


def test_meta_is_strict_json(tmp_path: Path) -> None:
    writer = RunWriter.create(tmp_path, {"guidance": float("nan"), "arr": np.arange(3)}, {"x": float("inf")})
    writer.finish("done", 0.0)
    with sqlite3.connect(writer.path / "run.sqlite") as conn:
        values = [v for (v,) in conn.execute("SELECT value FROM meta")]
    for value in values:
        json.loads(value, parse_constant=lambda c: pytest.fail(f"bare {c} in meta"))
    assert RunRecord(writer.path).settings == {"guidance": None, "arr": [0, 1, 2]}


def test_bad_names_rejected(tmp_path: Path) -> None:
    with RunWriter.create(tmp_path, {}, {}) as writer:
        with pytest.raises(ValueError):
            writer.save_tensors("../escape", {"a": np.zeros(1)})
        with pytest.raises(ValueError):
            writer.save_image("final", np.zeros((2, 2, 7)))
        with pytest.raises(ValueError):
            StatRow("sample", None, "m", 0, 0, (), "float32", 0, 0, 0, 0, 0, 0, 0)


def test_a_new_record_is_written_from_the_empty_image_and_equals_one_made_table_by_table(tmp_path: Path) -> None:
    """Runs and studies start from a serialized empty database in WAL mode: same schema as creating the tables."""
    made = sqlite3.connect(tmp_path / "made.sqlite")
    schema.RUN_FORMAT.prepare(made)
    made.commit()
    writer = RunWriter.create(tmp_path / "runs", {"prompt": "p", "seed": 1, "steps": 1}, {})
    conn = sqlite3.connect(writer.path / schema.DB_NAME)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    listing = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    assert conn.execute(listing).fetchall() == made.execute(listing).fetchall()
    conn.close()
    writer.event("run", "a searchable message")
    writer.finish("done", 1.0)
    record = RunRecord(writer.path)
    assert record.status == "done"
    assert [e.message for e in record.events(search="searchable")] == ["a searchable message"]
    study = StudyWriter.create(tmp_path / "studies", "sweep", {}, study_id="s")
    study.finish("done")
    assert StudyRecord(study.path).status == "done"
