"""Suite-wide set-up: every user folder pointed at one temporary folder per session (set here, before any
ghostviewer import, and inherited by the engine processes and CLI runs the tests start), a check that the user's
real folders are untouched at the end, and the shared fixtures (the demo pipeline, a fresh runs folder per test)."""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from platformdirs import user_data_dir, user_log_dir

ROOT = Path(__file__).resolve().parents[1]
DEMO_DIR = ROOT / "resources" / "demo-pipeline"
HOME_VARIABLE = "GHOSTVIEWER_TESTS_HOME"  # set by the first pytest process; xdist workers inherit and reuse it


def _qt_config_dir() -> Path:
    """Where QSettings(IniFormat, UserScope, "ghostviewer", ...) writes: Qt's rule, not platformdirs'."""
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / "ghostviewer"
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "ghostviewer"


def _real_user_folders() -> list[Path]:
    """The folders GhostViewer writes for a user, from the environment as the user left it."""
    folders = [Path(user_data_dir("ghostviewer", appauthor=False)), Path(user_log_dir("ghostviewer", appauthor=False)),
               _qt_config_dir()]
    names = ("GHOSTVIEWER_RUNS_DIR", "GHOSTVIEWER_LOG_DIR", "GHOSTVIEWER_SETTINGS")  # the user's own choices
    folders += [Path(os.environ[name]) for name in names if os.environ.get(name)]
    return list(dict.fromkeys(folders))


def _snapshot(folders: list[Path]) -> dict[str, tuple[int, int]]:
    """Every entry under the folders (the folders, or files, included) with its size and modification time."""
    seen: dict[str, tuple[int, int]] = {}
    for folder in folders:
        if folder.is_file():
            info = folder.stat()
            seen[str(folder)] = (info.st_size, info.st_mtime_ns)
        if not folder.is_dir():
            continue
        for parent, dirs, files in os.walk(folder):
            for name in [""] + dirs + files:
                path = os.path.join(parent, name) if name else parent
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                seen[path] = (0 if name in dirs or not name else info.st_size, info.st_mtime_ns)
    return seen


def _isolate_user_folders() -> Path:
    home = Path(tempfile.mkdtemp(prefix="ghostviewer-tests-"))
    hub_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface" / "hub"
    if not (os.environ.get("HF_HOME") or os.environ.get("HF_HUB_CACHE")):
        os.environ["HF_HUB_CACHE"] = str(hub_cache)  # still readable (offline) after XDG_CACHE_HOME moves
    for variable, folder in (("GHOSTVIEWER_RUNS_DIR", "runs"), ("GHOSTVIEWER_LOG_DIR", "log"),
                             ("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "config"),
                             ("XDG_CACHE_HOME", "cache")):
        os.environ[variable] = str(home / folder)
    os.environ["GHOSTVIEWER_SETTINGS"] = str(home / "config" / "settings.ini")
    os.environ[HOME_VARIABLE] = str(home)
    return home


if os.environ.get(HOME_VARIABLE):  # an xdist worker, or pytest started by a test: the first process checks
    OWN_HOME, REAL_BEFORE, REAL_FOLDERS = None, {}, []
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a runs folder, log and settings file of its own per worker
        _worker = Path(os.environ[HOME_VARIABLE]) / os.environ["PYTEST_XDIST_WORKER"]
        os.environ["GHOSTVIEWER_RUNS_DIR"] = str(_worker / "runs")
        os.environ["GHOSTVIEWER_LOG_DIR"] = str(_worker / "log")
        os.environ["GHOSTVIEWER_SETTINGS"] = str(_worker / "settings.ini")
else:
    REAL_FOLDERS = _real_user_folders()
    REAL_BEFORE = _snapshot(REAL_FOLDERS)
    OWN_HOME = _isolate_user_folders()

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(ROOT / ".hypothesis"))  # not the cwd's
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per worker: two torch pools on 2 cores thrash
# Subprocesses the tests start (`python -m tests.gui.fake_engine`, scripts under tests/) import from the checkout
# wherever pytest was started.
_PATH = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry != str(ROOT)]
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *_PATH])

# Timing-sensitive tests share one xdist worker (--dist loadgroup), so they never race each other for the CPU; a
# file's tests that share a module fixture share a worker too (that fixture is then built once).
TIMING_SENSITIVE = (
    "tests/engine/test_kill_mid_run.py",
    "tests/record/test_record_kill.py",
    "tests/record/test_interrupted.py",
    "tests/gui/test_stat_plot_thread.py",
    "tests/engine/test_loading.py",
)
# The window driving the real engine process: reliable alone, but two of them at once on two cores race (a finished
# run's timeline still loading when the next test scrubs it): one at a time, in a group of their own that runs beside
# the timing group (the two together on one worker made that worker the whole suite's critical path).
LIVE_ENGINE = "tests/gui/live/"
TIMING_GROUP = "timing"
LIVE_GROUP = "live-engine"


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    """A module- or class-scoped fixture is built once per worker that runs one of its tests: keep them together."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(defs and defs[-1].scope in ("module", "class", "package")
                                    for defs in info.name2fixturedefs.values())


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session):  # noqa: ANN201 - a hook wrapper
    """Collection imports torch, diffusers, Qt and every test module: the collector paused meanwhile, then those
    ~1M long-lived objects frozen out of every later pass (ghostviewer/gc_paused_imports.py does the same for the
    engine process and the CLI; ~1 CPU-s saved per import, and each full pass of the tests after walks less)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@pytest.hookimpl(tryfirst=True)  # before xdist names the groups in the node ids (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        file = item.nodeid.partition("::")[0]  # relative to the rootdir (pyproject's folder) from any cwd
        live = file.startswith(LIVE_ENGINE)
        if live:
            item.add_marker(pytest.mark.live_engine)
        if live:
            item.add_marker(pytest.mark.xdist_group(LIVE_GROUP))
        elif file in TIMING_SENSITIVE or f"{file}::{item.originalname}" in TIMING_SENSITIVE:
            item.add_marker(pytest.mark.xdist_group(TIMING_GROUP))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(file))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if OWN_HOME is None or hasattr(session.config, "workerinput"):
        return
    after = _snapshot(REAL_FOLDERS)
    appeared = sorted(set(after) - set(REAL_BEFORE))
    changed = sorted(p for p in set(after) & set(REAL_BEFORE) if after[p] != REAL_BEFORE[p] and not os.path.isdir(p))
    vanished = sorted(set(REAL_BEFORE) - set(after))
    shutil.rmtree(OWN_HOME, ignore_errors=True)
    if not (appeared or changed or vanished):
        return
    lines = [f"{what}: {path}" for what, paths in (("appeared", appeared), ("changed", changed),
                                                   ("vanished", vanished)) for path in paths]
    if len(lines) > 40:
        lines = lines[:40] + [f"... {len(lines) - 40} more"]
    message = ("the test run touched the user's real GhostViewer folders (tests must write only under their "
               "temporary folders):\n  " + "\n  ".join(lines))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"\nERROR {message}", red=True, bold=True)
    else:
        print(f"ERROR {message}", file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def demo_loaded():
    """The real demo pipeline (shared: tests must leave it as they found it — the runner guarantees that)."""
    assert (DEMO_DIR / "model_index.json").exists(), "resources/demo-pipeline is missing"
    from ghostviewer.engine.loading.pipelines import load_pipeline

    return load_pipeline("demo", device="cpu")


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path
