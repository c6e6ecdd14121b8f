"""The tracer and what it records: hooks, statistics (C, numpy, Triton), previews, memory, blocks."""
