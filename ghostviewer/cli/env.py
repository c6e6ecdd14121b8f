"""`ghostviewer env [--json]`: this machine as an upstream bug report needs it (what `diffusers-cli env` prints and
what these bugs also depend on), to paste under "System Info"."""

from __future__ import annotations

import argparse
from typing import Any

from ghostviewer.cli.common import EXIT_OK, print_json


def add_env_parser(sub: Any) -> None:
    env = sub.add_parser("env", help="print this machine's versions, GPU and flags for a bug report")
    env.add_argument("--json", action="store_true")


def cmd_env(args: argparse.Namespace) -> int:
    from ghostviewer import api
    from ghostviewer.system_info import format_report

    report = api.env()
    print_json(report) if args.json else print(format_report(report))
    return EXIT_OK
