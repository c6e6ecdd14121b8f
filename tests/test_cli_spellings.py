"""The command line answers to the spellings CONTRACT.md uses as well as its own."""

from __future__ import annotations

import pytest

from ghostviewer.cli import build_parser


@pytest.mark.parametrize("flag", ["--control-scale", "--controlnet-scale"])
def test_control_scale_has_both_spellings(flag: str) -> None:
    args = build_parser().parse_args(["run", "--prompt", "a red circle", "--control-image", "c.png", flag, "0.25"])
    assert args.controlnet_scale == 0.25


def test_control_scale_alias_shown_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    assert "--control-scale" in capsys.readouterr().out
