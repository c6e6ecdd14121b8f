"""GhostViewer: a debugger for intermittent bugs in diffusion pipelines."""

__version__ = "0.1.0"
