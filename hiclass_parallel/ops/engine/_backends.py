"""Which backend runs the lean engine on an array: the one place that decides.

A backend implements the same few primitives over 2-D scores ``(rows, n_outputs)`` given the
layout (:mod:`._layout`) and its arrays on the scores' device, and returns arrays of the
scores' kind; none records an autograd graph (:mod:`._autograd` wraps them):

- ``lse``: every group's log-normaliser (a segment log-sum-exp), ``(rows, G)``;
- ``log_softmax`` and ``log_softmax_backward``: ``x - lse[group]`` and its gradient;
- ``exp_minus``: ``exp(x - t[group])``, the gather-combine of the gradients;
- ``node_log_probs``: path sums, the joint log-probability of the path to every node;
- ``best_nodes`` / ``best_paths``: the best candidate of every row, exactly.

Routes, by name (:data:`BACKENDS`):

==============  ==================================================================  ==========
name            runs                                                                module
==============  ==================================================================  ==========
``triton``      CUDA torch tensors, fused kernels (when Triton is installed)        ._triton
``torch``       torch tensors with torch ops (CUDA without Triton; CPU bfloat16)    ._bucketed
``native``      NumPy arrays with the C kernel (built, and large groups)            ._native
``numpy``       NumPy arrays with NumPy ops, row chunks on a thread pool             ._bucketed
``cupy``        CuPy arrays, one chunk                                              ._bucketed
``array_api``   any other array-API namespace, purely functional                    ._bucketed
==============  ==================================================================  ==========

CPU torch tensors of a dtype NumPy shares take the ``native`` or ``numpy`` route through NumPy
views of their memory (no copy): NumPy releases the GIL in its loops, so chunks run in
parallel on plain threads, which, unlike torch's OpenMP regions (dozens per call here), have
no barrier that a busy machine can stall (under oversubscription OpenMP made these kernels
several times slower).

:func:`backend_for` picks the route of an array; :func:`use_backend` makes every call in a
``with`` block take a named route (tests compare routes this way).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..._backend import array_namespace, is_cupy_array, is_numpy_array, is_torch_array
from . import _native, _triton
from ._array_ops import ArrayOps, NumpyOps, TorchOps, torch_numpy_floats
from ._bucketed import BucketedBackend
from ._layout import Layout

__all__ = ["BACKENDS", "backend_for", "use_backend"]

#: The names of the routes, fastest first for an array they can serve.
BACKENDS = ("triton", "torch", "native", "numpy", "cupy", "array_api")

_FORCED: contextvars.ContextVar[str | None] = contextvars.ContextVar("hiclass_parallel_backend", default=None)


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run every lean-engine call of the ``with`` block on the route ``name``.

    Where automatic choice applies a rule of thumb (the C kernel only for large groups), a
    named route always runs (the C kernel for any partition). An array that the route cannot
    run raises :class:`ValueError`.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.engine._backends import backend_for, use_backend
    >>> from hiclass_parallel.ops.engine._layout import layout
    >>> lay = layout(Tree.from_parents([-1, 0, 0]), "sibling", False)
    >>> with use_backend("array_api"):
    ...     backend_for(np.zeros((2, 3)), lay).name
    'array_api'
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    token = _FORCED.set(name)
    try:
        yield
    finally:
        _FORCED.reset(token)


def backend_for(x: Any, lay: Layout) -> Any:
    """The backend that runs the lean engine on ``x`` (2-D scores) for layout ``lay``."""
    name = _FORCED.get()
    if name is None:
        name = _automatic(x, lay)
    return _make(name, x)


def _numpy_viewable(x: Any) -> bool:
    """A CPU torch tensor that NumPy can view without a copy."""
    return (
        x.device.type == "cpu"
        and x.dtype in torch_numpy_floats()
        and not (x.is_conj() or x.is_neg())
    )


def _automatic(x: Any, lay: Layout) -> str:
    if is_torch_array(x):
        if _triton.available(x):
            return "triton"
        if not _numpy_viewable(x):
            return "torch"
    elif is_cupy_array(x):
        return "cupy"
    elif not is_numpy_array(x):
        return "array_api"
    return "native" if _native.worthwhile(lay) else "numpy"


def _make(name: str, x: Any) -> Any:
    torch_input = is_torch_array(x)
    if name in ("native", "numpy"):
        if torch_input and _numpy_viewable(x):
            return TorchViaNumpy(_numpy_backend(name))
        if is_numpy_array(x):
            return _numpy_backend(name)
    elif name == "triton" and torch_input and _triton.available(x):
        return _triton.TritonBackend(x)
    elif name == "torch" and torch_input:
        return BucketedBackend("torch", TorchOps(x))
    elif name == "cupy" and is_cupy_array(x):
        import cupy

        return BucketedBackend("cupy", NumpyOps(cupy, chunked=False))
    elif name == "array_api" and not torch_input:
        return BucketedBackend("array_api", ArrayOps(array_namespace(x)))
    raise ValueError(f"the {name!r} backend cannot run a {type(x).__module__}.{type(x).__name__} on this machine")


def _numpy_backend(name: str) -> BucketedBackend:
    if name == "native":
        if not _native.available():
            raise ValueError("the 'native' backend needs the C kernel, which was not built (or is turned off)")
        return _native.NativeBackend()
    return BucketedBackend("numpy", NumpyOps(np, chunked=True))


class TorchViaNumpy:
    """CPU torch tensors on a NumPy backend, through views of their memory (no copy).

    Takes and returns tensors; the kernels read the layout's host arrays.
    """

    fuses_loss = False

    def __init__(self, inner: BucketedBackend):
        self.inner = inner
        self.name = inner.name
        self.ops = inner.ops

    def __repr__(self) -> str:
        return f"TorchViaNumpy({self.inner!r})"

    def lse(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        return _tensor(self.inner.lse(_view(x), lay, lay.host, mv))

    def log_softmax(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        return _tensor(self.inner.log_softmax(_view(x), lay, lay.host, mv))

    def log_softmax_backward(self, out: Any, grad: Any, lay: Layout, arr: Mapping[str, Any]) -> Any:
        return _tensor(self.inner.log_softmax_backward(_view(out), _view(grad.to(out.dtype)), lay, lay.host))

    def exp_minus(self, x: Any, shift: Any, lay: Layout, arr: Mapping[str, Any], row_sign: Any = None) -> Any:
        sign = None if row_sign is None else _view(row_sign)
        return _tensor(self.inner.exp_minus(_view(x), _view(shift), lay, lay.host, sign))

    def node_log_probs(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool) -> Any:
        return _tensor(self.inner.node_log_probs(_view(x), lay, lay.host, mv, terminal))

    def best_nodes(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool,
                   log_t: float | None) -> tuple[Any, Any]:
        node, value = self.inner.best_nodes(_view(x), lay, lay.host, mv, terminal, log_t)
        return _tensor(node), _tensor(value)

    def best_paths(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool,
                   log_t: float | None) -> tuple[Any, Any]:
        paths, value = self.inner.best_paths(_view(x), lay, lay.host, mv, terminal, log_t)
        return _tensor(paths), _tensor(value)


def _view(t: Any) -> np.ndarray:
    return t.detach().numpy()


def _tensor(a: Any) -> Any:
    import torch

    return torch.from_numpy(np.asarray(a))
