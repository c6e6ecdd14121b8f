"""The weight audit on real pipelines whose weight files were edited: each bad weight found where it lies, a
reference's differences sized and grouped by block, the CLI's exit codes and its one JSON document."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ghostviewer import api
from ghostviewer.analysis.weight_audit import FP16_MAX, block_of
from ghostviewer.cli import main
from tests.engine.tiny_pipelines import build_tiny_sd, save_tiny_sd_single_file

UNET_FILE = "unet/diffusion_pytorch_model.safetensors"


def edited_copy(tiny_sd_dir: Path, folder: Path, edit) -> Path:  # noqa: ANN001 - edit(dict of tensors) -> None
    shutil.copytree(tiny_sd_dir, folder)
    tensors = load_file(str(folder / UNET_FILE))
    edit(tensors)
    save_file(tensors, str(folder / UNET_FILE))
    return folder


def kinds(report: dict) -> dict[str, str]:
    return {f"{f['component']}.{f['tensor']}": f["kind"] for f in report["findings"]}


def test_healthy_pipelines_pass(tiny_sd_dir: Path) -> None:
    for source in ("demo", tiny_sd_dir):
        report = api.audit(source)
        assert report["ok"] and report["findings"] == [], report["findings"]
        assert set(report["components"]) == {"unet", "vae", "text_encoder"}
        assert report["reference"] is None and report["same_as_reference"] is None


def test_each_bad_weight_is_found_where_it_lies(tiny_sd_dir: Path, tmp_path: Path) -> None:
    def edit(t: dict[str, torch.Tensor]) -> None:
        t["mid_block.resnets.0.conv1.weight"][0, 0, 0, 0] = float("nan")
        t["mid_block.resnets.0.conv2.weight"][1, 2, 0, 0] = float("inf")
        t["conv_in.weight"][0, 0, 1, 1] = 1e5  # beyond float16
        # Within float16's range element by element, but a row of fan-in 576 sums past it: a matmul overflow.
        t["down_blocks.1.resnets.0.conv2.weight"][3] = 40.0
        t["up_blocks.1.resnets.0.conv1.weight"].zero_()  # a dead layer
        t["up_blocks.1.resnets.0.conv1.bias"].zero_()  # a zero bias is normal: not a finding

    report = api.audit(edited_copy(tiny_sd_dir, tmp_path / "bad", edit))
    assert not report["ok"] and report["bad"] == 5
    assert kinds(report) == {
        "unet.mid_block.resnets.0.conv1.weight": "nan",
        "unet.mid_block.resnets.0.conv2.weight": "inf",
        "unet.conv_in.weight": "fp16_range",
        "unet.down_blocks.1.resnets.0.conv2.weight": "fp16_range",
        "unet.up_blocks.1.resnets.0.conv1.weight": "zero",
    }
    matmul = next(f for f in report["findings"] if f["tensor"] == "down_blocks.1.resnets.0.conv2.weight")
    assert matmul["detail"]["absmax"] < FP16_MAX < matmul["detail"]["bound"]
    assert matmul["detail"]["fan_in"] == 64 * 9 and "matmul" in matmul["detail"]["why"]
    nan = next(f for f in report["findings"] if f["kind"] == "nan")
    assert nan["detail"]["count"] == 1


def test_differences_from_a_reference_are_sized_and_grouped_by_block(tiny_sd_dir: Path, tmp_path: Path) -> None:
    def edit(t: dict[str, torch.Tensor]) -> None:
        for name in [n for n in t if n.startswith("mid_block.resnets.0.")]:
            t[name] *= 1.5
        del t["conv_out.bias"]

    suspect = edited_copy(tiny_sd_dir, tmp_path / "suspect", edit)
    report = api.audit(suspect, reference=tiny_sd_dir)
    assert report["ok"] and report["same_as_reference"] is False  # changed, but no weight is bad
    changed = {f["tensor"]: f["detail"] for f in report["findings"] if f["kind"] == "differs"}
    scaled = [n for n in changed if n.startswith("mid_block.resnets.0.")]
    assert scaled and all(changed[n]["relative"] == pytest.approx(0.5, rel=1e-3) for n in scaled)
    assert changed["conv_out.bias"]["reason"] == "only in the reference"
    blocks = {(g["component"], g["block"]): g for g in report["blocks"]}
    assert set(blocks) == {("unet", "mid_block.resnets.0"), ("unet", "conv_out")}
    assert blocks[("unet", "mid_block.resnets.0")]["tensors"] == len(scaled)
    assert blocks[("unet", "mid_block.resnets.0")]["max_relative"] == pytest.approx(0.5, rel=1e-3)
    assert api.audit(tiny_sd_dir, reference=tiny_sd_dir)["same_as_reference"] is True


def test_a_pipeline_in_memory_is_audited_from_its_parameters(tiny_sd_dir: Path) -> None:
    pipe = build_tiny_sd()  # the same weights as tiny_sd_dir (seed 0)
    with torch.no_grad():
        pipe.vae.decoder.conv_out.bias.add_(0.25)
        pipe.text_encoder.final_layer_norm.weight.zero_()
    report = api.audit(pipe, reference=tiny_sd_dir)
    assert report["source"].startswith("<in-memory")
    assert not report["ok"]
    found = {(f["component"], f["tensor"], f["kind"]) for f in report["findings"]}
    assert found == {("text_encoder", "final_layer_norm.weight", "zero"),
                     ("text_encoder", "final_layer_norm.weight", "differs"),
                     ("vae", "decoder.conv_out.bias", "differs")}


def test_pickle_weights_are_never_opened(tiny_sd_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "pickled"
    shutil.copytree(tiny_sd_dir, folder)
    for path in (folder / "vae").glob("*.safetensors"):
        path.unlink()
    (folder / "vae" / "diffusion_pytorch_model.bin").write_bytes(b"not even a pickle")
    report = api.audit(folder)
    assert report["ok"] and "vae" not in report["components"]
    assert report["skipped"] == [{"component": "vae", "reason": "only pickle weights "
                                  "(diffusion_pytorch_model.bin): not opened"}]


def test_single_file_checkpoint_is_split_by_component(tmp_path: Path) -> None:
    path, _ = save_tiny_sd_single_file(tmp_path / "model.safetensors")
    report = api.audit(path)
    assert report["ok"] and set(report["components"]) == {"unet", "vae", "text_encoder"}


def test_block_names_follow_the_tracer() -> None:
    assert block_of("down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight") == \
        "down_blocks.1.attentions.0"
    assert block_of("mid_block.resnets.0.conv1.weight") == "mid_block.resnets.0"
    assert block_of("encoder.layers.1.mlp.fc1.weight") == "encoder.layers.1"
    assert block_of("decoder.up_blocks.2.resnets.1.norm1.bias") == "decoder.up_blocks.2.resnets.1"
    assert block_of("conv_in.weight") == "conv_in"
    assert block_of("time_embedding.linear_1.weight") == "time_embedding.linear_1"


def test_cli_exit_codes_and_one_json_document(tiny_sd_dir: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["audit", "--pipeline", str(tiny_sd_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True

    def edit(t: dict[str, torch.Tensor]) -> None:
        t["mid_block.resnets.0.conv2.weight"][0, 0, 0, 0] = float("inf")

    bad = edited_copy(tiny_sd_dir, tmp_path / "bad", edit)
    assert main(["audit", "--pipeline", str(bad), "--reference", str(tiny_sd_dir), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {f["kind"] for f in report["findings"]} == {"inf", "differs"}
    differs = next(f for f in report["findings"] if f["kind"] == "differs")
    assert differs["detail"]["relative"] is None and differs["detail"]["reason"] == "non-finite values"
    assert main(["audit", "--pipeline", str(bad)]) == 1
    assert "inf" in capsys.readouterr().out
    assert main(["audit", "--pipeline", str(tmp_path / "nowhere"), "--json"]) == 2
