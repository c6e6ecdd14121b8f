"""The runs a sweep makes: every prompt of a list × every seed of a spec, planned lazily (no torch here).

An entry of the list that names its own `seed` runs with that seed only; its other values (`negative`, `steps`,
`guidance`, `width`, `height`, `scheduler`, `lora`, and the call's inputs `init_image`, `strength`, `mask`,
`control_image`: spec.run_spec.ROW_FIELDS) override the sweep's; a row with an init image is an img2img run (inpaint
with a mask), one with a control image a ControlNet run, recorded so.
A run's key in the sweep study is its prompt, seed and overrides: what resume skips.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ghostviewer.engine.errors import GhostError
from ghostviewer.spec import RunSpec, SpecError, validate, with_call_defaults
from ghostviewer.spec.checks import SettingsError, check_values
from ghostviewer.spec.prompt_lists import ListOptions, PromptListError, freeze_prompt_list, iter_prompt_list
from ghostviewer.spec.run_spec import ROW_FIELDS
from ghostviewer.spec.seeds import SeedSpecError, parse_seeds, seed_list
from ghostviewer.spec.templates import Expander, wildcard_folder

# A row's own values that override the sweep's (its seed replaces the seed spec instead).
OVERRIDES = {key: field for key, field in ROW_FIELDS.items() if key not in ("prompt", "seed")}
Items = str | Path | Iterable[dict[str, Any] | str]


@dataclass(frozen=True)
class SweepJob:
    prompt: str
    seed: int
    overrides: dict[str, Any] = field(default_factory=dict)  # RunSpec field -> value

    def key(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "seed": self.seed, **self.overrides}

    def settings(self, base: RunSpec) -> RunSpec:
        return replace(base, prompt=self.prompt, seed=self.seed, **self.overrides)


def parse_seed_spec(seeds: str | int | Iterable[int]) -> list[int]:
    """A seed spec (`0-9,42`), one seed, or seeds; GhostError (one line) when it cannot be read."""
    try:
        if isinstance(seeds, (str, int)):
            return parse_seeds(seeds)
        return seed_list(seeds)
    except (SeedSpecError, TypeError, ValueError) as exc:
        raise GhostError(f"--seeds: {exc}") from None


def iter_items(items: Items) -> Iterator[dict[str, Any]]:
    """Entries of a prompt list file (streamed) or of an in-memory list of dicts or strings."""
    if isinstance(items, (str, Path)):
        yield from iter_prompt_list(items)
        return
    for index, item in enumerate(items, start=1):
        entry = {"prompt": item} if isinstance(item, str) else item
        if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str):
            raise PromptListError(f"prompt {index}: each entry needs a 'prompt'")
        yield entry


def frozen_list(items: Items, options: ListOptions | None) -> tuple[Items, dict[str, Any] | None]:
    """A list file with dynamic-prompt templates, or with styles to apply, or allowed to name files outside its
    folder, read once into rows (and their provenance) that the study keeps: a resumed sweep then runs the same
    rows whatever happened to the template, wildcard, styles or list files since (and reads no other file than the
    user allowed). Any other list stays a path, streamed (a 100,000-line list is never held)."""
    if not isinstance(items, (str, Path)):
        return items, None
    options = options or ListOptions()
    random_mode = options.templates.mode != "combinatorial"
    try:
        if not (options.styles_file or options.styles or random_mode or options.outside_files):
            expander = Expander(options.templates, wildcard_folder(Path(items), options.templates))
            for _ in iter_prompt_list(items, options, expander=expander):
                if expander.templates:
                    break
            else:
                return items, None
        rows, provenance = freeze_prompt_list(items, options)
    except PromptListError as exc:
        raise GhostError(str(exc)) from None
    return rows, provenance


def plan_jobs(items: Items, seeds: list[int]) -> Iterator[SweepJob]:
    """Prompts × seeds, in list order, seed by seed within a prompt; lazily."""
    for entry in iter_items(items):
        overrides = {OVERRIDES[k]: v for k, v in entry.items() if k in OVERRIDES}
        own = entry.get("seed")
        for seed in [int(own)] if own is not None else seeds:
            yield SweepJob(str(entry["prompt"]), seed, overrides)


def count_jobs(items: Items, seeds: list[int], base: RunSpec | None = None) -> int:
    """How many runs the sweep makes; reads (and checks) the whole list first, streamed, so a malformed list
    is refused before anything runs. PromptListError becomes a one-line GhostError. With `base` (the sweep's own
    settings) each row's run is checked whole as it would run: its image files, its strength against its steps."""
    where = Path(items).name if isinstance(items, (str, Path)) else "prompt list"
    total = 0
    try:
        for index, entry in enumerate(iter_items(items), start=1):
            try:  # an entry's own values (a NaN guidance) are refused now, not when its run starts
                check_values({OVERRIDES.get(key, key): value for key, value in entry.items()
                              if key in OVERRIDES or key in ("prompt", "seed")})
                if base is not None:
                    overrides = {OVERRIDES[k]: v for k, v in entry.items() if k in OVERRIDES}
                    validate(with_call_defaults(replace(base, prompt=str(entry["prompt"]), **overrides)))
            except (SettingsError, SpecError) as exc:
                raise GhostError(f"{where} entry {index}: {exc}") from None
            total += 1 if entry.get("seed") is not None else len(seeds)
    except PromptListError as exc:
        raise GhostError(str(exc)) from None
    if total == 0:  # a sweep of nothing would read "failure rate 0 % (0/0)" and pass in CI
        raise GhostError(f"{where} holds no prompts (only blank lines or # comments): nothing to sweep")
    return total


def jobs_or_error(items: Items, seeds: list[int]) -> Iterator[SweepJob]:
    """plan_jobs, with a list that changed on disk since it was counted reported as a GhostError."""
    try:
        yield from plan_jobs(items, seeds)
    except PromptListError as exc:
        raise GhostError(str(exc)) from None
