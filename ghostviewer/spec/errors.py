"""The one user-facing error: a problem the user can fix, said in one line (the CLI exits 2 with it)."""

from __future__ import annotations


class UserError(Exception):
    """Bad input, a missing file, an unavailable device, a setting out of range; never a bug of ours."""

    def __init__(self, message: str) -> None:
        # The CLI prints str(error) as the whole diagnosis, so keep it to one line whatever the caller passed.
        super().__init__(" ".join(str(message).split()))


class SpecError(UserError, ValueError):
    """A run description that cannot be taken as it is: an unknown setting, a value of the wrong kind."""
