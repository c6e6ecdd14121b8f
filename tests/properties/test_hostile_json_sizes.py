"""Properties of deep, odd-shaped and oversized JSON (issue 29): a model_index.json, a bundle's manifest.json and a
safetensors header nested to any depth or of any shape are read or refused in one line (never RecursionError); one
larger than its cap — a sparse file made with truncate(), so nothing big is written — is refused before it is read
(tracemalloc's peak stays small), and so is a prompt list of any size (read quickly or refused)."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import struct
import threading
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.engine.errors import SourceError
from ghostviewer.record import RecordError, RunRecord
from ghostviewer.record.bundle import BundleError, export_bundle, inspect_bundle, open_bundle
from ghostviewer.record.bundle_format import MANIFEST, MAX_MANIFEST_SIZE
from ghostviewer.record.reader import safetensors_header
from ghostviewer.safe_read import read_json
from ghostviewer.spec import UserError
from ghostviewer.spec.prompt_lists import read_prompt_list
from tests.properties.made_run import made_run

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MODEL_INDEX_CAP = 1 << 20  # engine/loading/hub_cache.py's MODEL_INDEX_MAX_BYTES (that module imports torch)
HEADER_CAP = 100 * 1024**2  # safetensors' own limit on a header's length
SMALL_PEAK = 8 * 1024**2  # what a refusal before reading may allocate at most


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real run (2 steps of inline tensors, a tensors file of the older layout, a PNG) and its bundle."""
    return made_run(tmp_path_factory.mktemp("made"))


def _one_line(exc: BaseException, *kinds: type[BaseException]) -> None:
    assert isinstance(exc, kinds), f"{type(exc).__name__}: {exc}"
    assert str(exc).strip() and "\n" not in str(exc)


_KEYS = st.sampled_from(["_class_name", "unet", "format", "runs", "files", "name", "size", "sha256", "run_id",
                         "dtype", "shape", "data_offsets", "__metadata__", "x", ""])
_ANY = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=4)),
                    max_leaves=15)
_DEEP = st.builds(lambda depth, opener, closed: opener * depth + ("1" + ("]" if opener == "[" else "}") * depth
                                                                  if closed else ""),
                  st.integers(1, 100_000), st.sampled_from(["[", '{"a": ', '{"files": ']), st.booleans())
_TEXT = st.one_of(_DEEP, _ANY.map(json.dumps))


def _with_member(bundle: Path, out: Path, name: str, data: bytes) -> Path:
    """The bundle with member `name` replaced by `data`, every other member as it was."""
    with zipfile.ZipFile(bundle) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, data if info.filename == name else src.read(info))
    return out


def _header_bytes(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


@FEW
@given(_TEXT, st.sampled_from(["model_index.json", "manifest.json", "safetensors header", "tensors blob"]))
def test_deep_or_odd_json_is_read_or_refused_in_one_line(made: tuple[Path, Path],
                                                         tmp_path_factory: pytest.TempPathFactory,
                                                         text: str, where: str) -> None:
    good_run, good_bundle = made
    case = tmp_path_factory.mktemp("json")
    try:
        if where == "model_index.json":
            (case / where).write_text(text)
            read_json(case / where, SourceError, max_bytes=MODEL_INDEX_CAP)
        elif where == "manifest.json":
            bundle = _with_member(good_bundle, case / "b.zip", MANIFEST, text.encode())
            inspect_bundle(bundle)
            open_bundle(bundle, case / "opened")
        elif where == "safetensors header":
            header = safetensors_header(io.BytesIO(_header_bytes(text)).read)
            assert isinstance(header, dict)
        else:  # a step's tensors in the record, as a reader and an export meet them
            run = case / "run"
            shutil.copytree(good_run, run)
            with sqlite3.connect(run / "run.sqlite") as conn:
                conn.execute("UPDATE blobs SET data = ?", (_header_bytes(text),))
            conn.close()
            RunRecord(run).inline_tensor_headers()
            try:
                RunRecord(run).step_tensors(0)
            finally:
                export_bundle([run], case / "out.zip")
    except (RecordError, UserError, ValueError) as exc:
        _one_line(exc, SourceError if where == "model_index.json" else BundleError if where == "manifest.json"
                  else ValueError if where == "safetensors header" else RecordError)


def _small_and_prompt(read: Callable[[], object], *kinds: type[BaseException],
                      seconds: float = 10.0) -> BaseException | None:
    """read() is refused (one line, of `kinds`: returned) or returns, within `seconds`, allocating at most
    SMALL_PEAK."""
    outcome: list[BaseException | None] = []

    def reader() -> None:
        try:
            read()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - judged on the test's thread
            outcome.append(exc)

    tracemalloc.start()
    try:
        started = time.monotonic()
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        thread.join(seconds)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not thread.is_alive() and outcome, f"still reading after {time.monotonic() - started:.0f} s"
    assert peak < SMALL_PEAK, f"{peak:,} bytes allocated"
    if outcome[0] is not None:
        _one_line(outcome[0], *kinds)
    return outcome[0]


_HUGE = st.integers(1, 4 * 1024**3)  # bytes over the cap; the file is sparse


@FEW
@given(_HUGE)
def test_a_model_index_over_its_cap_is_refused_before_it_is_read(tmp_path_factory: pytest.TempPathFactory,
                                                                 extra: int) -> None:
    path = tmp_path_factory.mktemp("index") / "model_index.json"
    with path.open("wb") as handle:
        handle.write(b'{"_class_name": "StableDiffusionPipeline"}')
        handle.truncate(MODEL_INDEX_CAP + extra)
    error = _small_and_prompt(lambda: read_json(path, SourceError, max_bytes=MODEL_INDEX_CAP), SourceError)
    assert error is not None and "more than" in str(error)


@FEW
@given(st.integers(HEADER_CAP + 1, 2**63), st.booleans())
def test_a_safetensors_header_over_its_cap_is_refused_before_it_is_read(made: tuple[Path, Path],
                                                                       tmp_path_factory: pytest.TempPathFactory,
                                                                       length: int, export: bool) -> None:
    good_run, _ = made
    case = tmp_path_factory.mktemp("header")
    run = case / "run"
    shutil.copytree(good_run, run)
    path = run / "tensors" / "initial_noise.safetensors"
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", length) + b'{"x": ')
        handle.truncate(min(length, HEADER_CAP * 4))  # as long as it claims (up to 400 MB), all of it a hole
    if export:
        assert _small_and_prompt(lambda: export_bundle([run], case / "out.zip"), RecordError) is not None
    else:
        assert _small_and_prompt(lambda: RunRecord(run).tensors("initial_noise"), RecordError) is not None


def _claiming(bundle: Path, out: Path, size: int) -> Path:
    """The bundle with its manifest's central-directory entry claiming `size` bytes (the member itself unchanged)."""
    data = bytearray(bundle.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_length] == MANIFEST.encode():
            struct.pack_into("<I", data, at + 24, size)
        at = data.find(b"PK\x01\x02", at + 46)
    out.write_bytes(bytes(data))
    return out


@FEW
@given(st.integers(MAX_MANIFEST_SIZE + 1, 2**32 - 1))
def test_a_manifest_over_its_cap_is_refused_before_it_is_read(made: tuple[Path, Path],
                                                              tmp_path_factory: pytest.TempPathFactory,
                                                              size: int) -> None:
    _, good_bundle = made
    case = tmp_path_factory.mktemp("manifest")
    bundle = _claiming(good_bundle, case / "b.zip", size)
    with zipfile.ZipFile(bundle) as zf:
        assert zf.getinfo(MANIFEST).file_size == size  # the claim is what a reader sees
    assert _small_and_prompt(lambda: inspect_bundle(bundle), BundleError) is not None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 4 * 1024**3), st.sampled_from([".txt", ".csv", ".json", ".jsonl"]),
       st.sampled_from(["a red circle\n", '["a red circle",', '{"prompt": "a', "prompt\n"]))
def test_a_prompt_list_of_any_size_is_read_quickly_or_refused(tmp_path_factory: pytest.TempPathFactory, size: int,
                                                              suffix: str, start: str) -> None:
    path = tmp_path_factory.mktemp("list") / f"list{suffix}"
    with path.open("wb") as handle:
        handle.write(start.encode())
        handle.truncate(len(start) + size)  # the rest: a hole of NUL bytes
    _small_and_prompt(lambda: read_prompt_list(path), UserError, seconds=20.0)
