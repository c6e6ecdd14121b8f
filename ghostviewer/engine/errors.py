"""User-facing errors: each carries one clear line that the CLI prints before exiting with status 2."""

from __future__ import annotations

from ghostviewer.spec.errors import UserError

# The engine's name for the one user-facing error (spec/errors.py): every refusal, from a setting to a missing
# file, is caught as one class, so a SpecError raised deep in a loop is still exit 2 and one line.
GhostError = UserError


class SourceError(GhostError):
    """The pipeline source cannot be loaded (missing, corrupt, incomplete, not a pipeline at all)."""


class PickleRefused(SourceError):
    """The weights exist only in a pickle format, which can run code on load; needs --allow-pickle."""
