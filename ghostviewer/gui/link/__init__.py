"""The GUI's links to work done elsewhere: the pipe to the engine process, the job scheduler, and the one Worker
that runs record reads off the GUI thread."""
