"""The optional C kernel of the lean engine; all other metadata is in pyproject.toml.

``hiclass_parallel/ops/_segment.c`` is a plain shared library that ``ops/_native.py`` loads with
ctypes. ``optional=True``: where it cannot be compiled (no C compiler, another platform) the
install goes on and the engine uses its NumPy route.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hiclass_parallel.ops._segment_c",
            sources=["hiclass_parallel/ops/_segment.c"],
            # -ffast-math at compile time only: linked into a shared library (GCC < 13) it would
            # switch the whole process to flush-to-zero arithmetic.
            extra_compile_args=["-O3", "-ffast-math"],
            libraries=["m"],
            optional=True,
        )
    ]
)
