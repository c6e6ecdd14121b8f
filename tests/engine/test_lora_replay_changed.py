"""Replaying a LoRA run whose LoRA file changed since (its sha256 differs from the record's) is refused in one line,
from the API and from `ghostviewer replay` (exit 2): a replay on other weights could only say "not reproduced"
for an edited file. With the recorded bytes back, the same replay reproduces."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import torch
from diffusers import StableDiffusionPipeline
from peft import LoraConfig, get_peft_model_state_dict

from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.spec import UserError

PROMPT = "a red circle on a blue background"


def _lora(demo_loaded, folder: Path, name: str, seed: int) -> Path:  # noqa: ANN001
    unet = copy.deepcopy(demo_loaded.pipe.unet)
    unet.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=["to_q", "to_v"]))
    generator = torch.Generator().manual_seed(seed)
    state = {k: torch.randn(v.shape, generator=generator) * 0.3 if "lora_B" in k else v
             for k, v in get_peft_model_state_dict(unet).items()}
    StableDiffusionPipeline.save_lora_weights(folder, unet_lora_layers=state, weight_name=name,
                                              safe_serialization=True)
    return folder / name


def test_a_replay_of_a_run_whose_lora_changed_is_refused(demo_loaded, tmp_path: Path, runs_dir: Path,
                                                         capsys) -> None:  # noqa: ANN001
    lora = _lora(demo_loaded, tmp_path, "style.safetensors", seed=0)
    kept = tmp_path / "kept.safetensors"
    shutil.copy(lora, kept)
    result = api.run(demo_loaded.pipe, PROMPT, steps=2, seed=1, runs_dir=runs_dir, lora=f"{lora}:0.8")
    _lora(demo_loaded, tmp_path, "style.safetensors", seed=1)  # the same name, other weights
    with pytest.raises(UserError) as refused:
        api.replay(result["run_dir"], times=1, pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    message = str(refused.value)
    assert "\n" not in message and f"the LoRA {lora} changed since this run was recorded (sha256" in message
    assert main(["replay", result["run_dir"], "--runs-dir", str(runs_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed since this run was recorded" in err[0], err
    shutil.copy(kept, lora)  # the recorded bytes back: it reproduces
    report = api.replay(result["run_dir"], times=1, pipeline=demo_loaded.pipe, runs_dir=runs_dir)
    assert report["reproduced"] is True
