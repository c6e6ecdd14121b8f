"""Judging the user's model itself, with no baseline: a weight audit (audit.py) and a battery of model-agnostic
probes (probes.py; their study loop is engine/loops/probe.py)."""
