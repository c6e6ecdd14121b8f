"""The optional C extension (ghostviewer/engine/_fast_stats.c, one-pass tensor statistics for the tracer); everything
else is in pyproject.toml. Without a C compiler the package installs without it and the tracer takes its numpy path
(engine/stats.py)."""

import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ghostviewer.engine._fast_stats",
            ["ghostviewer/engine/_fast_stats.c"],
            extra_compile_args=["/O2"] if os.name == "nt" else ["-O3"],
            optional=True,
        )
    ]
)
