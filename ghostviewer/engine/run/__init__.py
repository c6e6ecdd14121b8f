"""One traced, recorded, judged run: the runner, its settings, its record buffer, its judge."""
