"""AUTOMATIC1111's prompt files and styles, read strictly.

A prompt file ("Prompts from file or textbox") holds one run a line: a plain prompt, or options
`--prompt "…" --negative_prompt "…" --seed 5 --steps 20 --cfg_scale 7 --width 512 --sampler_name "Euler a"`.
A1111 turns a line it cannot read into the prompt itself; here it is refused, naming the line. Options that only say
where A1111 saves its files are accepted and have no effect; options that would change the image in a way GhostViewer
cannot reproduce (face restoration, tiling, variation seeds, another model) are refused, naming the option.

A styles file (`styles.csv`: name, prompt, negative_prompt) applies a named style to each row as A1111 does: a style
prompt holding `{prompt}` has the row's prompt put there, any other is appended after a comma.
"""

from __future__ import annotations

import csv
import difflib
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ghostviewer.spec.errors import SpecError


class A1111Error(SpecError):
    """A prompt-file line or a styles file that cannot be read; the message names the file and line."""


def _int(value: str) -> int:
    return int(value)


def _float(value: str) -> float:
    return float(value)


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ValueError(value)
    return lowered == "true"


# A1111's sampler names (and its k_ aliases) -> GhostViewer's scheduler names; the rest have no diffusers scheduler
# that GhostViewer swaps in with the same behaviour (Karras sigmas, DPM2, adaptive steps).
SAMPLERS = {
    "euler a": "euler_a", "k_euler_a": "euler_a", "euler": "euler", "k_euler": "euler", "lms": "lms",
    "k_lms": "lms", "heun": "heun", "k_heun": "heun", "dpm++ 2m": "dpm++", "k_dpmpp_2m": "dpm++",
    "dpm++ sde": "dpm++_sde", "k_dpmpp_sde": "dpm++_sde", "ddim": "ddim", "plms": "pndm", "unipc": "unipc",
}

# option -> (reader, row key or None for no effect on the image); every option A1111's script accepts is here.
OPTIONS: dict[str, tuple[Callable[[str], Any], str | None]] = {
    "prompt": (str, "prompt"),
    "negative_prompt": (str, "negative"),
    "seed": (_int, "seed"),
    "steps": (_int, "steps"),
    "cfg_scale": (_float, "guidance"),
    "width": (_int, "width"),
    "height": (_int, "height"),
    "sampler_name": (str, "scheduler"),
    "styles": (str, "styles"),
    "outpath_samples": (str, None),
    "outpath_grids": (str, None),
    "prompt_for_display": (str, None),
    "do_not_save_samples": (_bool, None),
    "do_not_save_grid": (_bool, None),
    "batch_size": (_int, "batch_size"),
    "n_iter": (_int, "n_iter"),
    "restore_faces": (_bool, "restore_faces"),
    "tiling": (_bool, "tiling"),
    "subseed": (_int, None),  # no effect while subseed_strength is 0 (checked)
    "subseed_strength": (_float, "subseed_strength"),
    "seed_resize_from_h": (_int, "seed_resize_from_h"),
    "seed_resize_from_w": (_int, "seed_resize_from_w"),
    "sampler_index": (_int, "sampler_index"),
    "sd_model": (str, "sd_model"),
}
# Options accepted only at the value that changes nothing (A1111's defaults); any other value is refused.
NEUTRAL = {"batch_size": 1, "n_iter": 1, "restore_faces": False, "tiling": False, "subseed_strength": 0.0,
           "seed_resize_from_h": 0, "seed_resize_from_w": 0}
WHY_NOT = {
    "batch_size": "one image a row (sweep several seeds with --seeds instead)",
    "n_iter": "one image a row (sweep several seeds with --seeds instead)",
    "restore_faces": "face restoration runs outside the diffusers pipeline",
    "tiling": "seamless tiling patches the model's convolutions",
    "subseed_strength": "variation seeds mix two noises",
    "seed_resize_from_h": "seed resizing draws the noise at another size",
    "seed_resize_from_w": "seed resizing draws the noise at another size",
    "sampler_index": "sampler indexes depend on the A1111 install; use --sampler_name",
    "sd_model": "the model is the sweep's --pipeline",
}


def is_a1111_line(line: str) -> bool:
    return line.lstrip().startswith("--")


def parse_line(line: str, where: str) -> dict[str, Any]:
    """One option line as a prompt-list row (prompt, negative, seed, steps, guidance, width, height, scheduler,
    and `styles` for apply_styles); A1111Error naming `where` for anything it cannot take."""
    try:
        words = shlex.split(line)
    except ValueError as exc:  # an unclosed quote
        raise A1111Error(f"{where}: {exc}") from None
    row: dict[str, Any] = {}
    pos = 0
    while pos < len(words):
        word = words[pos]
        if not word.startswith("--"):
            raise A1111Error(f"{where}: expected an --option, found {word!r}")
        name = word[2:]
        if name not in OPTIONS:
            near = difflib.get_close_matches(name, list(OPTIONS), n=1)
            hint = f" (did you mean --{near[0]}?)" if near else ""
            raise A1111Error(f"{where}: unknown A1111 option {word}{hint}")
        reader, key = OPTIONS[name]
        if name in ("prompt", "negative_prompt"):  # as A1111: the words up to the next --option, joined
            end = pos + 1
            while end < len(words) and not words[end].startswith("--"):
                end += 1
            value: Any = " ".join(words[pos + 1:end])
            pos = end
        else:
            if pos + 1 >= len(words):
                raise A1111Error(f"{where}: {word} needs a value")
            text = words[pos + 1]
            try:
                value = reader(text)
            except ValueError:
                kind = {"_int": "a whole number", "_float": "a number", "_bool": "true or false"}.get(reader.__name__,
                                                                                                        "a value")
                raise A1111Error(f"{where}: {word} must be {kind}, not {text!r}") from None
            pos += 2
        if key is None:
            continue
        if key == "scheduler":
            value = _scheduler(value, where)
        if name in WHY_NOT and NEUTRAL.get(name, object()) != value:
            raise A1111Error(f"{where}: {word} {value!r} cannot be reproduced here: {WHY_NOT[name]}")
        if name in NEUTRAL:
            continue
        row[key] = value
    if "prompt" not in row:
        raise A1111Error(f"{where}: the line has no --prompt")
    return row


def _scheduler(name: str, where: str) -> str:
    short = SAMPLERS.get(name.strip().lower())
    if short is None:
        raise A1111Error(f"{where}: the A1111 sampler {name!r} has no scheduler GhostViewer can swap in; "
                         f"use one of: {', '.join(sorted({k for k in SAMPLERS if not k.startswith('k_')}))}")
    return short


@dataclass(frozen=True)
class Style:
    name: str
    prompt: str
    negative: str

    def apply(self, row: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(row)
        out["prompt"] = merge(self.prompt, str(row.get("prompt", "")))
        negative = merge(self.negative, str(row.get("negative", "")))
        if negative:
            out["negative"] = negative
        return out


def merge(style: str, text: str) -> str:
    """A1111's merge of a style's text with a prompt: `{prompt}` in the style takes it, else both, comma-joined."""
    if "{prompt}" in style:
        return style.replace("{prompt}", text)
    return ", ".join(part for part in (text.strip(), style.strip()) if part)


def read_styles(path: str | Path) -> dict[str, Style]:
    """A1111's styles.csv: name -> Style; A1111Error (file and line) for a file it is not."""
    path = Path(path)
    try:
        if not path.is_file():
            raise A1111Error(f"{path.name}: no such styles file")
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle, strict=True)
            fields = reader.fieldnames or []
            if "name" not in fields or "prompt" not in fields:
                raise A1111Error(f"{path.name} line 1: a styles file has 'name' and 'prompt' columns")
            styles: dict[str, Style] = {}
            for row in reader:
                name = (row.get("name") or "").strip()
                if not name:
                    raise A1111Error(f"{path.name} line {reader.line_num}: a style without a name")
                styles[name] = Style(name, row.get("prompt") or "", row.get("negative_prompt") or "")
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise A1111Error(f"cannot read styles file {path.name}: {exc}") from None
    return styles


def apply_styles(rows: Iterable[dict[str, Any]], styles: Mapping[str, Style], chosen: Iterable[str] = ()
                 ) -> Iterable[dict[str, Any]]:
    """Each row with the chosen styles (`--style NAME`, then those its own `styles` option names) applied, in order."""
    chosen = list(chosen)
    for name in chosen:
        _style(styles, name, "--style")
    for row in rows:
        row = dict(row)
        own = [s.strip() for s in str(row.pop("styles", "") or "").split(",") if s.strip()]
        for name in [*chosen, *own]:
            row = _style(styles, name, f"the row of {row.get('prompt')!r}").apply(row)
        yield row


def _style(styles: Mapping[str, Style], name: str, where: str) -> Style:
    if name not in styles:
        near = difflib.get_close_matches(name, list(styles), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else (f"; the file has: {', '.join(styles)}" if styles else "")
        raise A1111Error(f"{where}: no style named {name!r}{hint}")
    return styles[name]
