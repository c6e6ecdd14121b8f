"""Every message the window shows a user, declared in one place (STYLE 11). Details go to the log."""

ENGINE_DIED = (
    "The engine process stopped: {reason}. The window and everything recorded so far are safe "
    "(the interrupted run is kept as incomplete). Use Engine ▸ Restart engine to continue."
)
ENGINE_RESTARTED = "Engine restarted."
LOAD_FAILED = "Could not load the pipeline {source}: {message}{kept}"  # the full text behind Show details
LOAD_KEPT = " — going back to {source}"
LOAD_FAILED_LINE = "⚠ could not load {name}: {message}"  # the pipeline panel's one line
RUN_FAILED = "The run failed: {message}"
RUN_REFUSED = "Not queued: {reason}"  # the prompt panel's fields say the same, under the Run button
FIELD_EMPTY = "the {name} field is empty: type {what}"
FIELD_UNREAD = "the {name} field reads {text!r}, which is not {what}"
ENGINE_ERROR = "The engine could not {what}: {message}"
NOT_A_RUN = "Could not open the run {path}: {message}"
# A run folder the record cannot fully read: said in one line where it shows (never a dialog).
STEP_UNREADABLE = "⚠ step {step}: {message}"
FINAL_NONE = "no final image recorded"
FINAL_NOT_SHOWN = "final image (not shown)"
FINAL_REFUSED = "⚠ final image refused: {message}"
FINAL_UNREADABLE = "⚠ the final image {path} cannot be read"
HISTORY_UNREADABLE = "⚠ unreadable: {problem}"  # a history row (the whole message in its tooltip)
HISTORY_PROBLEM = "Run {name}: {problem}"  # the status bar, when such a row is picked
DROP_MISSING = ("{path} is not there: it was moved or deleted, or its name has characters this system cannot "
                "pass on (rename it and drop it again).")
DROP_NOT_FILE = "{path} is not a file or a folder (a broken link, a pipe or a device): nothing to open."
DROP_UNKNOWN = (
    "GhostViewer does not know what to do with {path}. Drop a pipeline folder, a .safetensors checkpoint, "
    "a run folder, a bug-report bundle (.zip), or a prompt list (.txt, .csv, .jsonl)."
)
BUNDLE_OPENED = "Opened the bug report {name}: {count} run(s), showing {run_id} (a read-only copy in {folder})."
BUNDLE_FAILED = "Could not open the bug report {path}: {message}"
EXPORT_ESTIMATE = "Bug report of {run_id}: about {size} before compression."
EXPORT_DONE = "Bug report saved: {path} ({size})."
EXPORT_FAILED = "Could not export the bug report: {message}"
PROMPT_LIST_FAILED = "Could not read the prompt list {path}: {message}"
PROMPT_LIST_QUEUED = "Queued {count} prompts from {name}."
# A list naming a file outside its folder (spec/prompt_lists.py): never read silently; the message's own button reads
# it. The two start differently: ErrorReporter.offer matches the text before the first field.
PROMPT_LIST_OUTSIDE = ("The prompt list {name} names a file outside its own folder ({file}), so nothing was queued: "
                       "a list from someone else could read your files into the runs and their bug reports.")
SWEEP_LIST_OUTSIDE = ("The sweep's prompt list {name} names a file outside its own folder ({file}), so it was not "
                      "started: a list from someone else could read your files into the runs and their bug reports.")
QUEUE_OUTSIDE, SWEEP_OUTSIDE = "Queue it anyway", "Sweep it anyway"
NO_RUN_SELECTED = "Select a run first (in the history, or by running one)."
NO_STEP_SELECTED = "Select a step of a run first."
REPLAY_QUEUED = "Replaying seed {seed} with the recorded settings…"
REPLAY_REPRODUCED = "Replay of seed {seed}: reproduced (final image bit-identical, latents equal at all {steps} steps)."
REPLAY_DIVERGED = "Replay of seed {seed}: NOT reproduced — first difference: {where}."
REPLAY_UNCHECKED = "Replay of seed {seed} did not finish ({status}); nothing to compare."
UNEXPECTED = "Something went wrong inside GhostViewer: {message}. The details are in the log."
RUNS_DIR_CHANGED = "Runs folder: {path}"
NO_ANOMALY = "The shown run has no anomaly (no NaN/Inf, no fp16 overflow, no collapse or explosion)."
NO_RUN_SHOWN = "No run is shown: run one, or open one from the history."
ANOMALY_PREFIX = "First anomaly:"
ANOMALY_AT = ANOMALY_PREFIX + " {kind} in {module} ({where})."
FM_NOT_CAPTURED = "{module}: not captured — tick Capture in the block tree and re-run."
# How a job ended, when the engine did not say (the queue row's tooltip, the run's error).
JOB_ENGINE_DIED = "the engine process {reason}"
JOB_ENGINE_STOPPED = "the engine process stopped before the run ended"
JOB_ENGINE_RESTARTED = "the engine was restarted during the run"
JOB_WINDOW_CLOSED = "the window was closed before it ended"
RUN_FOLDER_MISSING = "the engine reported the run folder {path}, which cannot be found"
REPLAYS_QUEUED = "Replaying seed {seed} {times} times with the recorded settings…"
REPLAYS_REPRODUCED = "Replays of seed {seed}: reproduced {k}/{n}{unfinished}."
REPLAYS_DIVERGED = "Replays of seed {seed}: reproduced {k}/{n}{unfinished} — first difference: {where}."
REPLAYS_UNFINISHED = " ({count} did not finish)"
REPLAY_PROGRESS = "Replay {k}/{n} of seed {seed}…"
REPLAY_LABEL = "replay {k}/{n}"  # the queue row of one replay of a batch
# Comparing two runs.
COMPARE_PICK_TWO = "Select two runs in the history (Ctrl+click the second) to compare them."
COMPARE_NO_RUN = "Show a run first: it is run A of the comparison."
# Bisection by bypass.
CLI_MEMORY_HINT = "(or run it with --no-memory-check, memory_check=False in the API, to try anyway)"  # spec/checks.py
WINDOW_MEMORY_HINT = "in Size (w×h), or set Device to one with more free memory"
REPLAY_STUDY_FAILED = "The replays go to the runs folder one by one: their study cannot be written ({message})."
BISECT_BUSY = "A bisection is already running; cancel it first."
BISECT_NOTHING = "Nothing to bisect: run {run_id} ended {status} with no bad verdict and no anomaly."
BISECT_NOT_ENDED = "Run {run_id} is still running: bisect it once it has ended."
BISECT_WAITING = "Bisection of {run_id} waits for the engine…"
BISECT_STARTED = "Bisecting {run_id} by bypass (symptom: {symptom})…"
BISECT_TRIAL = "Bisection: re-run {trial}{of} — {symptom}."
BISECT_CULPRIT = "Bisection: the culprit is {culprit} (found in {reruns} re-runs"
BISECT_BUDGET = " of at most {budget})."
BISECT_NO_CULPRIT = "Bisection: no single block explains it after {reruns} re-runs — {reason}."
BISECT_NO_CULPRIT_BRIEF = "Bisection: no single block explains it after {reruns} re-runs (why: the Bisection dock)."
BISECT_PLANNING = "choosing the blocks to re-run…"
BISECT_NO_CANDIDATES = "no candidate block: nothing a bypass could remove"
BISECT_CANCELLED = "Bisection cancelled."
BISECT_FAILED = "The bisection stopped: {message}"
BISECT_UNFINISHED = "This bisection did not finish ({status}): the re-runs it recorded."
STUDY_FAILED = "Could not open the study {path}: {message}"
# The engine busy with a coordinator's own command (the status bar), and the queued runs held back meanwhile.
ENGINE_BUSY = "engine busy: {doing}…"  # bisecting, sweeping
JOB_WAITING = "waiting for {work}"  # the bisection, the sweep
JOB_WAITING_ENGINE = "waiting for the engine (Engine ▸ Restart engine)"
# Replaying a run from a bug report: only on the very weights it was made with.
REPLAY_NO_PIPELINE = ("Replay is off for {run_id} (from the bug report {bundle}): load the pipeline it was made "
                      "with ({source}) first — its weight hashes must match.")
REPLAY_NO_HASHES = "Replay is off for {run_id} (from the bug report {bundle}): {why}, so the weights cannot be checked."
REPLAY_WEIGHTS_DIFFER = ("Replay is off for {run_id} (from the bug report {bundle}): the loaded pipeline's "
                         "{differs} — not the weights the bug report was made with.")
REPLAY_WEIGHTS_MATCH = "Replay of {run_id} (from the bug report {bundle}): the loaded weights match ({components})."
# The history's context menu.
COMPARE_PICK_B = "Compare {run_id} with… click the other run in the history (Esc to cancel)."
COMPARE_PICK_CANCELLED = "Compare cancelled."
# Isolating a module (Blocks ▸ right-click ▸ Isolate this module…).
ISOLATE_NO_RUN = "Open or run a run first: isolating re-runs it to capture the module's real inputs."
ISOLATE_STARTED = "Isolating {module} into {folder} (re-run, repro and fuzz)…"
ISOLATE_DONE = "Isolated {module}: {broken} of {total} fuzzed inputs break it; repro in {folder}."
ISOLATE_FAILED = "Could not isolate {module}: {message}"
ISOLATE_NO_ENGINE = "the engine is not running (Engine ▸ Restart engine)"
# A bug report with the first bad module's inputs, written by the engine (it re-runs the run).
EXPORT_INPUTS_STARTED = "Exporting the bug report to {path}: the engine re-runs the run for the module's inputs…"
EXPORT_INPUTS_PROGRESS = "Exporting the bug report: re-running {run_id} to isolate {module}…"
EXPORT_INPUTS_DONE = "Bug report saved with the inputs of {module}: {path} ({size})."
EXPORT_INPUTS_NONE = "Bug report saved: {path} ({size}); no module inputs: {reason}"
EXPORT_NO_ENGINE = "the engine is not running (Engine ▸ Restart engine), or untick the module's inputs"
EXPORT_NO_FILE = "no file name"
ENGINE_GONE = "the engine process stopped before it answered"
# The engine process speaks another version of the pipe's protocol (an install of mixed versions).
ENGINE_PROTOCOL = ("The engine process speaks protocol version {theirs} and this window version {ours}: the engine "
                   "was stopped and sent nothing. Reinstall GhostViewer so that both come from the same version.")
