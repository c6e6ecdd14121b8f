"""Interventions: each a small config, an apply/remove pair and a named hook, scoped by `applied(...)`."""

from ghostviewer.engine.interventions.base import Intervention, RunContext, applied

__all__ = ["Intervention", "RunContext", "applied"]
