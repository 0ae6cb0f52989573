"""The optional C kernels; all other metadata is in pyproject.toml.

``hiclass_parallel/ops/engine/_segment.c`` (the lean engine's group log-sum-exp),
``hiclass_parallel/ops/engine/_best_first.c`` (best-first decoding of a linear output layer) and,
beside the text model it serves, ``hiclass_parallel/estimators/networks/_path_step.c`` (the
fused path-local training step and Adam on touched rows) are plain shared libraries that
``ops/engine/_native.py``, ``ops/engine/_native_best_first.py`` and
``estimators/networks/_native_path_step.py`` load with ctypes.
``optional=True``: where one cannot be compiled (no C compiler, another platform) the install
goes on and the NumPy (engine) or torch (decoding) route runs instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hiclass_parallel.ops.engine._segment_c",
            sources=["hiclass_parallel/ops/engine/_segment.c"],
            # -ffast-math at compile time only: linked into a shared library (GCC < 13) it would
            # switch the whole process to flush-to-zero arithmetic.
            extra_compile_args=["-O3", "-ffast-math"],
            libraries=["m"],
            optional=True,
        ),
        Extension(
            "hiclass_parallel.ops.engine._best_first_c",
            sources=["hiclass_parallel/ops/engine/_best_first.c"],
            depends=["hiclass_parallel/ops/engine/_clones.h"],
            # no -ffast-math: the search compares -inf and must round as the exhaustive route does
            extra_compile_args=["-O3"],
            libraries=["m"],
            optional=True,
        ),
        Extension(
            "hiclass_parallel.estimators.networks._path_step_c",
            sources=["hiclass_parallel/estimators/networks/_path_step.c"],
            depends=["hiclass_parallel/ops/engine/_clones.h"],
            # -ffast-math for vectorised dot products and exp; non-finite scores are found by
            # their bits (see the file's notes). Compile time only, as for _segment_c.
            extra_compile_args=["-O3", "-ffast-math", "-pthread"],
            extra_link_args=["-pthread"],
            libraries=["m"],
            optional=True,
        ),
    ]
)
