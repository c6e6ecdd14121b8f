"""One widget per file; each binds to a model and emits requests, none runs anything itself."""
