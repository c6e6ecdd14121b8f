"""Errors raised by the run record."""

from __future__ import annotations


class RecordError(Exception):
    """A run folder cannot be written or read; the message is one clear line for the user."""
