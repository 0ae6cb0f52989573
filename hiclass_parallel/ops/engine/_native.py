"""The optional C kernel (``_segment.c``) of the lean engine on the CPU, loaded with ctypes,
and :class:`NativeBackend`, the NumPy backend that uses it.

:mod:`._backends` picks this backend for a NumPy-backed batch (NumPy arrays, CPU torch tensors
through NumPy views) when the library was built (``setup.py``, an optional extension) and the
partition's groups are large (:func:`worthwhile`: the kernel vectorises within a group; the
many tiny groups of a sibling partition go faster through the bucketed NumPy layout, which
vectorises across groups). The kernel computes the log-normalisers and the log-softmax of
float32 and float64 scores without a finite ``mask_value``; everything else (other dtypes,
paths, decoding) runs on the bucketed NumPy kernels. ``HICLASS_PARALLEL_NATIVE=0`` turns it off.

ctypes releases the GIL during each call, so the engine's thread pool runs chunks of rows in
parallel, as with NumPy.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._array_ops import NumpyOps
from ._bucketed import BucketedBackend
from ._layout import Layout

_MODULE = "hiclass_parallel.ops.engine._segment_c"
_FUNCTIONS = {np.dtype(np.float32): "group_lse_f32", np.dtype(np.float64): "group_lse_f64"}

#: The kernel serves partitions whose groups average at least this many members: it
#: vectorises within a group, the bucketed NumPy layout across groups (WordNet's sibling groups,
#: a handful of members each, run no faster in C; its levels, thousands each, run much faster).
MIN_MEAN_GROUP = 32


@functools.lru_cache(maxsize=None)
def load_library(module: str, names: tuple[str, ...], restype: Any, argtypes: tuple) -> Any:
    """The optional C extension ``module`` with the signature of ``names`` set, or ``None``
    where it was not built or ``HICLASS_PARALLEL_NATIVE=0`` turns the C kernels off."""
    if os.environ.get("HICLASS_PARALLEL_NATIVE", "1") == "0":
        return None
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            return None
        lib = ctypes.CDLL(spec.origin)
    except (ImportError, OSError):
        return None
    for name in names:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = list(argtypes)
    return lib


def _library() -> Any:
    p, i = ctypes.c_void_p, ctypes.c_int64
    return load_library(_MODULE, tuple(_FUNCTIONS.values()), None, (p, p, p, i, i, p, p, i, p, p, p))


def available() -> bool:
    """Whether the C kernel was built and may be used."""
    return _library() is not None


def worthwhile(lay: Layout) -> bool:
    """Whether the kernel is the faster route for a layout (its groups are large)."""
    return available() and lay.n_outputs >= MIN_MEAN_GROUP * lay.n_groups


@dataclass(frozen=True)
class Plan:
    """A partition's groups as the kernel reads them (host arrays, from the layout's group plan)."""

    members: np.ndarray  # int32 (n,): the columns, group after group
    starts: np.ndarray  # int64 (G + 1,): where each group starts in `members`
    col_group: np.ndarray  # int32 (n,)
    largest: int  # members of the largest group (scratch size)


def _plan(lay: Layout) -> Plan:
    if "native" not in lay.plans:
        sizes = lay.host["group_sizes"]
        lay.plans["native"] = Plan(
            members=lay.host["members"].astype(np.int32),
            starts=lay.host["group_starts"].astype(np.int64),
            col_group=lay.host["col_group"].astype(np.int32),
            largest=int(sizes.max()) if sizes.size else 0,
        )
    return lay.plans["native"]


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


class NativeBackend(BucketedBackend):
    """NumPy arrays, with the log-normalisers and the log-softmax in the C kernel.

    Float32 and float64 scores without a finite ``mask_value``; other calls, and every other
    primitive, run the bucketed NumPy kernels it inherits.
    """

    def __init__(self) -> None:
        super().__init__("native", NumpyOps(np, chunked=True))

    def _serves(self, x: Any, mv: float | None) -> bool:
        return mv is None and isinstance(x, np.ndarray) and x.dtype in _FUNCTIONS and available()

    def _rows(self, x: np.ndarray, lay: Layout, log_softmax: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """The kernel over the row chunks: ``(lse, out)``, ``out`` (the log-softmax) only if asked."""
        plan = _plan(lay)
        lse = np.empty((x.shape[0], lay.n_groups), dtype=x.dtype)
        out = np.empty(x.shape, dtype=x.dtype) if log_softmax else None

        def chunk(a: int, b: int) -> None:
            group_lse(x[a:b], plan, lse[a:b], None if out is None else out[a:b])

        self._chunks(chunk, x, lay)
        return lse, out

    def lse(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        if not self._serves(x, mv):
            return super().lse(x, lay, arr, mv)
        return self._rows(x, lay, log_softmax=False)[0]

    def log_softmax(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        if not self._serves(x, mv):
            return super().log_softmax(x, lay, arr, mv)
        return self._rows(x, lay, log_softmax=True)[1]
