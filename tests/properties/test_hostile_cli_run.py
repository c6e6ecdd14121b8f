"""Properties of the command line where the check needs the engine (issue 29; this file imports torch, through the
CLI): any mix of bad run settings, sweep and replay arguments — and a scheduler whose optional package is missing
here — exits 2 with one line on stderr (never 1, never a traceback), and records nothing. A scheduler that cannot run
here is not offered either."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghostviewer.cli import main as cli_main

FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# engine/loading/schedulers.py's NEEDS, read here without importing diffusers
NEEDS = {"dpm++_sde": "torchsde", "lms": "scipy"}
MISSING = sorted(short for short, package in NEEDS.items() if importlib.util.find_spec(package) is None)

# Each bad on its own, refused before a pipeline is loaded (the missing scheduler: once the demo is loaded).
BAD_RUN = [["--steps", "-3"], ["--steps", "0"], ["--width", "-8"], ["--height", "12"], ["--guidance", "nan"],
           ["--guidance", "inf"], ["--dtype", "float8"], ["--dtype", "vae=float16,vae=float32"],
           ["--bypass", "unet..x@3:1"], ["--bypass", "@"], ["--batch", "0"], ["--strength", "2"],
           ["--fault", "no-such-fault"], ["--pipeline", "/nonexistent-pipeline"], ["--scheduler", "no-such"],
           ["--init-image", "/nonexistent.png"], ["--lora", "/nonexistent.safetensors:x"]]
BAD_SWEEP = [["--seeds", "5-1"], ["--seeds", "x"], ["--seeds", "1.5"], ["--seeds", "0-99999999999"],
             ["--steps", "-1"], ["--bogus"]]
BAD_REPLAY = [["--times", "0"], ["--times", "x"], ["--times", "-4"], ["--times", "100000"]]


def _exit(capsys: pytest.CaptureFixture[str], argv: list[str]) -> int:
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ghostviewer: ") and "Traceback" not in err, (argv, err)
    return code


@FEW
@given(st.data())
def test_any_mix_of_bad_run_sweep_or_replay_arguments_exits_2(tmp_path_factory: pytest.TempPathFactory,
                                                              capsys: pytest.CaptureFixture[str],
                                                              data: st.DataObject) -> None:
    folder = tmp_path_factory.mktemp("bad")
    runs = folder / "runs"
    (folder / "list.txt").write_text("a red circle\n")
    command = data.draw(st.sampled_from(["run", "sweep", "replay"]), label="command")
    pool = {"run": BAD_RUN + [["--scheduler", name] for name in MISSING], "sweep": BAD_SWEEP,
            "replay": BAD_REPLAY}[command]
    bad = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3), label="bad")
    base = {"run": ["run", "--prompt", "p", "--steps", "2"], "sweep": ["sweep", str(folder / "list.txt")],
            "replay": ["replay", str(folder / "no-run")]}[command]
    argv = base + [token for pair in bad for token in pair] + ["--runs-dir", str(runs)]
    assert _exit(capsys, argv) == 2
    assert not runs.exists() or not any(runs.iterdir()), f"{argv} recorded something"


@pytest.mark.skipif(not MISSING, reason="every scheduler's optional package is installed here")
def test_a_scheduler_that_cannot_run_here_is_not_offered() -> None:
    from ghostviewer.engine.loading.schedulers import available_schedulers

    assert not set(MISSING) & set(available_schedulers())
