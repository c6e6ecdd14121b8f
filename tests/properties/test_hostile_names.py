"""Properties of hostile names, paths and flags (issue 29): a record's names are checked whole (no name with a
trailing newline passes), a sweep study's index never leads a reader outside the study folder (absolute or
relative), a study's params never switch pickle on, and a path of any characters given to the CLI is refused in
exactly one line, exit 2."""

from __future__ import annotations

import contextlib
import io
import re
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.cli import main as cli_main
from ghostviewer.record import RecordError, StudyRecord, StudyWriter
from ghostviewer.record.sqlite_store import check_name

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_WHOLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_NASTY = st.sampled_from(["\n", "\r", "\x00", "/", "\\", "..", " ", "\t", "\u2028", "é"])
_TEXT = st.one_of(st.text(max_size=20), st.builds(lambda a, b, c: a + b + c, st.text(max_size=6), _NASTY,
                                                  st.text(max_size=6)))


@FEW
@given(_TEXT)
def test_a_record_name_passes_only_whole(name: str) -> None:
    try:
        assert check_name(name) == name
    except ValueError as exc:
        assert "\n" not in str(exc)
        assert not _WHOLE_NAME.fullmatch(name) or ".." in name
        return
    assert _WHOLE_NAME.fullmatch(name) and ".." not in name and "\n" not in name


@pytest.fixture(scope="module")
def sweep_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with StudyWriter.create(tmp_path_factory.mktemp("study"), "sweep", {"list": "l.txt"}, total=1) as study:
        pass
    return study.path


_STORED = st.one_of(
    st.sampled_from(["/etc", "/tmp", "runs/../../x", "../x", "runs/../..", "/", "runs/./a", "runs/a\n",
                     "runs/a/../../../b", "//x", "runs/" + "a/" * 50]),
    st.builds(lambda a: "/" + a, st.text(max_size=15)),
    st.text(max_size=20),
)


@FEW
@given(_STORED)
def test_a_sweep_study_index_never_leads_outside_its_folder(sweep_study: Path, stored: str) -> None:
    conn = sqlite3.connect(sweep_study / "study.sqlite")
    try:
        conn.execute("DELETE FROM runs")
        conn.execute("INSERT INTO runs (position, key, role, run_dir, status, verdict, first_anomaly, added_at, note)"
                     " VALUES (0, '{\"prompt\": \"p\", \"seed\": 0}', 'member', ?, 'done', 'ok', NULL, 0, '')",
                     (stored,))
        conn.commit()
    finally:
        conn.close()
    try:
        runs = StudyRecord(sweep_study).runs()
    except RecordError as exc:
        assert "\n" not in str(exc) and "outside its folder" in str(exc)
        return
    assert all(run.run_dir.resolve().is_relative_to(sweep_study.resolve()) for run in runs)


@FEW
@given(st.one_of(st.booleans(), st.integers(), st.text(max_size=5), st.none(), st.just("true"), st.just(1)))
def test_a_sweep_studys_params_never_turn_pickle_on(flag: object) -> None:
    from ghostviewer.engine.loops.sweep_spec import SweepSpec

    spec = SweepSpec.from_params({"list": "l.txt", "seeds": "0", "settings": {"steps": 2}, "allow_pickle": flag})
    assert spec.allow_pickle is False


@settings(max_examples=15, deadline=None)
@given(_TEXT, st.sampled_from([["inspect"], ["replay"], ["compare", "/nonexistent-a"], ["doctor"]]))
def test_a_path_of_any_characters_is_refused_in_one_line(text: str, command: list[str]) -> None:
    path = f"/nonexistent-ghostviewer-{text}"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main([*command, path])
    assert code == 2, err.getvalue()
    assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("ghostviewer: "), err.getvalue()
