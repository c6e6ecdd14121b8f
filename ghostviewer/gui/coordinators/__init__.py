"""One small coordinator per long action (run, replay, bisect, sweep, isolate a module, a bug report the engine
writes): each sends its work through the job scheduler or the engine client and finishes its action when the
engine says it ended; the dialogs and actions talk to the coordinators, never to the engine."""
