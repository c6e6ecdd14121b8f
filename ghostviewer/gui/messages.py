"""Every message the window shows a user, declared in one place (STYLE 11). Details go to the log."""

ENGINE_DIED = (
    "The engine process stopped: {reason}. The window and everything recorded so far are safe "
    "(the interrupted run is kept as incomplete). Use Engine ▸ Restart engine to continue."
)
ENGINE_RESTARTED = "Engine restarted."
LOAD_FAILED = "Could not load the pipeline {source}: {message}"
RUN_FAILED = "The run failed: {message}"
ENGINE_ERROR = "The engine could not {what}: {message}"
NOT_A_RUN = "Could not open the run {path}: {message}"
DROP_UNKNOWN = (
    "GhostViewer does not know what to do with {path}. Drop a pipeline folder, a .safetensors checkpoint, "
    "a run folder, or a prompt list (.txt, .csv, .jsonl)."
)
BUNDLE_UNSUPPORTED = "Opening bundles in the window is not supported yet; use `ghostviewer inspect {path}`."
PROMPT_LIST_FAILED = "Could not read the prompt list {path}: {message}"
PROMPT_LIST_QUEUED = "Queued {count} prompts from {name}."
NO_RUN_SELECTED = "Select a run first (in the history, or by running one)."
NO_STEP_SELECTED = "Select a step of a run first."
REPLAY_QUEUED = "Replaying seed {seed} with the recorded settings…"
REPLAY_REPRODUCED = "Replay of seed {seed}: reproduced (final image bit-identical, latents equal at all {steps} steps)."
REPLAY_DIVERGED = "Replay of seed {seed}: NOT reproduced — first difference: {where}."
REPLAY_UNCHECKED = "Replay of seed {seed} did not finish ({status}); nothing to compare."
UNEXPECTED = "Something went wrong inside GhostViewer: {message}. The details are in the log."
RUNS_DIR_CHANGED = "Runs folder: {path}"
NO_ANOMALY = "The shown run has no anomaly (no NaN/Inf, no fp16 overflow, no collapse or explosion)."
ANOMALY_AT = "First anomaly: {kind} at {phase} step {step} in {module}."
FM_NOT_CAPTURED = "{module}: not captured — tick Capture in the block tree and re-run."
