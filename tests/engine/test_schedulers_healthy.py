"""Every scheduler GhostViewer offers, on healthy demo runs at 2 and 4 steps: no failure-level anomaly (only the
float16-headroom note on latents that a sigma scheduler makes large by design). Heun is the exception, and its
anomaly is no false alarm: on the demo's cosine schedule (sigma_max ~2·10⁴, trailing spacing) its second-order
correction over the first step multiplies the difference of two denoised predictions by sigma_max / sigma_1, the
latents leave the sigma-scaled range and the decoded image is wrong (a blue circle on purple where every other
scheduler draws an orange one on yellow). PNDM needs 4 steps for its Runge–Kutta warm-up: refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ghostviewer import api
from ghostviewer.analysis.anomaly import first_failure, recorded_latent_sigma
from ghostviewer.engine.errors import GhostError
from ghostviewer.engine.loading.schedulers import available_schedulers
from ghostviewer.record import RunRecord

HEALTHY = [s for s in available_schedulers() if s != "heun"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("schedulers")


_MADE: dict[tuple[str, str, int], dict] = {}  # (folder, scheduler, steps): a run made once, only read after


def _run(pipe: object, folder: Path, scheduler: str, steps: int) -> tuple[dict, RunRecord]:
    key = (str(folder), scheduler, steps)
    if key not in _MADE:  # Heun's check compares with the Euler run the healthy check made
        _MADE[key] = api.run(pipe, "a red circle", steps=steps, scheduler=scheduler, runs_dir=folder)
    return _MADE[key], RunRecord(_MADE[key]["run_dir"])


def _failure(record: RunRecord) -> dict | None:
    return first_failure(record.stats(), latent_sigma=recorded_latent_sigma(record.environment))


def _colour(record: RunRecord) -> np.ndarray:
    path = record.image_path("final")
    assert path is not None
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.float64).mean(axis=(0, 1))


@pytest.mark.parametrize("steps", [2, 4])
def test_no_offered_scheduler_raises_a_failure_on_a_healthy_run(demo_loaded, folder: Path, steps: int) -> None:
    for scheduler in HEALTHY:
        if scheduler == "pndm" and steps < 4:
            continue
        run, record = _run(demo_loaded.pipe, folder, scheduler, steps)
        assert run["verdict"]["label"] == "ok", scheduler
        assert _failure(record) is None, (scheduler, steps, _failure(record))
        first = run["first_anomaly"]
        assert first is None or (first["kind"], first["module"]) == ("overflow", "pipeline.prepare_latents"), first


def test_heuns_anomaly_on_the_demo_is_a_real_divergence(demo_loaded, folder: Path) -> None:
    _run_e, euler = _run(demo_loaded.pipe, folder, "euler", 2)
    _run_h, heun = _run(demo_loaded.pipe, folder, "heun", 2)
    failure = _failure(heun)
    assert failure is not None and failure["module"] in ("scheduler.step", "unet.conv_in"), failure
    red, _green, blue = _colour(euler)
    assert red > 200 and blue < 80  # the demo's circle on yellow
    red, _green, blue = _colour(heun)
    assert blue > 180 and red < 160  # Heun's diverged latents decode to another picture


def test_pndm_with_fewer_steps_than_its_warm_up_is_refused_in_one_line(demo_loaded, tmp_path: Path) -> None:
    with pytest.raises(GhostError) as caught:
        api.run(demo_loaded.pipe, "a red circle", steps=2, scheduler="pndm", runs_dir=tmp_path)
    assert "at least 4 steps" in str(caught.value) and "\n" not in str(caught.value)
    assert not any(tmp_path.iterdir())  # nothing recorded
    assert type(demo_loaded.pipe.scheduler).__name__ == "DDIMScheduler"  # the pipeline's own scheduler kept
