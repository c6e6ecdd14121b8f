"""The one parser of bypass specs, `MODULE` or `MODULE@START:END`, shared by the engine, the CLI and the
Blocks tree (whose Steps cell takes the `START:END` part alone)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ghostviewer.spec.errors import SpecError

StepRange = tuple[int | None, int | None]  # [start, end) denoising steps; None: open
_SPEC = re.compile(r"^(?P<module>[\w.]+?)(?:@(?P<steps>[^@]*))?\Z")


class BypassSpecError(SpecError):
    """A bypass spec or step range that cannot be read; the message is one line for the user."""


def parse_steps(text: str) -> StepRange:
    """'' or 'all' → (None, None); '5:12', ':8', '3:' → a range (Python slice semantics on steps)."""
    text = text.strip().lower()
    if text in ("", "all", ":"):
        return (None, None)
    start, sep, end = text.partition(":")
    try:
        if not sep:
            raise ValueError
        first, last = (int(start) if start.strip() else None), (int(end) if end.strip() else None)
    except ValueError:
        raise BypassSpecError(f"steps must look like START:END, e.g. 0:10, not {text!r}") from None
    if (first is not None and first < 0) or (last is not None and last < 0):
        raise BypassSpecError("steps cannot be negative")
    if first is not None and last is not None and last <= first:
        raise BypassSpecError(f"the step range is empty: {text}")
    return (first, last)


def format_steps(steps: StepRange) -> str:
    start, end = steps
    if start is None and end is None:
        return "all"
    return f"{'' if start is None else start}:{'' if end is None else end}"


@dataclass(frozen=True)
class BypassSpec:
    module: str
    start: int | None = None  # first bypassed denoising step (inclusive); None = from the start
    end: int | None = None  # first step no longer bypassed (exclusive); None = to the end

    @classmethod
    def parse(cls, spec: str) -> BypassSpec:
        match = _SPEC.match(spec.strip())
        if not match:
            raise BypassSpecError(
                f"bad --bypass {spec!r}: expected MODULE or MODULE@START:END, e.g. unet.mid_block@0:10"
            )
        steps = match["steps"]
        if steps is not None and ":" not in steps:
            raise BypassSpecError(f"bad --bypass {spec!r}: the steps after '@' must look like START:END")
        try:
            start, end = parse_steps(steps or "")
        except BypassSpecError as exc:
            raise BypassSpecError(f"bad --bypass {spec!r}: {exc}") from None
        return cls(match["module"], start, end)

    @property
    def steps(self) -> StepRange:
        return (self.start, self.end)

    def active_at(self, step: int | None) -> bool:
        if step is None or (self.start is None and self.end is None):
            return True
        return (self.start is None or step >= self.start) and (self.end is None or step < self.end)

    def spec(self) -> str:
        if self.start is None and self.end is None:
            return self.module
        return f"{self.module}@{format_steps(self.steps)}"
