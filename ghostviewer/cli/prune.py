"""`ghostviewer prune RUNS_DIR [--older-than AGE] [--verdict WORD]... [--keep-anomalies] [--keep-last N] [--dry-run]
[--json]`: remove whole run folders (and a watch study's kept calls, its rows kept) so a runs folder does not grow
without bound (record/prune.py says what is and is never removed)."""

from __future__ import annotations

import argparse
from typing import Any

from ghostviewer.cli.common import EXIT_OK, print_json, printable
from ghostviewer.record.sizes import size_words


def add_prune_parser(sub: Any) -> None:
    prune = sub.add_parser("prune", help="remove old or healthy runs from a runs folder (never one being written)")
    prune.add_argument("runs_dir", metavar="RUNS_DIR")
    prune.add_argument("--older-than", metavar="AGE", help="only records older than this: 7d, 12h, 30m, 2w "
                       "(a bare number is days)")
    prune.add_argument("--verdict", action="append", metavar="WORD", help="only runs with this verdict (ok, nan, "
                       "blank, …, or failed/cancelled/interrupted); repeat or comma-separate for several")
    prune.add_argument("--keep-anomalies", action="store_true", help="keep every run with a bad verdict, an "
                       "anomaly or an error")
    prune.add_argument("--keep-last", type=int, metavar="N", help="always keep the newest N records")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    prune.add_argument("--json", action="store_true")


def cmd_prune(args: argparse.Namespace) -> int:
    from ghostviewer import api

    result = api.prune(args.runs_dir, older_than=args.older_than, verdict=args.verdict,
                       keep_anomalies=args.keep_anomalies, keep_last=args.keep_last, dry_run=args.dry_run)
    if args.json:
        print_json(result)
        return EXIT_OK
    verb = "would remove" if result["dry_run"] else "removed"
    for item in result["removed"]:
        print(f"{verb} {item['kind']} {printable(item['path'])} ({item['verdict'] or 'no verdict'}, "
              f"made {item['created_at']}, {size_words(item['bytes'])})")
    for item in result["left"]:
        print(f"left {printable(item['path'])}: {item['reason']}")
    count = len(result["removed"])
    print(f"{verb} {count} record{'s' if count != 1 else ''}, {'would free' if result['dry_run'] else 'freed'} "
          f"{size_words(result['bytes_freed'])}; kept {result['kept']}"
          + (" (dry run: nothing removed)" if result["dry_run"] else ""))
    return EXIT_OK
