"""The one description of a run (RunSpec) and what expands into many (seed specs, prompt-list rows), with the
one user-facing error. Standard library only: the GUI, the CLI, the engine, studies and bundles all read it."""

from ghostviewer.spec.errors import SpecError, UserError
from ghostviewer.spec.run_spec import DEFAULTS, RunSpec, names, resolve_seed, validate, with_call_defaults

__all__ = ["DEFAULTS", "RunSpec", "SpecError", "UserError", "names", "resolve_seed", "validate", "with_call_defaults"]
