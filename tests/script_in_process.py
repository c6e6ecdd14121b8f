"""Run a script GhostViewer writes (repro.py) the way `python script.py ARGS` runs it from its folder, but in the
test's own process: torch and diffusers are already imported there, which saves the ~5-9 CPU-s a fresh interpreter
spends importing them. Each kind of script still runs once as a real subprocess in the suite: an isolated folder's
repro.py in tests/engine/test_isolate.py, a bundle's repro.py in tests/record/test_bundle.py.

`forbid` names packages the script must not import (a standalone repro needs no GhostViewer): they are hidden
from sys.modules and refused by an import hook while it runs, which a subprocess without them on its path shows
no better."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.abc import MetaPathFinder
from pathlib import Path


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


class _Refuse(MetaPathFinder):
    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if any(fullname == name or fullname.startswith(name + ".") for name in self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r} (the script must not need it)", name=fullname)


@contextlib.contextmanager
def _hidden(names: Sequence[str]) -> Iterator[None]:
    hidden = {key: module for key, module in sys.modules.items()
              if any(key == name or key.startswith(name + ".") for name in names)}
    for key in hidden:
        del sys.modules[key]
    finder = _Refuse(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for key in [k for k in sys.modules if any(k == n or k.startswith(n + ".") for n in names)]:
            del sys.modules[key]
        sys.modules.update(hidden)


def run_script(script: Path | str, *args: str, forbid: Sequence[str] = ()) -> Finished:
    """`cd <script's folder> && python <script> ARGS`: its exit status (SystemExit's code, 0 when it returns) and
    what it printed."""
    script = Path(script).resolve()
    out, err = io.StringIO(), io.StringIO()
    argv, cwd, path = sys.argv[:], os.getcwd(), sys.path[:]
    code: int | str | None = 0
    try:
        sys.argv = [str(script), *args]
        sys.path.insert(0, str(script.parent))  # as `python script.py` puts the script's folder first
        os.chdir(script.parent)
        with _hidden(forbid), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as done:
                code = done.code
    finally:
        sys.argv, sys.path[:] = argv, path
        os.chdir(cwd)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1
        err.write(f"{code}\n")
        code = 1
    return Finished(code, out.getvalue(), err.getvalue())
