"""Properties of the command line (issue 29), in-process and torch-free: any mix of bad arguments to any command
exits 2 with one line on stderr (never 1, never a traceback); and with any --runs-dir (or a doctor's or prune's
RUNS_DIR), nothing is written into the user's log folder, even by an internal error's log (which goes beside the
runs, or nowhere when it cannot)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer import cli
from ghostviewer.cli import build_parser
from ghostviewer.cli import main as cli_main

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _one_line_exit(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ghostviewer: ") and "Traceback" not in err, (argv, err)
    return code, err


# -- bad arguments, refused before anything is loaded (sweep, replay and the run's values: test_hostile_cli_run.py)
# Each bad on its own: a flag no command has, a value argparse or the command's own check refuses at once.
BAD: dict[str, list[list[str]]] = {
    "run": [["--stpes", "3"], ["--steps", "x"], ["--seed", "1.5"], ["--device", "tpu"], ["--trace-depth", "deep"],
            ["--width", "8.5"], ["--generator-device", "gpu"], ["--attention-backend", "flash9"], ["--guidance"]],
    "prune": [["--keep-last", "-1"], ["--older-than", "forever"], ["--verdict", "meh"], ["--keep-last", "x"]],
    "record": [["--keep", "sometimes"], ["--keep", "-2"]],
    "demo": [["--seed", "x"], ["--list-faults", "extra"]],
    "inspect": [["--bogus"], ["extra", "args"]],
    "doctor": [["--bogus"], ["--json=yes"]],
    "env": [["--bogus"], ["positional"]],
}


def _base(command: str, folder: Path) -> list[str]:
    return {"run": ["run", "--prompt", "p"], "prune": ["prune", str(folder)], "doctor": ["doctor", str(folder)],
            "record": ["record"], "demo": ["demo"], "inspect": ["inspect", str(folder / "b.zip")],
            "env": ["env"]}[command]


@FEW
@given(st.data())
def test_any_mix_of_bad_arguments_exits_2_in_one_line(tmp_path_factory: pytest.TempPathFactory,
                                                      capsys: pytest.CaptureFixture[str], data: st.DataObject) -> None:
    folder = tmp_path_factory.mktemp("bad")
    (folder / "list.txt").write_text("a red circle\n")
    command = data.draw(st.sampled_from(sorted(BAD)), label="command")
    bad = data.draw(st.lists(st.sampled_from(BAD[command]), min_size=1, max_size=3), label="bad")
    tail = ["--", "true"] if command == "record" else []
    argv = _base(command, folder) + [token for pair in bad for token in pair] + tail
    code, _ = _one_line_exit(capsys, argv)
    assert code == 2
    assert sorted(p.name for p in folder.iterdir()) == ["list.txt"]  # nothing made on the way to the refusal


# -- the CLI's log folder --------------------------------------------------------------------------------
def _runs_dir_commands() -> dict[str, list[str]]:
    """Every command that takes a runs folder, with stand-ins for its other required arguments ('{}': the runs
    folder when it is the command's positional RUNS_DIR)."""
    out = {}
    for name, parser in _subparsers().items():
        actions = [a for a in parser._actions if a.dest != "help"]
        if "runs_dir" not in {a.dest for a in actions}:
            continue
        argv = [name]
        for action in actions:
            if action.dest == "runs_dir" and not action.option_strings:
                argv.append("{}")
            elif not action.option_strings and action.nargs not in ("?", argparse.REMAINDER):
                argv.append("x")
            elif action.required and action.option_strings:
                argv += [action.option_strings[0], "x"]
        if any(a.nargs == argparse.REMAINDER for a in actions):
            argv += ["--", "true"]
        if "{}" not in argv:
            argv[1:1] = ["--runs-dir", "{}"]
        out[name] = argv
    return out


RUNS_DIR_COMMANDS = _runs_dir_commands()
def _inside_the_test(text: str) -> bool:
    """A folder that resolves inside the test's own (chdir'd, HOME'd) folder: the log may really be written there."""
    return not text.startswith(("/", "~")) and ".." not in text


_RUNS_DIRS = st.one_of(
    st.sampled_from(["", ".", "~", "~/runs", "runs", "a/./b", "file.txt", "file.txt/runs", "/dev/null",
                     "/proc/self", "two\nlines", "-runs", " "]),  # /dev/null, /proc/self: no log can be made
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
    .filter(_inside_the_test),
)


def test_the_commands_that_take_a_runs_folder_are_all_here() -> None:
    assert {"run", "sweep", "replay", "doctor", "prune", "record"} <= set(RUNS_DIR_COMMANDS)


@FEW
@given(st.sampled_from(sorted(RUNS_DIR_COMMANDS)), _RUNS_DIRS)
def test_no_runs_dir_writes_into_the_users_log_folder(tmp_path_factory: pytest.TempPathFactory,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], command: str,
                                                      runs_dir: str) -> None:
    home = tmp_path_factory.mktemp("home")
    user_log = home / "user-log"  # GHOSTVIEWER_LOG_DIR: the user's log folder, watched
    (home / "file.txt").write_text("a file where a folder is expected")
    monkeypatch.setenv("GHOSTVIEWER_LOG_DIR", str(user_log))
    monkeypatch.setenv("HOME", str(home))  # '~' stays inside the test's folder
    monkeypatch.chdir(home)  # relative runs folders too

    def a_bug(args: argparse.Namespace) -> int:  # the one path that writes a log: an internal error of ours
        raise KeyError("a bug of ours")

    monkeypatch.setitem(cli.COMMANDS, command, a_bug)
    before = {p.relative_to(home) for p in home.rglob("*")}
    argv = [runs_dir if token == "{}" else token for token in RUNS_DIR_COMMANDS[command]]
    code, err = _one_line_exit(capsys, argv)
    assert code in (1, 2)
    assert not user_log.exists(), f"{argv} wrote into the user's log folder: {err}"
    made = {p.relative_to(home) for p in home.rglob("*")} - before
    logs_home = (home / Path(runs_dir).expanduser() / "logs") if runs_dir else None
    for path in made:  # no file but the log beside the runs (mkdir makes the folders on the way)
        assert (home / path).is_dir() or (logs_home is not None and path.name == "ghostviewer-cli.log"
                                          and (home / path).resolve().is_relative_to(logs_home.resolve())), argv
