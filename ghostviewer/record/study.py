"""Study records: a group of runs made for one purpose (replay, compare, bisect, sweep, baseline).

A study is a folder like a run: study.sqlite indexes its child runs (written under its own runs/ folder, or
referenced elsewhere), its parameters, progress and result. The writer and reader live in their own files.
"""

from __future__ import annotations

from .study_reader import StudyRecord, StudyRun
from .study_schema import KINDS, STUDY_DB_NAME, STUDY_SCHEMA_VERSION, canonical_key
from .study_writer import StudyWriter

__all__ = ["KINDS", "STUDY_DB_NAME", "STUDY_SCHEMA_VERSION", "StudyRecord", "StudyRun", "StudyWriter",
           "canonical_key"]
