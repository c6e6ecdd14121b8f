"""The GUI's link to the engine process: the pipe and the job scheduler."""
