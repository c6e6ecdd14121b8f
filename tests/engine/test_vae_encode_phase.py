"""img2img and inpaint encode their images with the VAE before the first step: those modules belong to the encode
phase, so a fault there is named before anything it feeds (not as a decode after the whole denoising)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ghostviewer import api
from ghostviewer.engine.tracing.blocks import phase_of
from ghostviewer.record import RunRecord
from ghostviewer.record.types import PHASE_ORDER


def test_the_vae_encoder_runs_in_the_encode_phase_and_its_decoder_in_the_decode_one() -> None:
    assert {phase_of(p) for p in ("vae.encoder", "vae.encoder.down_blocks.0.resnets.0", "vae.quant_conv")} == {"encode"}
    assert {phase_of(p) for p in ("vae.decoder", "vae.decoder.up_blocks.1", "vae.post_quant_conv")} == {"decode"}
    assert PHASE_ORDER["encode"] < PHASE_ORDER["denoise"] < PHASE_ORDER["decode"]


def test_a_nan_in_the_vae_encoder_of_an_img2img_run_is_the_first_anomaly_in_encode(demo_loaded,
                                                                                  tmp_path: Path) -> None:
    init = tmp_path / "init.png"
    Image.fromarray(np.full((64, 64, 3), (40, 200, 40), np.uint8)).save(init)
    pipe = demo_loaded.pipe

    def poison(_module, _args, output):  # noqa: ANN001, ANN202 - a user's own forward hook
        return torch.full_like(output, float("nan"))

    handle = pipe.vae.encoder.mid_block.register_forward_hook(poison)
    try:
        run = api.run(pipe, "a red circle on a blue background", seed=1, steps=2, init_image=init, strength=1.0,
                      runs_dir=tmp_path / "runs")
    finally:
        handle.remove()
    anomaly = run["first_anomaly"]
    assert anomaly["module"].startswith("vae.encoder") and anomaly["phase"] == "encode", anomaly
    record = RunRecord(run["run_dir"])
    encoded = {row.module for row in record.stats(phase="encode")}
    decoded = {row.module for row in record.stats(phase="decode")}
    assert "vae.encoder.mid_block" in encoded and "vae.encoder.mid_block" not in decoded
    assert any(m.startswith("vae.decoder") for m in decoded) and not any(m.startswith("vae.encoder") for m in decoded)
