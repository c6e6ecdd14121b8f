"""Two run-log findings on the demo pipeline: "prompt truncated" (a prompt past the tokenizer's limit, 32 tokens on
the demo: how many tokens were dropped and which words, for GhostViewer's own calls and watched ones) and the opt-in
"batch variance" (each image of a batch made again alone from its share of the noise: a healthy pipeline matches
within float noise; one that mixes the samples of a batch is named, image by image, and `run` exits 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import ghostviewer
from ghostviewer import api
from ghostviewer.cli import main
from ghostviewer.record import RunRecord
from ghostviewer.spec import UserError

PROMPT = "a red circle on a blue background"
LONG = ", ".join([PROMPT] * 4) + ", a green star, top left"  # 38 tokens: past the demo's 32 (BOS, EOS included)


def test_a_long_prompt_is_named_truncated_with_its_dropped_words(demo_loaded, runs_dir: Path) -> None:
    result = api.run(demo_loaded.pipe, LONG, negative="blurry", steps=2, runs_dir=runs_dir)
    (finding,) = RunRecord(result["run_dir"]).events(kind="prompt_truncated")
    data = finding.data
    assert data["which"] == "prompt" and data["limit"] == 32 and data["dropped"] == data["tokens"] - 32
    assert data["tokens"] == 40 and data["dropped"] == 8
    assert "green star" in data["dropped_text"] and data["dropped_text"].endswith("top left")  # never encoded
    assert demo_loaded.pipe.tokenizer.decode(data["dropped_ids"]).split()[-1] == "left"
    assert f"{data['dropped']} tokens dropped" in finding.message and finding.level == "warning"
    short = api.run(demo_loaded.pipe, PROMPT, negative=LONG, steps=2, runs_dir=runs_dir)
    (negative,) = RunRecord(short["run_dir"]).events(kind="prompt_truncated")
    assert negative.data["which"] == "negative_prompt"
    plain = api.run(demo_loaded.pipe, PROMPT, steps=2, runs_dir=runs_dir)
    assert not RunRecord(plain["run_dir"]).events(kind="prompt_truncated")


def test_a_watched_call_with_a_long_prompt_is_named_truncated(demo_loaded, tmp_path: Path) -> None:
    pipe = demo_loaded.pipe
    with ghostviewer.watch(pipe, runs_dir=tmp_path / "watched") as watcher:
        pipe(LONG, num_inference_steps=2, output_type="np", generator=torch.Generator().manual_seed(1))
    (run,) = watcher.runs
    (finding,) = RunRecord(run["run_dir"]).events(kind="prompt_truncated")
    assert "8 tokens dropped" in finding.message and "top left" in finding.message


def test_the_command_line_prints_the_truncation_as_a_finding(runs_dir: Path, capsys) -> None:
    # exit 0 or 1: the demo's baseline (short prompts) may see the text encoder drift on a prompt this long
    assert main(["run", "--prompt", LONG, "--steps", "2", "--runs-dir", str(runs_dir)]) in (0, 1)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("finding: prompt truncated")]
    assert len(lines) == 1 and "tokenizer keeps 32" in lines[0] and "top left" in lines[0]


class _SampleMixer:
    """A user's hook that makes each sample lean on the batch's mean: results that depend on the batch."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.handle = module.register_forward_hook(lambda _m, _a, out: out + 2.0 * out.mean(dim=0, keepdim=True))

    def remove(self) -> None:
        self.handle.remove()


def test_a_healthy_batch_matches_each_image_made_alone(demo_loaded, runs_dir: Path) -> None:
    result = api.run(demo_loaded.pipe, PROMPT, steps=2, seed=3, batch=2, runs_dir=runs_dir,
                     check_batch_variance=True)
    report = result["batch_variance"]
    assert report["differ"] == [] and report["batch"] == 2 and max(report["max_abs_diff"]) <= report["tolerance"]
    record = RunRecord(result["run_dir"])
    assert not record.events(kind="batch_variance")
    assert "each of the 2 images matches" in record.events(kind="batch_variance_checked")[0].message


def test_a_batch_that_mixes_its_samples_is_named(demo_loaded, runs_dir: Path, capsys) -> None:
    mixer = _SampleMixer(demo_loaded.pipe.unet.mid_block)
    try:
        result = api.run(demo_loaded.pipe, PROMPT, steps=2, seed=3, batch=3, runs_dir=runs_dir,
                         check_batch_variance=True)
    finally:
        mixer.remove()
    report = result["batch_variance"]
    assert report["differ"] == [0, 1, 2] and min(report["max_abs_diff"]) > report["tolerance"]
    (finding,) = RunRecord(result["run_dir"]).events(kind="batch_variance")
    assert "3 of 3 images differ" in finding.message and "image 1 (" in finding.message
    assert finding.data["seed"] == 3
    # The solo calls left nothing behind: the same run without the check is the record's image.
    again = api.run(demo_loaded.pipe, PROMPT, steps=2, seed=3, batch=3, runs_dir=runs_dir)
    assert "batch_variance" not in again


def test_the_check_from_the_command_line(runs_dir: Path, capsys) -> None:
    common = ["run", "--prompt", PROMPT, "--steps", "2", "--runs-dir", str(runs_dir)]
    assert main([*common, "--check-batch-variance"]) == 2  # a batch of one: nothing to compare
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs --batch 2 or more" in err[0], err
    assert not list(runs_dir.iterdir())  # img2img and inpaint: tests/engine/test_batch_variance_kinds.py
    assert main([*common, "--batch", "2", "--check-batch-variance"]) == 0
    assert "finding: batch variance checked: each of the 2 images matches" in capsys.readouterr().out


def test_the_check_needs_a_batch_in_the_api(demo_loaded, runs_dir: Path) -> None:
    kwargs: dict[str, Any] = {"steps": 2, "runs_dir": runs_dir, "check_batch_variance": True}
    with pytest.raises(UserError, match="needs --batch 2 or more"):
        api.run(demo_loaded.pipe, PROMPT, **kwargs)
