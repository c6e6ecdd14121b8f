"""Dynamic-prompt templates (`a {red|blue} {circle|square}`, `{2$$a|b|c}`, `__colour__` wildcards), expanded through
the `dynamicprompts` library that A1111's and other front ends use — before a sweep starts, into frozen rows.

Combinatorial by default (every variant, capped), or random with a seed (`mode="random"`, `count` variants a
template). A wildcard with no file, or a template the library cannot parse, is refused naming the line; the
provenance — each template, the wildcard files' sha256 and the expansion seed — goes into the sweep's study, so a
resumed sweep runs the same rows whatever happened to the files since.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ghostviewer.spec.errors import SpecError

MAX_VARIANTS = 10_000  # of one template, combinatorial: past this a template is a typo, not a sweep
_VARIANT = re.compile(r"\{[^{}]*\|[^{}]*\}")
_WILDCARD = re.compile(r"__([\w./*-]+?)__")


class TemplateError(SpecError):
    """A template that cannot be expanded; the message names the list and line."""


@dataclass(frozen=True)
class TemplateOptions:
    mode: str = "combinatorial"  # or "random"
    count: int | None = None  # random: variants a template (default 1); combinatorial: a cap below MAX_VARIANTS
    seed: int = 0  # random mode's expansion seed
    wildcards: Path | None = None  # the wildcard folder (default: `wildcards/` beside the list)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "count": self.count, "seed": self.seed,
                "wildcards": str(self.wildcards) if self.wildcards else None}


def is_template(text: str) -> bool:
    """True when a prompt holds a variant group `{a|b}` or a `__wildcard__`."""
    return bool(_VARIANT.search(text) or _WILDCARD.search(text))


def wildcard_folder(list_path: Path | None, options: TemplateOptions) -> Path | None:
    if options.wildcards is not None:
        return Path(options.wildcards)
    if list_path is not None and (Path(list_path).parent / "wildcards").is_dir():
        return Path(list_path).parent / "wildcards"
    return None


class Expander:
    """Expands the templates of one list with one wildcard folder and one seed, and keeps their provenance."""

    def __init__(self, options: TemplateOptions, folder: Path | None) -> None:
        if options.mode not in ("combinatorial", "random"):
            raise TemplateError(f"template mode must be combinatorial or random, not {options.mode!r}")
        if options.count is not None and not 1 <= options.count <= MAX_VARIANTS:
            raise TemplateError(f"template variants must be from 1 to {MAX_VARIANTS:,}, not {options.count}")
        if folder is not None and not folder.is_dir():
            raise TemplateError(f"the wildcard folder {folder} does not exist")
        self.options, self.folder = options, folder
        self.templates: list[str] = []
        self._generator: Any = None

    def _make(self) -> Any:
        try:
            from dynamicprompts.generators import CombinatorialPromptGenerator, RandomPromptGenerator
            from dynamicprompts.wildcards.wildcard_manager import WildcardManager
        except ImportError:  # pragma: no cover - a dependency of GhostViewer's; only a broken install lacks it
            raise TemplateError("dynamic-prompt templates need the 'dynamicprompts' package (pip install "
                                "dynamicprompts)") from None
        manager = WildcardManager(self.folder) if self.folder is not None else WildcardManager(None)
        if self.options.mode == "random":
            return RandomPromptGenerator(manager, seed=self.options.seed)
        return CombinatorialPromptGenerator(manager)

    def expand(self, template: str, where: str) -> list[str]:
        for name in _WILDCARD.findall(template):
            # A list is someone else's file: `__../../notes__` or `__/home/me/secret__` must not read a file from
            # elsewhere into the prompts (and the record, and a bundle of it).
            if name.startswith("/") or ".." in name.split("/"):
                raise TemplateError(f"{where}: the wildcard __{name}__ points outside the wildcard folder")
            if not self._wildcard_files(name):
                folder = self.folder or "no wildcard folder (put one named 'wildcards' beside the list)"
                raise TemplateError(f"{where}: the wildcard __{name}__ has no file {name}.txt in {folder}")
        if self._generator is None:
            self._generator = self._make()
        try:
            if self.options.mode == "random":
                variants = list(self._generator.generate(template, num_images=self.options.count or 1))
            else:
                cap = self.options.count or MAX_VARIANTS
                variants = list(self._generator.generate(template, max_prompts=cap + 1))
                if len(variants) > cap:
                    raise TemplateError(f"{where}: the template makes more than {cap:,} prompts; narrow it, or set "
                                        "a count (random mode samples)")
        except TemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - pyparsing's errors and the library's own: a template it cannot read
            reason = " ".join(str(exc).split())
            raise TemplateError(f"{where}: not a template dynamicprompts can read ({reason})") from None
        if not variants:
            raise TemplateError(f"{where}: the template expands to no prompt")
        self.templates.append(template)
        return [" ".join(v.split()) for v in variants]

    def _wildcard_files(self, name: str) -> list[Path]:
        """The wildcard's files, inside the wildcard folder only (through a link too)."""
        if self.folder is None:
            return []
        root = self.folder.resolve()
        return sorted(p for p in self.folder.glob(f"{name}.txt") if p.is_file() and p.resolve().is_relative_to(root))

    def provenance(self) -> dict[str, Any]:
        """What the sweep's study records: templates, options, and every wildcard file's sha256."""
        files: dict[str, str] = {}
        if self.folder is not None:
            for path in sorted(self.folder.rglob("*.txt")):
                if path.is_file():
                    files[str(path.relative_to(self.folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        return {"templates": self.templates, "options": self.options.to_json(), "wildcard_files": files}


def expand_rows(rows: Iterable[dict[str, Any]], expander: Expander, where: str = "prompt list"
                ) -> Iterable[dict[str, Any]]:
    """Each row whose prompt is a template becomes one row per variant (its other values kept)."""
    for index, row in enumerate(rows, start=1):
        prompt = str(row.get("prompt", ""))
        if not is_template(prompt):
            yield row
            continue
        for variant in expander.expand(prompt, f"{where} entry {index}"):
            yield {**row, "prompt": variant}
