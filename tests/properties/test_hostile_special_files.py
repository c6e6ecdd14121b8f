"""Properties of special files (issue 29): a FIFO, or a link to a device that never ends (/dev/zero, /dev/urandom),
wherever a record, a bundle, a bundle member, a prompt list, a pipeline's model_index.json or a safetensors file is
read — the reader says so in one line, or reads on without it, promptly: it never blocks (each reader runs in a
thread joined with a timeout) and never reads a device without end."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.engine.errors import SourceError
from ghostviewer.record import RecordError, RunRecord, RunWriter, StepInfo
from ghostviewer.record.bundle import export_bundle, inspect_bundle, open_bundle
from ghostviewer.safe_read import read_json
from ghostviewer.spec import UserError
from ghostviewer.spec.prompt_lists import read_prompt_list
from tests.properties.made_run import made_run

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PROMPT_TIMEOUT_S = 10.0  # a reader that refuses does so in milliseconds; one that blocks never returns
DEVICES = [d for d in ("/dev/zero", "/dev/urandom") if os.path.exists(d)]
KINDS = ["fifo", *DEVICES]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real run (2 steps, inline tensors, a PNG, and a tensors file of the older layout) and its bundle."""
    root = tmp_path_factory.mktemp("made")
    run, bundle = made_run(root)
    killed = RunWriter.create(root / "runs", {"prompt": "p", "seed": 1, "steps": 2}, {}, run_id="killed")
    killed.add_step(StepInfo(0, 900.0, None, 0.01, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)})
    killed._close(fold=False)  # its writer died: the database stays in WAL mode, read with its -wal and -shm
    return run, bundle


def _read_run(run: Path) -> None:
    record = RunRecord(run)
    record.summary()
    record.steps()
    record.image_path("final")
    for listed in record.files():
        if listed["kind"] == "tensors":
            record.tensors(listed["name"])


def _bundle_reader(bundle: Path) -> Callable[[], None]:
    def read() -> None:
        inspect_bundle(bundle)
        open_bundle(bundle, bundle.parent / "opened")
    return read


def _fifo_member_bundle(good: Path, case: Path) -> Path:
    """The real bundle with one more member whose zip entry says it is a FIFO."""
    out = case / "fifo-member.zip"
    shutil.copy(good, out)
    with zipfile.ZipFile(out, "a") as zf:
        info = zipfile.ZipInfo("runs/good/images/extra.png")
        info.external_attr = (stat.S_IFIFO | 0o644) << 16
        zf.writestr(info, b"")
    return out


# Each place: (the file to replace, relative to the case folder; the reader of what holds it).
def _places(case: Path, good_bundle: Path) -> dict[str, tuple[Path | None, Callable[[], None]]]:
    run, killed = case / "run", case / "killed"
    return {
        "killed run.sqlite-wal": (killed / "run.sqlite-wal", lambda: _read_run(killed)),
        "killed run.sqlite-shm": (killed / "run.sqlite-shm", lambda: _read_run(killed)),
        "run.sqlite": (run / "run.sqlite", lambda: _read_run(run)),
        "run.sqlite-wal": (run / "run.sqlite-wal", lambda: _read_run(run)),
        "run.sqlite-shm": (run / "run.sqlite-shm", lambda: _read_run(run)),
        "tensors file": (run / "tensors" / "initial_noise.safetensors", lambda: _read_run(run)),
        "tensors file, exported": (run / "tensors" / "initial_noise.safetensors",
                                   lambda: export_bundle([run], case / "out.zip")),
        "image, exported": (run / "images" / "final.png", lambda: export_bundle([run], case / "out.zip")),
        "bundle": (case / "b.zip", _bundle_reader(case / "b.zip")),
        "bundle member": (None, _bundle_reader(_fifo_member_bundle(good_bundle, case))),
        "prompt list .txt": (case / "list.txt", lambda: read_prompt_list(case / "list.txt")),
        "prompt list .json": (case / "list.json", lambda: read_prompt_list(case / "list.json")),
        "prompt list .csv": (case / "list.csv", lambda: read_prompt_list(case / "list.csv")),
        "model_index.json": (case / "model_index.json",
                             lambda: read_json(case / "model_index.json", SourceError, max_bytes=1 << 20)),
    }


PLACES = ["killed run.sqlite-wal", "killed run.sqlite-shm", "run.sqlite", "run.sqlite-wal", "run.sqlite-shm",
          "tensors file", "tensors file, exported", "image, exported",
          "bundle", "bundle member", "prompt list .txt", "prompt list .json", "prompt list .csv", "model_index.json"]


def _make_special(path: Path, kind: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(kind)


def _unblock(path: Path) -> None:
    """Let a reader blocked on the FIFO go (end of file), so a failing example does not leave a thread behind."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def _promptly(read: Callable[[], None], path: Path | None, seconds: float) -> list[BaseException | None]:
    """[None] or [the exception] when read() returns within `seconds` on a thread of its own; [] when it blocks."""
    outcome: list[BaseException | None] = []

    def reader() -> None:
        try:
            read()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread to judge
            outcome.append(exc)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(seconds)
    if not thread.is_alive():
        return outcome
    if path is not None:  # blocked: let it go, and say so
        _unblock(path)
        thread.join(seconds)
    return []


def test_a_reader_that_blocks_is_caught(tmp_path: Path) -> None:
    """The check is not vacuous: a plain read of a FIFO blocks, and is reported (then let go)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _promptly(fifo.read_bytes, fifo, 0.3) == []


def _case(made: tuple[Path, Path], case: Path) -> None:
    good_run, good_bundle = made
    shutil.copytree(good_run, case / "run")
    shutil.copytree(good_run.parent / "killed", case / "killed")
    shutil.copy(good_bundle, case / "b.zip")
    for name, text in (("list.txt", "a red circle\n"), ("list.json", '["a red circle"]'),
                       ("list.csv", "prompt\na red circle\n")):
        (case / name).write_text(text)
    (case / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')


@FEW
@given(st.sampled_from(PLACES), st.permutations(KINDS))
def test_a_special_file_is_refused_in_one_line_promptly(made: tuple[Path, Path],
                                                        tmp_path_factory: pytest.TempPathFactory,
                                                        place: str, kinds: list[str]) -> None:
    for kind in kinds:
        case = tmp_path_factory.mktemp("special")
        _case(made, case)
        places = _places(case, made[1])
        assert sorted(places) == sorted(PLACES)
        path, read = places[place]
        if path is not None:
            _make_special(path, kind)
        outcome = _promptly(read, path, PROMPT_TIMEOUT_S)
        assert outcome, f"reading with a {kind} as {place} did not return"
        if outcome[0] is not None:
            assert isinstance(outcome[0], (RecordError, UserError)), f"{type(outcome[0]).__name__}: {outcome[0]}"
            assert str(outcome[0]).strip() and "\n" not in str(outcome[0])
