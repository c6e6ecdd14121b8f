"""User-facing errors: each carries one clear line that the CLI prints before exiting with status 2."""

from __future__ import annotations


class GhostError(Exception):
    """A problem the user can fix (bad input, missing file, unavailable device); never a bug of ours."""

    def __init__(self, message: str) -> None:
        # The CLI prints str(error) as the whole diagnosis, so keep it to one line whatever the caller passed.
        super().__init__(" ".join(message.split()))


class SourceError(GhostError):
    """The pipeline source cannot be loaded (missing, corrupt, incomplete, not a pipeline at all)."""


class PickleRefused(SourceError):
    """The weights exist only in a pickle format, which can run code on load; needs --allow-pickle."""
