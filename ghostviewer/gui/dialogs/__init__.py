"""Dialogs: about, bug-report export, the first-run welcome, error messages."""
