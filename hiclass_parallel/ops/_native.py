"""The optional C kernel (``_segment.c``) of the lean engine on the CPU, loaded with ctypes.

:mod:`.groups` sends a NumPy-backed batch here (NumPy arrays, CPU torch tensors through NumPy
views) when the library was built (``setup.py``, an optional extension), the dtype is float32 or
float64, no finite ``mask_value`` is asked for, and the partition's groups are large (the level
partition: the kernel vectorises within a group; the many tiny groups of a sibling partition go
faster through the bucketed NumPy layout, which vectorises across groups).
``HICLASS_PARALLEL_NATIVE=0`` turns it off.

ctypes releases the GIL during each call, so the engine's thread pool runs chunks of rows in
parallel, as with NumPy.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

_MODULE = "hiclass_parallel.ops._segment_c"
_FUNCTIONS = {np.dtype(np.float32): "group_lse_f32", np.dtype(np.float64): "group_lse_f64"}


@functools.lru_cache(maxsize=1)
def _library() -> Any:
    """The loaded library, or ``None`` where it was not built or is turned off."""
    if os.environ.get("HICLASS_PARALLEL_NATIVE", "1") == "0":
        return None
    try:
        spec = importlib.util.find_spec(_MODULE)
        if spec is None or not spec.origin:
            return None
        lib = ctypes.CDLL(spec.origin)
    except (ImportError, OSError):
        return None
    p, i = ctypes.c_void_p, ctypes.c_int64
    for name in _FUNCTIONS.values():
        fn = getattr(lib, name)
        fn.restype = None
        fn.argtypes = [p, p, p, i, i, p, p, i, p, p, p]
    return lib


def available() -> bool:
    """Whether the C kernel was built and may be used."""
    return _library() is not None


def serves(x: Any) -> bool:
    """Whether the kernel handles the NumPy array ``x`` (its dtype)."""
    return isinstance(x, np.ndarray) and x.dtype in _FUNCTIONS and available()


@dataclass(frozen=True)
class Plan:
    """A partition's groups as the kernel reads them (host arrays)."""

    members: np.ndarray  # int32 (n,): the columns, group after group
    starts: np.ndarray  # int64 (G + 1,): where each group starts in `members`
    col_group: np.ndarray  # int32 (n,)
    largest: int  # members of the largest group (scratch size)


def build_plan(col_group: np.ndarray, n_groups: int) -> Plan:
    sizes = np.bincount(col_group, minlength=n_groups)
    return Plan(
        members=np.argsort(col_group, kind="stable").astype(np.int32),
        starts=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        col_group=col_group.astype(np.int32),
        largest=int(sizes.max()) if sizes.size else 0,
    )


def group_lse(x: np.ndarray, plan: Plan, lse: np.ndarray, out: np.ndarray | None = None) -> None:
    """Fill ``lse`` (rows, G) with every group's log-sum-exp of the rows of ``x`` (rows, n)
    (``-inf`` for a group of ``-inf`` scores) and, if given, ``out`` (rows, n) with
    ``x - lse[:, col_group]`` (an empty group's log-sum-exp read as 0)."""
    rows, n = x.shape
    if rows == 0:
        return
    x = np.ascontiguousarray(x)
    for a in (lse, out):
        if a is not None and (not a.flags.c_contiguous or a.dtype != x.dtype):
            raise ValueError("lse and out must be C-contiguous arrays of the scores' dtype")
    fn = getattr(_library(), _FUNCTIONS[x.dtype])
    buf = np.empty(max(1, plan.largest), dtype=x.dtype)
    table = np.empty(max(1, lse.shape[1]), dtype=x.dtype)
    fn(
        x.ctypes.data, None if out is None else out.ctypes.data, lse.ctypes.data, rows, n,
        plan.members.ctypes.data, plan.starts.ctypes.data, lse.shape[1], plan.col_group.ctypes.data,
        buf.ctypes.data, table.ctypes.data,
    )
