"""The run record: GhostViewer's on-disk run format (a flight recorder). Torch-free and Qt-free."""

from .errors import RecordError
from .history import list_entries, list_runs, list_studies
from .reader import RunRecord
from .schema import SCHEMA_VERSION
from .study import StudyRecord, StudyRun, StudyWriter
from .types import Event, StatColumns, StatRow, StepInfo
from .writer import RunWriter

__all__ = [
    "SCHEMA_VERSION",
    "Event",
    "RecordError",
    "RunRecord",
    "RunWriter",
    "StatColumns",
    "StatRow",
    "StepInfo",
    "list_runs",
    "StudyRecord",
    "StudyRun",
    "StudyWriter",
    "list_entries",
    "list_studies",
]
