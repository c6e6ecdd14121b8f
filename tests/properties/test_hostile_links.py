"""Properties of writes through links (issue 29): whatever arrangement of symbolic links a runs folder holds — a
run's run.sqlite, its WAL, its lock, its tensors/ or images/ folder, a whole run folder, a study's study.sqlite or
runs/ folder, the runs index — doctor, prune and the writers that add to an existing record (annex_image, a study's
resume, a new run noting the runs index) never change a file outside the runs folder: they leave the linked record
alone or refuse in one line."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.cli.doctor import doctor
from ghostviewer.record import RecordError, RunWriter, StepInfo, StudyWriter
from ghostviewer.record.prune import prune
from ghostviewer.record.runs_index import INDEX_NAME
from ghostviewer.record.writer import annex_image

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
RUN, STUDY, CHILD = "run-a", "study-s", "child-c"


def _left_running(folder: Path, run_id: str) -> Path:
    """A run whose writer died after its first step (its connection closed, its lock let go): doctor marks it."""
    writer = RunWriter.create(folder, {"prompt": "p", "seed": 1, "steps": 3}, {}, run_id=run_id)
    writer.add_step(StepInfo(0, 900.0, None, 0.01, None, None, None, "rss"),
                    {"latents": np.zeros((1, 4, 4, 4), np.float32)})
    writer.save_image("final", np.zeros((4, 4, 3), np.float32))
    writer.save_tensors("initial_noise", {"x": np.ones(4, np.float32)})  # a tensors/ file too
    writer._close(fold=False)
    return writer.path


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder as a killed process leaves it: a run, and a sweep study with one run of its own."""
    root = tmp_path_factory.mktemp("template")
    _left_running(root, RUN)
    study = StudyWriter.create(root, "sweep", {"list": "l.txt"}, total=2, study_id=STUDY)
    child = _left_running(study.runs_dir, CHILD)
    study.add_run(child, {"prompt": "p", "seed": 1})
    study.close()
    return root


# Each slot: the path inside the runs folder that becomes a link, and what outside it points at.
SLOTS: dict[str, tuple[str, str]] = {
    "run.sqlite": (f"{RUN}/run.sqlite", f"{RUN}/run.sqlite"),
    "run wal": (f"{RUN}/run.sqlite-wal", f"{RUN}/run.sqlite-wal"),
    "run lock": (f"{RUN}/run.lock", "plain.txt"),
    "tensors/": (f"{RUN}/tensors", f"{RUN}/tensors"),
    "images/": (f"{RUN}/images", f"{RUN}/images"),
    "run folder": ("run-b", RUN),
    "study.sqlite": (f"{STUDY}/study.sqlite", f"{STUDY}/study.sqlite"),
    "study runs/": (f"{STUDY}/runs", f"{STUDY}/runs"),
    "child run.sqlite": (f"{STUDY}/runs/{CHILD}/run.sqlite", f"{STUDY}/runs/{CHILD}/run.sqlite"),
    "child folder": (f"{STUDY}/runs/child-d", f"{STUDY}/runs/{CHILD}"),
    "runs index": (INDEX_NAME, "plain.txt"),
}


def _digest(folder: Path) -> dict[str, str]:
    seen = {}
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(parent, name)
            seen[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def _arrange(template: Path, case: Path, links: list[str]) -> tuple[Path, Path]:
    runs, outside = case / "runs", case / "outside"
    shutil.copytree(template, runs, symlinks=True)
    shutil.copytree(template, outside, symlinks=True)  # the records the links lead to: killed runs too
    (outside / "plain.txt").write_text("not a record")
    for slot in links:
        inside, target = SLOTS[slot]
        path = runs / inside
        if not path.parent.resolve().is_relative_to(runs.resolve()):
            continue  # a folder above it is a link already (study runs/, then child run.sqlite)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        path.symlink_to(outside / target, target_is_directory=(outside / target).is_dir())
    return runs, outside


def _doctor(runs: Path) -> None:
    doctor(runs)


def _prune(runs: Path) -> None:
    prune(runs, older_than=0, now=4e9)  # everything is old enough


def _annex(runs: Path) -> None:
    annex_image(runs / RUN, "step_0000_decoded", np.ones((4, 4, 3), np.float32), step=0)


def _resume(runs: Path) -> None:
    with StudyWriter.resume(runs / STUDY, force=True) as study:  # a resumed sweep writes its next run
        run = RunWriter.create(study.runs_dir, {"prompt": "q", "seed": 2, "steps": 1}, {})
        run.finish("done", 0.1)
        study.add_run(run.path, {"prompt": "q", "seed": 2})


def _new_run(runs: Path) -> None:
    with RunWriter.create(runs, {"prompt": "q", "seed": 3, "steps": 1}, {}) as run:  # its end notes the runs index
        run.add_step(StepInfo(0, 900.0, None, 0.01, None, None, None, "rss"), {"latents": np.zeros(4, np.float32)})


WRITERS = {"doctor": _doctor, "prune": _prune, "annex_image": _annex, "resume": _resume, "new run": _new_run}


@FEW
@given(st.lists(st.sampled_from(sorted(SLOTS)), min_size=1, max_size=4, unique=True),
       st.lists(st.sampled_from(sorted(WRITERS)), min_size=1, max_size=2))
def test_writers_never_change_a_file_outside_the_runs_folder(template: Path, tmp_path_factory: pytest.TempPathFactory,
                                                             links: list[str], writers: list[str]) -> None:
    runs, outside = _arrange(template, tmp_path_factory.mktemp("links"), links)
    before = _digest(outside)
    for name in writers:
        try:
            WRITERS[name](runs)
        except RecordError as exc:  # refusing is fine: in one line
            assert str(exc).strip() and "\n" not in str(exc)
    assert _digest(outside) == before, f"{writers} wrote through {links}"
