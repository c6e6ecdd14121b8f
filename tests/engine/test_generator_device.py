"""`--generator-device cuda`: where torch sees no CUDA device it is refused in one line (exit 2) before any
pipeline loads; on a GPU a run with a CUDA generator records that device and replays bit-identical (skipped without
CUDA, so it runs the day a GPU is at hand)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.record import RunRecord
from ghostviewer.spec import RunSpec, UserError

PROMPT = "a red circle on a blue background"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_cuda_generator_without_cuda_is_refused_before_the_pipeline_loads(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    runs = tmp_path / "runs"
    # a pipeline that does not exist: refused for the generator, not for the source, so nothing was loaded first
    code = main(["run", "--pipeline", str(tmp_path / "no-such-pipeline"), "--prompt", PROMPT,
                 "--generator-device", "cuda", "--runs-dir", str(runs)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--generator-device cuda needs a CUDA device" in err[0]
    assert not runs.exists() or not list(runs.iterdir())
    with pytest.raises(UserError, match="needs a CUDA device"):
        api.run_spec(tmp_path / "no-such-pipeline", RunSpec(prompt=PROMPT, generator_device="cuda"), runs_dir=runs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_run_with_a_cuda_generator_records_it_and_replays_bit_identical(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    spec = RunSpec(prompt=PROMPT, steps=3, seed=7, device="cuda", generator_device="cuda")
    result = api.run_spec("demo", spec, runs_dir=runs)
    record = RunRecord(result["run_dir"])
    assert record.settings["generator_device"] == "cuda"
    assert record.environment["determinism"]["generator_device"] == "cuda"
    replayed = api.replay(result["run_dir"], times=1, runs_dir=runs)
    assert replayed["reproduced"] is True and replayed["first_divergence"] is None, replayed
    # the CUDA generator's noise is its own: the same seed on the CPU's generator draws another image
    on_cpu = api.run_spec("demo", RunSpec(prompt=PROMPT, steps=3, seed=7, device="cuda"), runs_dir=runs)
    with Image.open(result["image"]) as a, Image.open(on_cpu["image"]) as b:
        assert not np.array_equal(np.asarray(a), np.asarray(b))
