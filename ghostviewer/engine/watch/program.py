"""Running an unmodified Python program with every diffusers pipeline in it watched: what `ghostviewer record --
python app.py ARGS…` does (the way `opentelemetry-instrument` works): the watch is installed, the program runs in
this process as `__main__` with its own argv, and its exit code is returned; one summary line goes to stderr.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.watch.process import watch_process


def exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what the interpreter does with sys.exit("message")
    return 1


def run_program(argv: Sequence[str], runs_dir: str | Path | None = None, keep: str | int = "all",
                depth: str = "block", stderr: TextIO | None = None) -> tuple[int, dict]:
    """Run `argv` (a script path, or `-m module`, then its arguments; a leading `python` is dropped) watched;
    returns (its exit code, the watch summary). An exception the program raises is printed as Python would and
    gives exit code 1."""
    args = list(argv)
    if args and Path(args[0]).name.startswith("python") and not args[0].endswith(".py"):
        args = args[1:]
    if not args:
        raise GhostError("nothing to run: give a program, e.g. ghostviewer record -- python app.py")
    module = args[1] if args[0] == "-m" and len(args) > 1 else None
    if module is None and not Path(args[0]).is_file():
        raise GhostError(f"no such program: {args[0]}")
    program_argv = [module, *args[2:]] if module else args
    saved_argv, saved_path, code = sys.argv, list(sys.path), 0
    sys.argv = program_argv  # before the watcher: its study names the program ("watch app.py"), not ghostviewer
    # As `python` would: the script's own folder first on sys.path (its sibling modules import), or, for -m, the
    # current folder (a package beside you runs).
    sys.path.insert(0, str(Path.cwd()) if module else str(Path(args[0]).resolve().parent))
    try:
        watch = watch_process(runs_dir, keep=keep, depth=depth)
    except BaseException:
        sys.argv, sys.path[:] = saved_argv, saved_path
        raise
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:  # noqa: BLE001 - the program's own error: shown as Python shows it, exit code 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        summary = watch.stop()
    c = summary
    print(f"ghostviewer: {c['calls']} pipeline calls watched, {c['failed']} failed ({c['failure_rate']:.0%}), "
          f"{c['kept']} kept in {c['study_dir']}", file=stderr or sys.stderr)
    return code, summary
