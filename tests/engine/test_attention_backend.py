"""The attention backend as a setting: diffusers' processor on every Attention module for the run (sdpa, torch's
math kernel, eager), recorded, replayed, put back after the run, a candidate of settings bisection, and refused in
one line when unknown or when it would drop a processor of the user's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from diffusers.models.attention_processor import Attention, AttnProcessor2_0

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.engine.errors import GhostError
from ghostviewer.record import RunRecord
from ghostviewer.spec import UserError

PROMPT = "a red circle"


def _attention(pipe: Any) -> list[tuple[str, Attention]]:
    return [(f"{name}.{path}", m) for name, component in pipe.components.items()
            if hasattr(component, "named_modules") for path, m in component.named_modules() if isinstance(m, Attention)]


def _processor_seen(pipe: Any) -> tuple[dict[str, str], list[Any]]:
    """The processor class each Attention module ran with (a pre-hook of the test's own)."""
    seen: dict[str, str] = {}
    handles = [module.register_forward_pre_hook(
        lambda m, _a, path=path: seen.__setitem__(path, type(m.processor).__name__)) for path, module in
        _attention(pipe)]
    return seen, handles


@pytest.mark.parametrize(("backend", "processor"), [("eager", "AttnProcessor"), ("math", "MathAttnProcessor"),
                                                    ("sdpa", "AttnProcessor2_0")])
def test_a_backend_runs_on_every_attention_module_and_is_recorded(demo_loaded, runs_dir: Path, backend: str,
                                                                  processor: str) -> None:
    pipe = demo_loaded.pipe
    before = {path: type(m.processor) for path, m in _attention(pipe)}
    seen, handles = _processor_seen(pipe)
    try:
        run = api.run(pipe, PROMPT, steps=2, attention_backend=backend, runs_dir=runs_dir)
    finally:
        for handle in handles:
            handle.remove()
    assert seen and set(seen.values()) == {processor}
    assert set(seen) == {path for path, _m in _attention(pipe)}  # every one (the demo's are the U-Net's)
    assert RunRecord(run["run_dir"]).settings["attention_backend"] == backend
    assert {path: type(m.processor) for path, m in _attention(pipe)} == before  # the pipeline's own put back


def test_a_backend_replays_bit_identical_and_the_default_is_not_recorded(demo_loaded, runs_dir: Path) -> None:
    run = api.run(demo_loaded.pipe, PROMPT, steps=2, attention_backend="eager", runs_dir=runs_dir)
    replay = api.replay(run["run_dir"], times=1, pipeline=demo_loaded.pipe)
    assert replay["reproduced"] is True, replay
    plain = api.run(demo_loaded.pipe, PROMPT, steps=2, runs_dir=runs_dir)
    assert "attention_backend" not in RunRecord(plain["run_dir"]).settings  # records read as they always have


def test_an_unknown_backend_or_a_users_processor_is_refused(demo_loaded, runs_dir: Path) -> None:
    with pytest.raises(UserError, match="attention backend must be one of sdpa, math, eager"):
        api.run(demo_loaded.pipe, PROMPT, steps=2, attention_backend="flash", runs_dir=runs_dir)
    pipe = demo_loaded.pipe
    path, module = _attention(pipe)[0]

    class MyProcessor(AttnProcessor2_0):
        pass

    original = module.processor
    module.set_processor(MyProcessor())
    try:
        with pytest.raises(GhostError) as caught:
            api.run(pipe, PROMPT, steps=2, attention_backend="eager", runs_dir=runs_dir)
    finally:
        module.set_processor(original)
    assert "\n" not in str(caught.value) and path in str(caught.value) and "MyProcessor" in str(caught.value)
    assert not any(runs_dir.iterdir())  # nothing recorded


def test_the_backend_is_a_settings_bisection_candidate(demo_loaded, runs_dir: Path) -> None:
    """A user's hook that breaks under the eager processor only (their code expects torch's SDPA, say)."""
    pipe = demo_loaded.pipe
    _path, module = next((p, m) for p, m in _attention(pipe) if p.startswith("unet."))

    def maybe_nan(m: Any, _args: tuple, output: Any) -> Any:
        return output + float("nan") if type(m.processor).__name__ == "AttnProcessor" else output

    handle = module.register_forward_hook(maybe_nan)
    try:
        good = api.run(pipe, PROMPT, steps=2, runs_dir=runs_dir)
        bad = api.run(pipe, PROMPT, steps=3, attention_backend="eager", runs_dir=runs_dir)
        assert bad["verdict"]["label"] == "nan"
        result = api.bisect(bad["run_dir"], settings=good["run_dir"], pipeline=pipe, runs_dir=runs_dir)
    finally:
        handle.remove()
    assert result["culprit_settings"] == {"attention_backend": [None, "eager"]}, result["trail"]


def test_cli_run_takes_the_attention_backend(runs_dir: Path, capsys) -> None:
    code = main(["run", "--prompt", PROMPT, "--steps", "2", "--attention-backend", "math", "--runs-dir",
                 str(runs_dir), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and RunRecord(result["run_dir"]).settings["attention_backend"] == "math"
    assert main(["run", "--prompt", PROMPT, "--attention-backend", "flash"]) == 2
