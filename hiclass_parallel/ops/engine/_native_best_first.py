"""The optional C kernel of best-first decoding (``_best_first.c``) for a linear output layer,
loaded with ctypes.

:func:`~hiclass_parallel.ops.best_first.best_first_paths` runs it when the score function is a
linear layer on hidden rows (it has ``linear_parts()``, see :class:`LinearScores`), the tensors
are float32 or float64 on the CPU, and the library was built (``setup.py``, an optional
extension): :func:`~hiclass_parallel.ops.decode.decoding_route` decides. Each row is a best-first search with a heap that scores exactly the members of the
groups it expands, one dot product each; the batched torch search spends most of its time in
per-step overhead and in a matrix product against columns most rows do not need.
``HICLASS_PARALLEL_NATIVE=0`` turns it off (and the group kernel of :mod:`._native`).

ctypes releases the GIL during each call, so chunks of rows run in parallel on the engine's
thread pool (as many threads as torch's intra-op setting).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from ._array_ops import _n_threads, map_ranges
from ._native import load_library
from ..sibling_paths import SiblingPlan

__all__ = ["available", "search", "ROW_UNDECIDABLE", "ROW_OVER_BUDGET"]

_MODULE = "hiclass_parallel.ops.engine._best_first_c"
_FUNCTIONS = {np.dtype(np.float32): "best_first_f32", np.dtype(np.float64): "best_first_f64"}

#: Row status codes of the kernel (``ROW_*`` in ``_best_first.c``); 0 is a finished search.
ROW_UNDECIDABLE, ROW_OVER_BUDGET = 1, 2

#: Rows per chunk at least: a chunk's Python overhead holds the GIL (tens of microseconds,
#: about one row's search), so much smaller chunks would serialise the threads.
_MIN_CHUNK_ROWS = 64


def _library() -> Any:
    """The loaded library, or ``None`` where it was not built or is turned off."""
    p, i = ctypes.c_void_p, ctypes.c_int64
    argtypes = (p, i, i, p, p, i, p, p, p, p, p, i, ctypes.c_int, i, i, i, p, p, p, p, p, p, p, p, p, p, i)
    return load_library(_MODULE, tuple(_FUNCTIONS.values()), ctypes.c_int, argtypes)


def available() -> bool:
    """Whether the C kernel was built and may be used."""
    return _library() is not None


@functools.lru_cache(maxsize=8)
def _tree_arrays(plan: SiblingPlan) -> tuple[np.ndarray, int]:
    """``is_leaf`` as uint8 (a class with no child group) and the largest group, per plan."""
    is_leaf = (plan.child_group < 0).astype(np.uint8)
    sizes = np.diff(plan.group_ptr)
    return is_leaf, int(sizes.max()) if sizes.size else 0


def search(
    h: np.ndarray, weight: np.ndarray, bias: np.ndarray, plan: SiblingPlan, k: int, terminal: bool, max_columns: int,
    match: tuple[np.ndarray, ...] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Best-first search of every row of ``h`` against the linear layer ``(weight, bias)``.

    Parameters
    ----------
    h : ndarray of shape (n_rows, width)
        Hidden rows, float32 or float64; ``weight`` ``(n_outputs, width)`` and ``bias``
        ``(n_outputs,)`` of the same dtype.
    plan : SiblingPlan
    k : int
    terminal : bool
    max_columns : int
        A row that would score more columns is stopped with status ``ROW_OVER_BUDGET``.
    match : tuple, default=None
        A sparse match term added to every score (class text): ``(row_ptr, row_idx, row_val,
        col_ptr, col_idx, col_val, width)``, the rows' and the columns' entries as CSR parts
        over ``width`` features; ``score(r, c) += sum_j row_val(r, j) * col_val(c, j)``.

    Returns
    -------
    top_v : ndarray of shape (n_rows, k)
        The ``k`` best candidates' log-probabilities, descending (``-inf`` where fewer).
    top_n : ndarray of int64 of shape (n_rows, k)
        Their nodes (``2**62`` where fewer); ties by ascending node.
    work : ndarray of int64 of shape (n_rows,)
        Columns scored.
    status : ndarray of uint8 of shape (n_rows,)
        0, ``ROW_UNDECIDABLE`` (a NaN or ``+inf`` score) or ``ROW_OVER_BUDGET``.
    """
    h, weight, bias = (np.ascontiguousarray(a) for a in (h, weight, bias))
    if not (h.dtype == weight.dtype == bias.dtype) or h.dtype not in _FUNCTIONS:
        raise TypeError(f"h, weight and bias must share a float32 or float64 dtype, got {h.dtype}, {weight.dtype}, {bias.dtype}")
    n_rows, dim = h.shape
    if weight.shape != (plan.n_outputs, dim) or bias.shape != (plan.n_outputs,):
        raise ValueError(
            f"the linear layer has weight {weight.shape} and bias {bias.shape}; the tree needs "
            f"({plan.n_outputs}, {dim}) and ({plan.n_outputs},)"
        )
    is_leaf, largest = _tree_arrays(plan)
    top_v = np.empty((n_rows, k), dtype=h.dtype)
    top_n = np.empty((n_rows, k), dtype=np.int64)
    work = np.empty(n_rows, dtype=np.int64)
    status = np.empty(n_rows, dtype=np.uint8)
    fn = getattr(_library(), _FUNCTIONS[h.dtype])
    heap_cap = min(plan.n_classes, int(max_columns)) + 1
    tree_args = [a.ctypes.data for a in (plan.group_ptr, plan.group_cols, plan.child_group, plan.group_parent, is_leaf)]
    match_arrays = _match_arrays(match, n_rows, plan.n_outputs, h.dtype) if match is not None else None

    def chunk(a: int, b: int) -> None:
        if match_arrays is None:
            match_args = [None] * 6 + [0]
        else:
            rptr, ridx, rval, tptr, tidx, tval, width = match_arrays
            match_args = [rptr[a:].ctypes.data, *(x.ctypes.data for x in (ridx, rval, tptr, tidx, tval)), width]
        rc = fn(
            h[a:].ctypes.data, b - a, dim, weight.ctypes.data, bias.ctypes.data, plan.n_classes, *tree_args,
            k, int(terminal), int(max_columns), heap_cap, largest,
            top_v[a:].ctypes.data, top_n[a:].ctypes.data, work[a:].ctypes.data, status[a:].ctypes.data, *match_args,
        )
        if rc != 0:
            raise MemoryError("best-first search: out of memory for its heap")

    # a few chunks per thread, so that a thread whose rows search deeper does not hold the rest up
    step = max(_MIN_CHUNK_ROWS, -(-n_rows // (4 * _n_threads())))
    map_ranges(chunk, [(a, min(n_rows, a + step)) for a in range(0, n_rows, step)])
    return top_v, top_n, work, status


def _match_arrays(match: tuple, n_rows: int, n_outputs: int, dtype: np.dtype) -> tuple:
    """The match term's arrays, contiguous and typed for the kernel, their sizes checked."""
    rptr, ridx, tptr, tidx = (np.ascontiguousarray(match[i], dtype=np.int64) for i in (0, 1, 3, 4))
    rval, tval = (np.ascontiguousarray(match[i], dtype=dtype) for i in (2, 5))
    width = int(match[6])
    ok = (rptr.shape == (n_rows + 1,) and tptr.shape == (n_outputs + 1,) and ridx.shape == rval.shape
          and tidx.shape == tval.shape and int(rptr[-1]) == ridx.shape[0] and int(tptr[-1]) == tidx.shape[0]
          and all(x.size == 0 or (0 <= int(x.min()) and int(x.max()) < width) for x in (ridx, tidx)))
    if not ok:
        raise ValueError(f"the match term does not fit: {n_rows} rows, {n_outputs} columns, width {width}")
    return rptr, ridx, rval, tptr, tidx, tval, width
