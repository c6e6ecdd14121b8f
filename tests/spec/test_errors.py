"""The one user-facing error: whatever a caller passes, it reads as one line."""

from __future__ import annotations

from ghostviewer.spec import SpecError, UserError


def test_a_message_is_folded_into_one_line() -> None:
    assert str(UserError("  cannot read\n  the file\tx.txt \n")) == "cannot read the file x.txt"
    assert str(UserError(ValueError("a\nb"))) == "a b"  # not only strings


def test_a_spec_error_is_a_user_error_and_a_value_error() -> None:
    error = SpecError("unknown setting\n'stpes'")
    assert isinstance(error, UserError) and isinstance(error, ValueError)
    assert str(error) == "unknown setting 'stpes'"
