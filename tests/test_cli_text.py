"""What the command line reads and prints: the spellings CONTRACT.md uses as well as its own, the run summary."""

from __future__ import annotations

import pytest

from ghostviewer.cli import build_parser
from ghostviewer.cli.common import describe_run


@pytest.mark.parametrize("flag", ["--control-scale", "--controlnet-scale"])
def test_control_scale_has_both_spellings(flag: str) -> None:
    args = build_parser().parse_args(["run", "--prompt", "a red circle", "--control-image", "c.png", flag, "0.25"])
    assert args.controlnet_scale == 0.25


def test_control_scale_alias_shown_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    assert "--control-scale" in capsys.readouterr().out


def test_run_summary_names_the_weight_audits_likely_cause() -> None:
    # The shape api.run returns when a failed weight audit lies in the first anomaly's module (engine audit_cite).
    result = {"verdict": {"label": "nan", "reason": "NaN in the final image"}, "image": "final.png",
              "run_dir": "runs/r1", "first_anomaly": {
                  "kind": "nan", "module": "unet.mid_block.resnets.0", "step": 0, "phase": "denoise",
                  "likely_cause": {"source": "weight audit", "kind": "nan",
                                   "summary": "NaN weights in unet.mid_block.resnets.0.conv1.weight (weight audit)"}}}
    lines = describe_run(result).splitlines()
    assert lines[3] == "first anomaly: nan in unet.mid_block.resnets.0 (step 0)"
    assert lines[4] == "likely cause:  NaN weights in unet.mid_block.resnets.0.conv1.weight (weight audit)"
    del result["first_anomaly"]["likely_cause"]
    assert len(describe_run(result).splitlines()) == 4
