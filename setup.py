"""The optional C extension (ghostviewer/engine/tracing/_fast_stats.c, one-pass tensor statistics for the
tracer); everything else is in pyproject.toml. Without a C compiler the package installs without it and the
tracer takes its numpy path (engine/tracing/stats.py)."""

import sys

from setuptools import Extension, setup

# The same sums whatever the CPU flags: no fused multiply-adds (-march=native would otherwise contract them).
FLAGS = ["/O2"] if sys.platform == "win32" and "MSC" in sys.version else ["-O3", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            "ghostviewer.engine.tracing._fast_stats",
            ["ghostviewer/engine/tracing/_fast_stats.c"],
            extra_compile_args=FLAGS,
            optional=True,
        )
    ]
)
