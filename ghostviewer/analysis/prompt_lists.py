"""Prompt lists dropped or opened in the window: .txt (one prompt a line, # comments), .csv (a `prompt`
column; optional negative, seed, steps, guidance), .jsonl / .json (objects with the same keys, or strings)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

PROMPT_LIST_SUFFIXES = (".txt", ".csv", ".jsonl", ".json")
KEYS = {"prompt": str, "negative": str, "seed": int, "steps": int, "guidance": float}


class PromptListError(ValueError):
    """The list cannot be read; the message is one line for the user."""


def _clean(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, str):
        item = {"prompt": item}
    if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
        raise PromptListError(f"{where}: each entry needs a 'prompt'")
    out: dict[str, Any] = {}
    for key, kind in KEYS.items():
        value = item.get(key)
        if value is None or value == "":
            continue
        try:
            out[key] = kind(value)
        except (TypeError, ValueError) as exc:
            raise PromptListError(f"{where}: {key} {value!r} is not a valid {kind.__name__}") from exc
    return out


def read_prompt_list(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in PROMPT_LIST_SUFFIXES:
        raise PromptListError(f"{path.name} is not a prompt list ({', '.join(PROMPT_LIST_SUFFIXES)})")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptListError(str(exc)) from exc
    if suffix == ".txt":
        lines = (line.strip() for line in text.splitlines())
        return [{"prompt": line} for line in lines if line and not line.startswith("#")]
    if suffix == ".csv":
        reader = csv.DictReader(text.splitlines())
        if "prompt" not in (reader.fieldnames or []):
            raise PromptListError(f"{path.name} has no 'prompt' column")
        return [_clean(row, f"{path.name} row {i}") for i, row in enumerate(reader, start=2)]
    try:
        if suffix == ".jsonl":
            items = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            items = json.loads(text)
    except ValueError as exc:
        raise PromptListError(f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(items, list):
        raise PromptListError(f"{path.name} must hold a list of prompts")
    return [_clean(item, f"{path.name} entry {i}") for i, item in enumerate(items, start=1)]
