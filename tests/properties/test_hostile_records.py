"""Properties of hostile records and bundles (issue 29): whatever is done to a real run or bundle — truncated,
tampered, a schema not ours, members that bomb or escape — reading it is a one-line RecordError/BundleError or a
record that reads, opening writes nothing outside its new folder, and the original is never changed."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sqlite3
import warnings
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.record import RecordError, RunRecord
from ghostviewer.record.bundle import BundleError, inspect_bundle, open_bundle
from tests.properties.made_run import made_run

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real run (3 steps, tensors, a PNG) written by RunWriter, and a real bundle of it."""
    return made_run(tmp_path_factory.mktemp("made"), steps=3, side=8, old_tensors=False)


def _one_line(exc: BaseException) -> None:
    text = str(exc).strip()
    assert text and "\n" not in text and "Traceback" not in text


def _read_all(run: Path) -> None:
    record = RunRecord(run)
    record.summary()
    record.steps()
    record.stats()
    for listed in record.files():
        if listed["kind"] == "tensors":
            record.tensors(listed["name"])


# -- run records ------------------------------------------------------------------------------------------
@FEW
@given(st.floats(0.0, 1.0, exclude_max=True))
def test_a_truncated_run_database_reads_or_is_refused_in_one_line(made: tuple[Path, Path],
                                                                  tmp_path_factory: pytest.TempPathFactory,
                                                                  cut: float) -> None:
    good, _ = made
    before = _digest(good)
    run = tmp_path_factory.mktemp("cut") / "run"
    shutil.copytree(good, run)
    data = (run / "run.sqlite").read_bytes()
    (run / "run.sqlite").write_bytes(data[:int(len(data) * cut)])
    try:
        _read_all(run)
    except RecordError as exc:
        _one_line(exc)
    assert _digest(good) == before


_SCHEMA_VALUES = st.one_of(st.integers(-2**70, 2**70), st.text(max_size=20), st.booleans(), st.none(),
                           st.floats(allow_nan=True), st.lists(st.integers(), max_size=3),
                           st.just("[" * 5000 + "]" * 5000))


@FEW
@given(_SCHEMA_VALUES, st.sets(st.sampled_from(["steps", "stats", "files", "events", "blobs"]), max_size=2),
       st.sampled_from(["settings", "verdict", "first_anomaly", "status", "created_at", "run_id"]),
       _SCHEMA_VALUES)
def test_a_record_of_a_schema_not_ours_is_refused_in_one_line(made: tuple[Path, Path],
                                                              tmp_path_factory: pytest.TempPathFactory,
                                                              version: object, dropped: set[str], key: str,
                                                              value: object) -> None:
    good, _ = made
    run = tmp_path_factory.mktemp("schema") / "run"
    shutil.copytree(good, run)
    conn = sqlite3.connect(run / "run.sqlite")
    stored = value if isinstance(value, str) and value.startswith("[[") else json.dumps(value)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                 (version if isinstance(version, str) else json.dumps(version),))
    conn.execute("UPDATE meta SET value = ? WHERE key = ?", (stored, key))
    for table in dropped:
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    try:
        _read_all(run)
    except RecordError as exc:
        _one_line(exc)


# -- bundles ----------------------------------------------------------------------------------------------
def _refused_or_opened(bundle: Path, dest: Path) -> None:
    """inspect and open: a one-line BundleError (nothing left in dest), or runs that read, all inside dest."""
    dest.mkdir()
    try:
        inspect_bundle(bundle)
        runs = open_bundle(bundle, dest)
    except BundleError as exc:
        _one_line(exc)
        assert list(dest.iterdir()) == []  # nothing half-opened left behind
        return
    for run in runs:
        assert run.resolve().is_relative_to(dest.resolve())
        _read_all(run)


@FEW
@given(st.data())
def test_a_tampered_or_truncated_bundle_is_refused_in_one_line(made: tuple[Path, Path],
                                                               tmp_path_factory: pytest.TempPathFactory,
                                                               data: st.DataObject) -> None:
    _, good = made
    original = good.read_bytes()
    raw = bytearray(original)
    if data.draw(st.booleans(), label="truncate"):
        raw = raw[:data.draw(st.integers(0, len(raw) - 1), label="length")]
    else:
        for _ in range(data.draw(st.integers(1, 8), label="flips")):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    case = tmp_path_factory.mktemp("tampered")
    (case / "b.zip").write_bytes(bytes(raw))
    _refused_or_opened(case / "b.zip", case / "out")
    assert good.read_bytes() == original
    assert sorted(p.name for p in case.iterdir()) == ["b.zip", "out"]  # nothing written beside it


_NAMES = st.one_of(
    st.sampled_from(["../escape.txt", "/abs/path.txt", "runs/../../x.txt", "runs\\..\\x.txt", "C:/x.txt",
                     "runs/good/images/../../../x.png", "runs/good/run.sqlite/../x", "a\x00b.txt",
                     "runs/good/images/final.png"]),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),
)


@FEW
@given(st.lists(_NAMES, min_size=1, max_size=4), st.integers(0, 2), st.integers(64, 1024))
def test_bundles_with_escaping_names_or_many_small_bombs_are_refused(made: tuple[Path, Path],
                                                                     tmp_path_factory: pytest.TempPathFactory,
                                                                     names: list[str], bombs: int,
                                                                     bomb_kib: int) -> None:
    """The real bundle plus members named to escape, and members of zeros that inflate far beyond their size."""
    _, good = made
    buffer = io.BytesIO(good.read_bytes())
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        warnings.simplefilter("ignore")  # zipfile's own "Duplicate name": a duplicate is one of the hostile cases
        for name in names:
            zf.writestr(zipfile.ZipInfo(name), b"x")
        for index in range(bombs * 20):  # many members, each small zipped, bomb_kib KiB unzipped
            zf.writestr(f"runs/good/images/bomb_{index}.png", bytes(bomb_kib << 10))
    case = tmp_path_factory.mktemp("escaping")
    (case / "b.zip").write_bytes(buffer.getvalue())
    try:
        _refused_or_opened(case / "b.zip", case / "out")
    except ValueError:  # zipfile itself refuses some names on writing back; not our reader's concern
        pass
    assert sorted(p.name for p in case.iterdir()) == ["b.zip", "out"]
    assert not any(case.parent.glob("escape.txt")) and not any(case.parent.glob("x.txt"))
    if bombs:
        assert not any((case / "out").rglob("bomb_*"))  # never inflated to disk
