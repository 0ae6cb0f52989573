"""The array operations the bucketed kernels (:mod:`._bucketed`) are written with, for each
kind of array, and how a batch is split into row chunks run on a thread pool (CPU) or
processed whole (GPU). Which kind serves an array is decided in :mod:`._backends`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..._backend import array_namespace, device, is_cupy_array, is_numpy_array, is_torch_array
from ._layout import Layout

# On the CPU the rows are processed in chunks whose gathered layout takes about this many
# bytes: the chunk stays in cache through the max / exp / sum passes, and buffers of this
# size are recycled by the allocator instead of being page-faulted in at every call.
_CPU_CHUNK_BYTES = 16 << 20
_CPU_MIN_CHUNK_BYTES = 2 << 20


# ---------------------------------------------------------------------------- array kinds
class ArrayOps:
    """The array operations the kernels need, for one kind of array.

    Three kinds: torch (CPU or CUDA), NumPy-like (NumPy, CuPy: ``out=`` and views) and any
    other array-API namespace (purely functional, slower, for correctness everywhere).
    Methods whose name ends in ``_`` may work in place on scratch arrays the kernel owns.
    """

    chunked = False
    parallel = False
    #: Whether the ``_`` methods work in place and ``out=`` is real (else one functional block).
    in_place = False

    def __init__(self, xp: Any):
        self.xp = xp

    # gathers along the last axis
    def take(self, x: Any, idx: Any) -> Any:
        return self.xp.take(x, idx, axis=1)

    def take1(self, a: Any, idx: Any) -> Any:
        return self.xp.take(a, idx, axis=0)

    def take_padded(self, x: Any, arr: Mapping[str, Any], fill: float) -> Any:
        xp = self.xp
        col = xp.full((x.shape[0], 1), fill, dtype=x.dtype, device=device(x))
        return xp.take(xp.concat([x, col], axis=1), arr["src_ext"], axis=1)

    def take_into(self, x: Any, idx: Any, out: Any) -> Any:
        return self.take(x, idx)

    # elementwise and reductions
    def reshape(self, v: Any, shape: tuple[int, ...]) -> Any:
        return self.xp.reshape(v, shape)

    def max(self, v: Any, axis: int) -> Any:
        return self.xp.max(v, axis=axis)

    def argmax(self, v: Any, axis: int) -> Any:
        return self.xp.argmax(v, axis=axis)

    def min(self, v: Any, axis: int) -> Any:
        return self.xp.min(v, axis=axis)

    def sum(self, v: Any, axis: int) -> Any:
        return self.xp.sum(v, axis=axis)

    def finite_or_zero(self, m: Any) -> Any:
        xp = self.xp
        return xp.where(xp.isfinite(m), m, xp.zeros_like(m))

    def sub_(self, a: Any, b: Any) -> Any:
        return a - b

    def add_(self, a: Any, b: Any) -> Any:
        return a + b

    def rsub_(self, a: Any, b: Any) -> Any:
        """``b - a``, in place of ``a`` where the kind allows it."""
        return b - a

    def exp_(self, v: Any) -> Any:
        return self.xp.exp(v)

    def exp(self, v: Any) -> Any:
        """``exp(v)`` into a new array (``v`` is kept)."""
        return self.xp.exp(v)

    def mul_(self, a: Any, b: Any) -> Any:
        return a * b

    def log_(self, v: Any) -> Any:
        return self.xp.log(v)

    def expand(self, m: Any, axis: int) -> Any:
        return self.xp.expand_dims(m, axis=axis)

    def concat(self, parts: list, axis: int) -> Any:
        return parts[0] if len(parts) == 1 else self.xp.concat(parts, axis=axis)

    def stack(self, parts: list, axis: int) -> Any:
        return self.xp.stack(parts, axis=axis)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        xp = self.xp
        if not hasattr(b, "shape"):
            b = xp.asarray(b, dtype=a.dtype, device=device(a))
        if not hasattr(a, "shape"):
            a = xp.asarray(a, dtype=b.dtype, device=device(b))
        return xp.where(cond, a, b)

    def zeros(self, shape: tuple[int, ...], like: Any) -> Any:
        return self.xp.zeros(shape, dtype=like.dtype, device=device(like))

    def empty(self, shape: tuple[int, ...], like: Any) -> Any:
        return self.xp.empty(shape, dtype=like.dtype, device=device(like))

    def logaddexp(self, a: Any, b: Any) -> Any:
        return self.xp.logaddexp(a, b)

    def astype(self, a: Any, like: Any) -> Any:
        return self.xp.astype(a, like.dtype)

    def arange(self, n: int, like: Any) -> Any:
        return self.xp.arange(n, device=device(like))

    def to_int(self, a: Any) -> Any:
        return self.xp.astype(a, self.xp.int64)

    def full_like(self, a: Any, value: float) -> Any:
        return self.xp.full_like(a, value)

    def index_array(self, values: list[int], like: Any) -> Any:
        return self.xp.asarray(values, dtype=self.xp.int64, device=device(like))

    def logsumexp_rows(self, v: Any) -> Any:
        """``log(sum(exp(v), axis=1))`` of shape ``(rows, 1)``, stable; ``v`` is kept."""
        xp = self.xp
        shift = self.finite_or_zero(xp.max(v, axis=1, keepdims=True))
        return xp.log(xp.sum(xp.exp(v - shift), axis=1, keepdims=True)) + shift

    def argmax_rows(self, v: Any) -> Any:
        """Index of the first maximum of every row."""
        return self.xp.argmax(v, axis=1)

    def take_rows(self, v: Any, idx: Any) -> Any:
        """``v[i, idx[i]]`` for every row ``i``."""
        xp = self.xp
        return xp.take_along_axis(v, xp.expand_dims(idx, axis=1), axis=1)[:, 0]


class NumpyOps(ArrayOps):
    """NumPy and CuPy: real ``out=`` arguments and views, chunked on the CPU."""

    in_place = True

    def __init__(self, module: Any, chunked: bool):
        super().__init__(module)
        self.chunked = chunked
        self.parallel = chunked and module is np

    def take(self, x, idx):
        if self.xp is np:  # indices are known to be valid: skip the bounds checks
            return np.take(x, idx, axis=1, mode="clip")
        return self.xp.take(x, idx, axis=1)

    def take1(self, a, idx):
        return self.xp.take(a, idx, axis=0)

    def take_padded(self, x, arr, fill):
        buf = self.take(x, arr["src"])
        if arr["pad"].shape[0]:
            buf[:, arr["pad"]] = fill
        return buf

    def take_into(self, x, idx, out):
        if self.xp is np:
            return np.take(x, idx, axis=1, out=out, mode="clip")
        return self.xp.take(x, idx, axis=1, out=out)

    def logsumexp_rows(self, v):
        shift = self.finite_or_zero(v.max(axis=1, keepdims=True))
        t = self.xp.subtract(v, shift)
        self.xp.exp(t, out=t)
        s = self.log_(t.sum(axis=1, keepdims=True))
        return self.xp.add(s, shift, out=s)

    def argmax_rows(self, v):
        return v.argmax(axis=1)

    def take_rows(self, v, idx):
        return self.xp.take_along_axis(v, idx[:, None], axis=1)[:, 0]

    def full_like(self, a, value):
        return self.xp.full_like(a, value)

    def index_array(self, values, like):
        return self.xp.asarray(values, dtype=self.xp.int64)

    def max(self, v, axis):
        return v.max(axis=axis)

    def argmax(self, v, axis):
        return v.argmax(axis=axis)

    def min(self, v, axis):
        return v.min(axis=axis)

    def sum(self, v, axis):
        return v.sum(axis=axis)

    def finite_or_zero(self, m):
        m[~self.xp.isfinite(m)] = 0
        return m

    def sub_(self, a, b):
        return self.xp.subtract(a, b, out=a)

    def add_(self, a, b):
        return self.xp.add(a, b, out=a)

    def rsub_(self, a, b):
        return self.xp.subtract(b, a, out=a)

    def exp_(self, v):
        return self.xp.exp(v, out=v)

    def mul_(self, a, b):
        return self.xp.multiply(a, b, out=a)

    def log_(self, v):
        if self.xp is np:
            with np.errstate(divide="ignore"):  # a group of -inf only: log 0 = -inf, on purpose
                return np.log(v, out=v)
        return self.xp.log(v, out=v)

    def expand(self, m, axis):
        return self.xp.expand_dims(m, axis)

    def concat(self, parts, axis):
        return parts[0] if len(parts) == 1 else self.xp.concatenate(parts, axis=axis)

    def where(self, cond, a, b):
        return self.xp.where(cond, a, b)

    def zeros(self, shape, like):
        return self.xp.zeros(shape, dtype=like.dtype)

    def empty(self, shape, like):
        return self.xp.empty(shape, dtype=like.dtype)

    def astype(self, a, like):
        return a.astype(like.dtype, copy=False)

    def arange(self, n, like):
        return self.xp.arange(n)

    def to_int(self, a):
        return a.astype(self.xp.int64, copy=False)


# The torch float dtypes that NumPy shares, filled on first use (no torch import before).
_NUMPY_FLOATS: Any = None


class TorchOps(ArrayOps):
    """torch, CPU (chunked) or CUDA (one chunk); never builds an autograd graph itself."""

    in_place = True

    def __init__(self, like: Any):
        import torch

        super().__init__(torch)
        self.chunked = like.device.type == "cpu"

    def take(self, x, idx):
        return x.index_select(1, idx)

    def take1(self, a, idx):
        return a.index_select(0, idx)

    def take_padded(self, x, arr, fill):
        buf = x.index_select(1, arr["src"])
        if arr["pad"].shape[0]:
            buf.index_fill_(1, arr["pad"], fill)
        return buf

    def take_into(self, x, idx, out):
        return self.xp.index_select(x, 1, idx, out=out)

    def reshape(self, v, shape):
        return v.view(shape)

    def max(self, v, axis):
        return v.amax(axis)

    def argmax(self, v, axis):
        return v.argmax(axis)

    def min(self, v, axis):
        return v.amin(axis)

    def sum(self, v, axis):
        return v.sum(axis)

    def finite_or_zero(self, m):
        return m.nan_to_num_(0.0, 0.0, 0.0)

    def sub_(self, a, b):
        return a.sub_(b)

    def add_(self, a, b):
        return a.add_(b)

    def rsub_(self, a, b):
        return self.xp.sub(b, a, out=a)

    def exp_(self, v):
        return v.exp_()

    def exp(self, v):
        return v.exp()

    def mul_(self, a, b):
        return a.mul_(b)

    def log_(self, v):
        return v.log_()

    def expand(self, m, axis):
        return m.unsqueeze(axis)

    def concat(self, parts, axis):
        return parts[0] if len(parts) == 1 else self.xp.cat(parts, axis)

    def stack(self, parts, axis):
        return self.xp.stack(parts, axis)

    def where(self, cond, a, b):
        return self.xp.where(cond, a, b)

    def zeros(self, shape, like):
        return like.new_zeros(shape)

    def empty(self, shape, like):
        return like.new_empty(shape)

    def logaddexp(self, a, b):
        return self.xp.logaddexp(a, b)

    def astype(self, a, like):
        return a.to(like.dtype)

    def arange(self, n, like):
        return self.xp.arange(n, device=like.device)

    def to_int(self, a):
        return a.long()

    def full_like(self, a, value):
        return self.xp.full_like(a, value)

    def index_array(self, values, like):
        return self.xp.tensor(values, dtype=self.xp.int64, device=like.device)

    def logsumexp_rows(self, v):
        shift = v.amax(1, keepdim=True).nan_to_num_(0.0, 0.0, 0.0)
        return (v - shift).exp_().sum(1, keepdim=True).log_().add_(shift)

    def argmax_rows(self, v):
        # torch's CPU argmax is not vectorised (many times slower than amax); NumPy's is, and
        # a CPU tensor shares its memory with NumPy for free.
        if v.device.type == "cpu" and v.dtype in torch_numpy_floats() and not v.requires_grad:
            return self.xp.from_numpy(np.ascontiguousarray(v.numpy().argmax(1)).astype(np.int64, copy=False))
        return v.argmax(1)

    def take_rows(self, v, idx):
        return v.gather(1, idx.unsqueeze(1)).squeeze(1)


class TorchGradOps(ArrayOps):
    """torch, purely functional: every step is recorded by autograd."""

    def __init__(self) -> None:
        import torch

        super().__init__(torch)

    def logsumexp_rows(self, v):
        return self.xp.logsumexp(v, 1, keepdim=True)

    def take(self, x, idx):
        return x.index_select(1, idx)

    def concat(self, parts, axis):
        return parts[0] if len(parts) == 1 else self.xp.cat(parts, axis)

    def zeros(self, shape, like):
        return like.new_zeros(shape)


def ops_for(x: Any) -> ArrayOps:
    if is_torch_array(x):
        return TorchOps(x)
    if is_numpy_array(x):
        return NumpyOps(np, chunked=True)
    if is_cupy_array(x):
        import cupy

        return NumpyOps(cupy, chunked=False)
    return ArrayOps(array_namespace(x))


def _row_chunks(ops: ArrayOps, n_rows: int, lay: Layout, itemsize: int) -> list[tuple[int, int]]:
    """Row ranges of the chunks: about ``_CPU_CHUNK_BYTES`` of layout each on the CPU, and a
    multiple of the worker threads, so the threads get equal shares."""
    if n_rows == 0:
        return []
    if not ops.chunked:
        return [(0, n_rows)]
    row_bytes = max(1, max(lay.n_slots, lay.n_outputs) * itemsize)
    n_chunks = -(-n_rows // max(1, _CPU_CHUNK_BYTES // row_bytes))  # enough to fit the cache
    if ops.parallel:
        threads = _n_threads()
        # a multiple of the threads, but no chunk below _CPU_MIN_CHUNK_BYTES (the Python
        # overhead of a chunk holds the GIL, so tiny chunks would serialise the threads)
        most = max(n_chunks, n_rows * row_bytes // _CPU_MIN_CHUNK_BYTES)
        n_chunks = min(most, -(-n_chunks // threads) * threads)
    n_chunks = min(n_rows, n_chunks)
    step = -(-n_rows // n_chunks)
    return [(start, min(n_rows, start + step)) for start in range(0, n_rows, step)]


_POOL: Any = None
_POOL_LOCK = threading.Lock()


def _n_threads() -> int:
    """Worker threads for CPU chunks: torch's intra-op setting when torch is loaded."""
    cpus = os.cpu_count() or 1
    torch = sys.modules.get("torch")
    if torch is not None:
        return max(1, min(cpus, torch.get_num_threads()))
    return cpus


def map_chunks(ops: ArrayOps, fn: Any, n_rows: int, lay: Layout, itemsize: int) -> list:
    """``[fn(a, b) for each chunk]``, the CPU chunks spread over a thread pool.

    NumPy releases the GIL inside its loops, so the chunks run in parallel, and, unlike
    torch's OpenMP regions (dozens per call here), a pool of plain threads has no barrier
    that a busy machine can stall: under oversubscription OpenMP made these kernels several
    times slower, the pool does not.
    """
    ranges = _row_chunks(ops, n_rows, lay, itemsize)
    if not ops.parallel:
        return [fn(a, b) for a, b in ranges]
    return map_ranges(fn, ranges)


def map_ranges(fn: Any, ranges: list[tuple[int, int]]) -> list:
    """``[fn(a, b) for (a, b) in ranges]`` over the CPU thread pool (in order; serial for one
    range or one thread). ``fn`` should release the GIL (NumPy loops, ctypes calls)."""
    if len(ranges) <= 1 or _n_threads() <= 1:
        return [fn(a, b) for a, b in ranges]
    global _POOL
    with _POOL_LOCK:
        # A forked child inherits the pool object but not its threads: make a new one.
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="hiclass_parallel"))
    return list(_POOL[1].map(lambda r: fn(*r), ranges))


def torch_numpy_floats() -> tuple:
    global _NUMPY_FLOATS
    if _NUMPY_FLOATS is None:
        import torch

        _NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)
    return _NUMPY_FLOATS


def itemsize(x: Any) -> int:
    if is_torch_array(x):
        return x.element_size()
    try:
        return int(x.dtype.itemsize)
    except AttributeError:
        return 8
