"""The lean engine: per-group log-softmax and path log-probabilities in O(B*C).

The paper normalises scores by spreading them over a ``(B, L, C)`` tensor, one masked row
per level, and taking a softmax of every row. Here each class's log-probability within its
group is computed with segment reductions over the ``(B, C)`` scores themselves:

- the columns are gathered once into a fixed *layout* in which every group is contiguous
  (the groups of similar size share a *bucket*, viewed as a dense ``(rows, groups, width)``
  block padded with ``-inf``), so the max, ``exp`` and sum of every group are ordinary
  reductions over one axis;
- on the CPU the batch is processed in row chunks whose layout fits in the cache, so the
  extra passes cost little and no buffer of the batch's size is allocated except the result;
  the chunks run on a pool of threads, CPU torch tensors through NumPy views of their memory
  (see :func:`_map_chunks`);
- path log-probabilities are accumulated level by level from the parent array (one loop
  over the ``L`` levels, never over samples or nodes);
- CUDA torch tensors go through fused Triton kernels instead (:mod:`._triton`): there the
  dozens of small launches of the route above, not memory traffic, would set the time.

Partitions and stop columns
---------------------------
A *partition* splits the classes into groups (``Tree.groups``): ``"level"`` (group = depth,
the paper's) or ``"sibling"`` (group = the children of one parent, numbered by ascending
parent id, the top-level classes forming group 0: a conditional, hierarchical softmax).

With ``stop=True`` every group except group 0 gets one extra *stop* column, "the path ends
just above this group": under ``"level"`` the stop of depth ``d`` (``d = 1..L-1``) means "the
path ends at depth ``d - 1``"; under ``"sibling"`` the stop of the group of node ``n``'s
children means "the path ends at ``n``" (one per internal node). The stop columns follow
the ``C`` class columns in group order: the stop of group ``g`` is column ``C + g - 1``. So
a module must produce :func:`n_outputs` scores: ``C`` for ``stop=False``, ``C + G - 1``
otherwise, with ``G = tree.n_groups(partition)``; :func:`stop_columns` maps every node to
the column that stops a path at it.

Semantics
---------
``"partial"`` (the paper's): a label is known down to its node and nothing is said about
finer levels, so a path may continue below it; the candidates of decoding are the leaves.
``"terminal"``: the node is the answer; a path ending at an internal node ``n`` scores
its path log-probability plus the log-probability of its stop column (needs ``stop=True``);
a leaf ends every path through it, so it needs no stop term.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._backend import array_namespace, device, is_cupy_array, is_numpy_array, is_torch_array
from ..tree import PAD, PARTITIONS, Tree
from . import _native, _triton

__all__ = [
    "SEMANTICS",
    "n_outputs",
    "stop_columns",
    "group_logsumexp",
    "group_log_softmax",
    "node_log_probs",
]

#: Label semantics: the paper's partial labels, or terminal labels (the node is the answer).
SEMANTICS = ("partial", "terminal")

# On the CPU the rows are processed in chunks whose gathered layout takes about this many
# bytes: the chunk stays in cache through the max / exp / sum passes, and buffers of this
# size are recycled by the allocator instead of being page-faulted in at every call.
_CPU_CHUNK_BYTES = 16 << 20
_CPU_MIN_CHUNK_BYTES = 2 << 20

# Cost, in padded slots per row, of one more bucket (the few array calls it needs) when
# grouping groups of similar size into dense blocks: buckets are merged while the padding
# this adds is cheaper than the calls it saves.
_BUCKET_OVERHEAD = 512

_CACHE_TAG = "hiclass_parallel.ops.groups"


# ---------------------------------------------------------------------------- public sizes
def _check_partition(partition: str) -> None:
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")


def n_outputs(tree: Tree, partition: str = "level", stop: bool = False) -> int:
    """Width of the score vector a model must produce for a partition.

    Parameters
    ----------
    tree : Tree
        The class tree.
    partition : {"level", "sibling"}, default="level"
        How classes are grouped into softmax groups.
    stop : bool, default=False
        Add one stop column per group except group 0 (see the module notes): ``L - 1``
        under ``"level"``, one per internal node under ``"sibling"``.

    Returns
    -------
    int
        ``n_classes``, plus ``n_groups - 1`` with ``stop=True``.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.groups import n_outputs
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> n_outputs(tree), n_outputs(tree, "level", stop=True), n_outputs(tree, "sibling", stop=True)
    (9, 11, 12)
    """
    _check_partition(partition)
    return tree.n_classes + (tree.n_groups(partition) - 1 if stop else 0)


def stop_columns(tree: Tree, partition: str = "level") -> np.ndarray:
    """Column of the stop logit that ends a path at each node (``-1`` for leaves).

    Parameters
    ----------
    tree : Tree
        The class tree.
    partition : {"level", "sibling"}, default="level"

    Returns
    -------
    ndarray of int64 of shape (n_classes,)
        For an internal node ``n``, the stop column of the group holding ``n``'s children:
        ``C + depth[n]`` under ``"level"``, ``C + k`` under ``"sibling"`` where ``n`` is the
        ``k``-th internal node in ascending id order.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.groups import stop_columns
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> stop_columns(tree, "level").tolist()
    [9, 9, -1, 10, -1, -1, -1, -1, -1]
    >>> stop_columns(tree, "sibling").tolist()
    [9, 10, -1, 11, -1, -1, -1, -1, -1]
    """
    return _layout(tree, partition, True).host["stop_col"].copy()


# ---------------------------------------------------------------------------- host layout
@dataclass(frozen=True, eq=False)
class _Layout:
    """Everything the kernels need about one (tree, partition, stop), computed once on the host."""

    partition: str
    stop: bool
    n_classes: int
    n_outputs: int
    n_groups: int
    n_levels: int
    n_slots: int
    buckets: tuple[tuple[int, int, int, bool], ...]  # (offset, n_groups, width, transposed)
    level_bounds: tuple[int, ...]  # start of each depth in `order`, then n_classes
    n_leaves_at: tuple[int, ...]  # leaves of each depth (they come first in its block)
    log_masked_level: tuple[float, ...]  # log(n_outputs - size) of each depth's group
    host: dict[str, np.ndarray]
    plans: dict[str, Any] = field(default_factory=dict)  # "native" / a CUDA device -> its kernel plan


def _plan_buckets(sizes: np.ndarray) -> list[np.ndarray]:
    """Split groups into buckets of similar size: an exact DP over the distinct sizes.

    A bucket of the sorted distinct sizes ``i..j`` costs ``overhead + max size * n groups``
    padded slots per row; the DP minimises the total, so big groups get buckets of their own
    and the many tiny groups of a sibling partition share a few.
    """
    distinct, inverse, counts = np.unique(sizes, return_inverse=True, return_counts=True)
    n = distinct.size
    csum = np.concatenate([[0], np.cumsum(counts)])
    best = np.zeros(n + 1)
    prev = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        cost = best[:j] + _BUCKET_OVERHEAD + float(distinct[j - 1]) * (csum[j] - csum[:j])
        if distinct[0] == 1 and j > 1:  # groups of one need no reduction: keep them apart
            cost[0] = np.inf
        k = int(np.argmin(cost))
        best[j], prev[j] = cost[k], k
    cuts = []
    j = n
    while j > 0:
        cuts.append((prev[j], j))
        j = prev[j]
    groups_of = np.argsort(inverse, kind="stable")  # groups by ascending size, then id
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [groups_of[bounds[i]:bounds[j]] for i, j in reversed(cuts)]


def _build_layout(tree: Tree, partition: str, stop: bool) -> _Layout:
    C, L = tree.n_classes, tree.n_levels
    groups = tree.groups(partition).astype(np.int64)
    G = int(groups.max()) + 1
    n_out = C + (G - 1 if stop else 0)
    col_group = np.concatenate([groups, np.arange(1, G, dtype=np.int64)]) if stop else groups
    sizes = np.bincount(col_group, minlength=G)

    # Layout: every group's columns contiguous (ascending column), groups bucketed by size.
    members = np.argsort(col_group, kind="stable")
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    src_parts, buckets, gorder = [], [], []
    offset = 0
    for gk in _plan_buckets(sizes):
        width = int(sizes[gk].max())
        slot = np.arange(width)
        idx = np.full((gk.size, width), -1, dtype=np.int64)
        valid = slot[None, :] < sizes[gk][:, None]
        idx[valid] = members[(first[gk][:, None] + slot[None, :])[valid]]
        transposed = 1 < width <= gk.size  # reduce across rows of a (width, groups) block
        src_parts.append((idx.T if transposed else idx).reshape(-1))
        buckets.append((offset, int(gk.size), width, transposed))
        gorder.append(gk)
        offset += idx.size
    src = np.concatenate(src_parts)
    pad = np.flatnonzero(src < 0)
    group_pos = np.empty(G, dtype=np.int64)
    group_pos[np.concatenate(gorder)] = np.arange(G)

    # Depth order: every depth a contiguous block, its leaves first, then its internal nodes,
    # each part in ascending id order (so a first-occurrence argmax breaks ties by lowest id).
    depth = tree.depth.astype(np.int64)
    is_leaf = tree.is_leaf
    order = np.lexsort((np.arange(C), ~is_leaf, depth))
    inverse_order = np.empty(C, dtype=np.int64)
    inverse_order[order] = np.arange(C)
    level_bounds = np.searchsorted(depth[order], np.arange(L + 1))
    n_leaves_at = np.bincount(depth[is_leaf], minlength=L)
    internal_start = level_bounds[:-1] + n_leaves_at  # start of each depth's internal part
    parents = tree.parents.astype(np.int64)
    parent_idx = np.zeros(C, dtype=np.int64)  # parent's index within its depth's internal part
    deep = depth[order] > 0
    par = parents[order[deep]]
    parent_idx[deep] = inverse_order[par] - internal_start[depth[par]]

    internal = np.flatnonzero(~is_leaf)
    stop_col = np.full(C, PAD, dtype=np.int64)
    child_group = np.full(C, PAD, dtype=np.int64)  # group of each internal node's children
    if partition == "level":
        child_group[internal] = depth[internal] + 1
    else:
        child_group[internal] = np.searchsorted(tree.group_parents("sibling"), internal)
    stop_col[internal] = C + child_group[internal] - 1  # the stop of group g is column C + g - 1

    masked = n_out - sizes
    with np.errstate(divide="ignore"):
        log_masked = np.where(masked > 0, np.log(np.maximum(masked, 1)), -np.inf)

    paths_ext = np.concatenate([tree.paths.astype(np.int64), np.full((1, L), PAD, dtype=np.int64)])
    host = {
        "col_group": col_group,
        "src": np.where(src < 0, 0, src),
        "src_ext": np.where(src < 0, n_out, src),  # pads read an appended -inf column
        "pad": pad,
        "group_pos": group_pos,
        "log_masked": log_masked,
        "order": order,
        "inverse_order": inverse_order,
        "parent_idx": parent_idx,
        "order_child_group": np.maximum(child_group[order], 0),
        "order_stop_col": np.maximum(stop_col[order], 0),
        "stop_col": stop_col,
        "paths_ext": paths_ext,
        "depth": depth,
        "leaves": np.flatnonzero(is_leaf).astype(np.int64),
    }
    for value in host.values():
        value.flags.writeable = False
    return _Layout(
        partition=partition,
        stop=stop,
        n_classes=C,
        n_outputs=n_out,
        n_groups=G,
        n_levels=L,
        n_slots=int(src.size),
        buckets=tuple(buckets),
        level_bounds=tuple(int(b) for b in level_bounds),
        n_leaves_at=tuple(int(n) for n in n_leaves_at),
        log_masked_level=tuple(float(v) for v in log_masked[:L]) if partition == "level" else (),
        host=host,
    )


def _layout(tree: Tree, partition: str, stop: bool) -> _Layout:
    """The host layout of ``(tree, partition, stop)``, cached on the tree."""
    _check_partition(partition)
    key = (_CACHE_TAG, "layout", partition, bool(stop))
    cache = tree._device_cache
    if key not in cache:
        cache[key] = _build_layout(tree, partition, bool(stop))
    return cache[key]


def _device_arrays(tree: Tree, lay: _Layout, like: Any) -> dict[str, Any]:
    """The layout's arrays in the namespace and on the device of ``like``, cached on the tree."""
    xp = array_namespace(like)
    key = (_CACHE_TAG, "arrays", lay.partition, lay.stop, xp.__name__, str(device(like)))
    cache = tree._device_cache
    if key not in cache:
        cache[key] = _layout_arrays(lay, like)
    return cache[key]


def _layout_arrays(lay: _Layout, like: Any) -> dict[str, Any]:
    """Copies of a layout's host arrays in the namespace and on the device of ``like``."""
    if is_numpy_array(like):
        return dict(lay.host)
    xp = array_namespace(like)
    if is_torch_array(like):
        import torch

        return {k: torch.as_tensor(np.array(v), device=like.device) for k, v in lay.host.items()}
    return {k: xp.asarray(np.array(v), device=device(like)) for k, v in lay.host.items()}


# ---------------------------------------------------------------------------- array kinds
class _Ops:
    """The array operations the kernels need, for one kind of array.

    Three kinds: torch (CPU or CUDA), NumPy-like (NumPy, CuPy: ``out=`` and views) and any
    other array-API namespace (purely functional, slower, for correctness everywhere).
    Methods whose name ends in ``_`` may work in place on scratch arrays the kernel owns.
    """

    chunked = False
    parallel = False

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


class _NumpyOps(_Ops):
    """NumPy and CuPy: real ``out=`` arguments and views, chunked on the CPU."""

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


class _TorchOps(_Ops):
    """torch, CPU (chunked) or CUDA (one chunk); never builds an autograd graph itself."""

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
        # torch's CPU argmax is not vectorised (about 9x slower than amax); NumPy's is, and
        # a CPU tensor shares its memory with NumPy for free.
        if v.device.type == "cpu" and v.dtype in _torch_numpy_floats() and not v.requires_grad:
            return self.xp.from_numpy(np.ascontiguousarray(v.numpy().argmax(1)).astype(np.int64, copy=False))
        return v.argmax(1)

    def take_rows(self, v, idx):
        return v.gather(1, idx.unsqueeze(1)).squeeze(1)


class _TorchGradOps(_Ops):
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


def _ops_for(x: Any) -> _Ops:
    if is_torch_array(x):
        return _TorchOps(x)
    if is_numpy_array(x):
        return _NumpyOps(np, chunked=True)
    if is_cupy_array(x):
        import cupy

        return _NumpyOps(cupy, chunked=False)
    return _Ops(array_namespace(x))


def _row_chunks(ops: _Ops, n_rows: int, lay: _Layout, itemsize: int) -> list[tuple[int, int]]:
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


def _map_chunks(ops: _Ops, fn: Any, n_rows: int, lay: _Layout, itemsize: int) -> list:
    """``[fn(a, b) for each chunk]``, the CPU chunks spread over a thread pool.

    NumPy releases the GIL inside its loops, so the chunks run in parallel, and, unlike
    torch's OpenMP regions (dozens per call here), a pool of plain threads has no barrier
    that a busy machine can stall: under oversubscription OpenMP made these kernels 5-10x
    slower, the pool does not.
    """
    ranges = _row_chunks(ops, n_rows, lay, itemsize)
    if len(ranges) <= 1 or not ops.parallel or _n_threads() <= 1:
        return [fn(a, b) for a, b in ranges]
    global _POOL
    with _POOL_LOCK:
        # A forked child inherits the pool object but not its threads: make a new one.
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="hiclass_parallel"))
    return list(_POOL[1].map(lambda r: fn(*r), ranges))


def _numpy_backed(x: Any) -> bool:
    """A CPU torch tensor that NumPy can view without a copy."""
    return (
        is_torch_array(x)
        and x.device.type == "cpu"
        and x.dtype in _torch_numpy_floats()
        and not (x.is_conj() or x.is_neg())
    )


def _torch_numpy_floats() -> tuple:
    global _NUMPY_FLOATS
    if _NUMPY_FLOATS is None:
        import torch

        _NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)
    return _NUMPY_FLOATS


def _kernel_inputs(x: Any, lay: _Layout, arr: Mapping[str, Any]) -> tuple[_Ops, Any, Mapping[str, Any], Any]:
    """How the no-grad kernels run on ``x``: ``(ops, array, layout arrays, back)``.

    CPU torch tensors run through NumPy views of their memory (no copy; see
    :func:`_map_chunks` for why), ``back`` turns results into tensors again. Everything
    else runs in its own namespace.
    """
    if _numpy_backed(x):
        import torch

        return _NumpyOps(np, chunked=True), x.detach().numpy(), lay.host, torch.from_numpy
    return _ops_for(x), x, arr, _identity


def _identity(x: Any) -> Any:
    return x


# ---------------------------------------------------------------------------- kernels
def _lse_rows(ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any], mask_value: float | None) -> Any:
    """Log-normaliser of every group for a block of rows: ``(rows, n_outputs) -> (rows, G)``."""
    rows = x.shape[0]
    buf = ops.take_padded(x, arr, -math.inf)
    parts = []
    for offset, n, width, transposed in lay.buckets:
        block = buf[:, offset:offset + n * width]
        if width == 1:  # a group of one: its log-normaliser is its score
            parts.append(block)
            continue
        axis = 1 if transposed else 2
        block = ops.reshape(block, (rows, width, n) if transposed else (rows, n, width))
        shift = ops.finite_or_zero(ops.max(block, axis))  # a group of -inf only stays -inf
        block = ops.exp_(ops.sub_(block, ops.expand(shift, axis)))
        parts.append(ops.add_(ops.log_(ops.sum(block, axis)), shift))
    lse = ops.take(ops.concat(parts, 1), arr["group_pos"])
    if mask_value is not None:
        # The paper's dense row of group g holds n_outputs - size_g masked entries of value mu.
        lse = ops.logaddexp(lse, ops.astype(arr["log_masked"], lse) + mask_value)
    return lse


def _empty_is_zero(ops: _Ops, lse: Any) -> Any:
    """A group whose scores are all ``-inf`` has no mass: give it the log-normaliser 0, so its
    members get log-probability ``-inf`` (probability 0) instead of ``-inf - -inf = NaN`` (what
    the paper's dense softmax would give), and masking a whole subtree with ``-inf`` is safe."""
    return ops.where(lse == -math.inf, 0.0, lse)


def _sum_rows(ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any]) -> Any:
    """Sum of every group for a block of rows: ``(rows, n_outputs) -> (rows, G)``."""
    rows = x.shape[0]
    buf = ops.take_padded(x, arr, 0.0)
    parts = []
    for offset, n, width, transposed in lay.buckets:
        block = buf[:, offset:offset + n * width]
        if width == 1:
            parts.append(block)
            continue
        block = ops.reshape(block, (rows, width, n) if transposed else (rows, n, width))
        parts.append(ops.sum(block, 1 if transposed else 2))
    return ops.take(ops.concat(parts, 1), arr["group_pos"])


def _normalise_mask_value(mask_value: float | None) -> float | None:
    """``None``, ``-inf`` and ``nan`` all mean "masked entries are ignored"."""
    if mask_value is None:
        return None
    mask_value = float(mask_value)
    if math.isnan(mask_value) or mask_value == -math.inf:
        return None
    if mask_value == math.inf:
        raise ValueError("mask_value=+inf would give every group the log-normaliser +inf")
    return mask_value


def _prepare(scores: Any, tree: Tree, partition: str, stop: bool) -> tuple[Any, tuple, _Layout]:
    """Validate scores and flatten their leading axes: ``(..., n_outputs) -> (N, n_outputs)``."""
    lay = _layout(tree, partition, stop)
    shape = tuple(scores.shape)
    if len(shape) < 1 or shape[-1] != lay.n_outputs:
        extra = f" ({lay.n_classes} classes + {lay.n_outputs - lay.n_classes} stop columns)" if stop else ""
        raise ValueError(
            f"scores have shape {shape}: the last axis must hold n_outputs(tree, {partition!r}, stop={stop}) "
            f"= {lay.n_outputs} scores{extra}"
        )
    xp = array_namespace(scores)
    if not xp.isdtype(scores.dtype, "real floating"):
        raise TypeError(f"scores must be real floating point, got dtype {scores.dtype}")
    lead = shape[:-1]
    x2 = xp.reshape(scores, (-1, lay.n_outputs)) if len(shape) != 2 else scores
    return x2, lead, lay


def _itemsize(x: Any) -> int:
    if is_torch_array(x):
        return x.element_size()
    try:
        return int(x.dtype.itemsize)
    except AttributeError:
        return 8


def _fused(x: Any) -> bool:
    """Whether ``x`` takes the fused CUDA kernels of :mod:`._triton`."""
    return is_torch_array(x) and _triton.available(x)


def _fused_plan(lay: _Layout, x: Any) -> Any:
    key = str(x.device)
    if key not in lay.plans:
        paths = lay.host["paths_ext"][: lay.n_classes]
        lay.plans[key] = _triton.build_plan(lay.host["col_group"], lay.n_groups, paths, lay.host["leaves"], x)
    return lay.plans[key]


#: The C kernel serves partitions whose groups average at least this many members: it
#: vectorises within a group, the bucketed NumPy layout across groups (WordNet's sibling
#: groups average 6 members: 78 ms in C against 72 ms in NumPy; its levels 5,883: 29 against 65).
_NATIVE_MIN_MEAN_GROUP = 32


def _native_plan(ops: _Ops, x: Any, lay: _Layout, mask_value: float | None) -> Any:
    """The C kernel's plan when it serves this NumPy-route call, else ``None``."""
    if not (isinstance(ops, _NumpyOps) and ops.xp is np and mask_value is None and _native.serves(x)):
        return None
    if lay.n_outputs < _NATIVE_MIN_MEAN_GROUP * lay.n_groups:
        return None
    if "native" not in lay.plans:
        lay.plans["native"] = _native.build_plan(lay.host["col_group"], lay.n_groups)
    return lay.plans["native"]


def _fused_lse(x: Any, lay: _Layout, mask_value: float | None) -> Any:
    lse = _triton.segment_reduce(x, _fused_plan(lay, x), lse=True)
    if mask_value is not None:
        import torch

        log_masked = torch.as_tensor(lay.host["log_masked"], dtype=lse.dtype, device=lse.device)
        lse = torch.logaddexp(lse, log_masked + mask_value)
    return lse


def _group_lse_2d(ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any], mask_value: float | None) -> Any:
    if _fused(x):
        return _fused_lse(x, lay, mask_value)
    plan = _native_plan(ops, x, lay, mask_value)
    if plan is not None:
        lse = np.empty((x.shape[0], lay.n_groups), dtype=x.dtype)
        _map_chunks(ops, lambda a, b: _native.group_lse(x[a:b], plan, lse[a:b]), x.shape[0], lay, _itemsize(x))
        return lse
    pieces = _map_chunks(ops, lambda a, b: _lse_rows(ops, x[a:b, ...], lay, arr, mask_value), x.shape[0], lay, _itemsize(x))
    if not pieces:
        return ops.zeros((0, lay.n_groups), x)
    return ops.concat(pieces, 0)


def _group_log_softmax_2d(ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any], mask_value: float | None) -> Any:
    if _fused(x):
        return _triton.combine(_triton.COMBINE_MINUS, x, _fused_lse(x, lay, mask_value), arr["col_group"])
    plan = _native_plan(ops, x, lay, mask_value)
    if plan is not None:
        out = np.empty(x.shape, dtype=x.dtype)

        def native_chunk(a: int, b: int) -> None:
            _native.group_lse(x[a:b], plan, np.empty((b - a, lay.n_groups), dtype=x.dtype), out[a:b])

        _map_chunks(ops, native_chunk, x.shape[0], lay, _itemsize(x))
        return out
    if type(ops) is _Ops:  # functional namespaces: one block
        lse = _lse_rows(ops, x, lay, arr, mask_value) if x.shape[0] else ops.zeros((0, lay.n_groups), x)
        return x - ops.take(_empty_is_zero(ops, lse), arr["col_group"])
    out = ops.empty(tuple(x.shape), x)

    def chunk(a: int, b: int) -> None:
        lse = _empty_is_zero(ops, _lse_rows(ops, x[a:b, ...], lay, arr, mask_value))
        ops.rsub_(ops.take_into(lse, arr["col_group"], out[a:b, ...]), x[a:b, ...])  # x - lse[group]

    _map_chunks(ops, chunk, x.shape[0], lay, _itemsize(x))
    return out


def _log_softmax_backward_2d(ops: _Ops, out: Any, grad: Any, lay: _Layout, arr: Mapping[str, Any]) -> Any:
    """``grad - exp(out) * (group sum of grad)[group]``, chunked."""
    if _fused(out):
        sums = _triton.segment_reduce(grad, _fused_plan(lay, out), lse=False)
        return _triton.combine(_triton.COMBINE_BACKWARD, out, sums, arr["col_group"], b=grad)
    result = ops.empty(tuple(out.shape), out)

    def chunk(a: int, b: int) -> None:
        sums = _sum_rows(ops, grad[a:b, ...], lay, arr)
        res = ops.take_into(sums, arr["col_group"], result[a:b, ...])
        ops.rsub_(ops.mul_(res, ops.exp(out[a:b, ...])), grad[a:b, ...])

    _map_chunks(ops, chunk, out.shape[0], lay, _itemsize(out))
    return result


def _exp_minus_gathered(
    ops: _Ops, x: Any, shift: Any, lay: _Layout, arr: Mapping[str, Any], row_sign: Any = None
) -> Any:
    """``exp(x - shift[:, col_group])``, chunked, one allocation: softmax times a group weight.

    ``row_sign`` (a torch tensor ``(rows,)`` of -1 and 1, or ``None``) multiplies each row
    afterwards (in the same pass on the fused route)."""
    if _fused(x):
        return _triton.combine(_triton.COMBINE_EXP_MINUS, x, shift, arr["col_group"], row_sign=row_sign)
    result = _exp_minus_rows(ops, x, shift, lay, arr)
    if row_sign is not None:
        result = ops.mul_(result, ops.expand(ops.astype(_as_kernel_array(ops, row_sign), x), 1))
    return result


def _exp_minus_rows(ops: _Ops, x: Any, shift: Any, lay: _Layout, arr: Mapping[str, Any]) -> Any:
    result = ops.empty(tuple(x.shape), x)

    def chunk(a: int, b: int) -> None:
        res = ops.take_into(shift[a:b, ...], arr["col_group"], result[a:b, ...])
        ops.exp_(ops.rsub_(res, x[a:b, ...]))

    _map_chunks(ops, chunk, x.shape[0], lay, _itemsize(x))
    return result


def _as_kernel_array(ops: _Ops, t: Any) -> Any:
    """A torch tensor as the kernels of ``ops`` want it (a NumPy view on the NumPy route)."""
    return t.detach().numpy() if isinstance(ops, _NumpyOps) and is_torch_array(t) else t


# ---------------------------------------------------------------------------- torch autograd
_TORCH_FUNCTIONS: dict[str, Any] = {}


def _torch_functions() -> dict[str, Any]:
    """The torch autograd Functions, created on first use so NumPy users never import torch."""
    if _TORCH_FUNCTIONS:
        return _TORCH_FUNCTIONS
    import torch
    from torch.autograd.function import once_differentiable

    class GroupLogSoftmax(torch.autograd.Function):
        """Per-group log-softmax; backward ``g - softmax * (group sum of g)``, O(B*C)."""

        @staticmethod
        def forward(ctx, x, lay, arr, mask_value):
            ops, xk, arrk, back = _kernel_inputs(x, lay, arr)
            out = back(_group_log_softmax_2d(ops, xk, lay, arrk, mask_value))
            ctx.lay, ctx.arr = lay, arr
            ctx.save_for_backward(out)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (out,) = ctx.saved_tensors
            ops, outk, arrk, back = _kernel_inputs(out, ctx.lay, ctx.arr)
            gradk = _as_kernel_array(ops, grad.to(out.dtype))
            return back(_log_softmax_backward_2d(ops, outk, gradk, ctx.lay, arrk)), None, None, None

    class GroupLogSumExp(torch.autograd.Function):
        """Per-group log-normaliser; backward ``softmax * g[group]``."""

        @staticmethod
        def forward(ctx, x, lay, arr, mask_value):
            ops, xk, arrk, back = _kernel_inputs(x, lay, arr)
            lse = back(_group_lse_2d(ops, xk, lay, arrk, mask_value))
            ctx.lay, ctx.arr = lay, arr
            ctx.save_for_backward(x, lse)
            return lse

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            x, lse = ctx.saved_tensors
            # softmax * g = exp(x - (lse - log|g|)) * sign(g): one gather per element.
            shift = torch.where(grad != 0, lse - grad.abs().log(), torch.inf).to(x.dtype)
            ops, xk, arrk, back = _kernel_inputs(x, ctx.lay, ctx.arr)
            result = back(_exp_minus_gathered(ops, xk, _as_kernel_array(ops, shift), ctx.lay, arrk))
            if x.device.type != "cpu" or bool((grad < 0).any()):  # no host sync on a GPU
                sign = torch.where(grad < 0, -1.0, 1.0).to(x.dtype)
                result.mul_(sign.index_select(1, ctx.arr["col_group"]))
            return result, None, None, None

    _TORCH_FUNCTIONS.update(GroupLogSoftmax=GroupLogSoftmax, GroupLogSumExp=GroupLogSumExp)
    return _TORCH_FUNCTIONS


# ---------------------------------------------------------------------------- public API
def group_logsumexp(
    scores: Any,
    tree: Tree,
    partition: str = "level",
    stop: bool = False,
    mask_value: float | None = None,
) -> Any:
    """Log-normaliser (log-sum-exp) of every group of a partition.

    Parameters
    ----------
    scores : array of shape (..., n_outputs)
        Scores of any real floating dtype (NumPy, torch CPU/CUDA, CuPy, array API);
        ``n_outputs = n_outputs(tree, partition, stop)``.
    tree : Tree
        The class tree.
    partition : {"level", "sibling"}, default="level"
    stop : bool, default=False
        Whether ``scores`` carry the stop columns (see :func:`n_outputs`).
    mask_value : float, default=None
        ``None``, ``-inf`` or ``nan``: masked entries are ignored (a true per-group
        softmax). A finite value reproduces the paper's dense rows, in which each group's
        softmax also counts ``n_outputs - size`` masked entries of that value.

    Returns
    -------
    array of shape (..., n_groups)
        Same namespace, device and dtype as ``scores``; differentiable with torch.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.groups import group_logsumexp
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> group_logsumexp(np.zeros(9), tree).round(4)  # log 2, log 4, log 3
    array([0.6931, 1.3863, 1.0986])
    """
    x2, lead, lay = _prepare(scores, tree, partition, stop)
    arr = _device_arrays(tree, lay, x2)
    mv = _normalise_mask_value(mask_value)
    if is_torch_array(x2):
        lse = _torch_functions()["GroupLogSumExp"].apply(x2, lay, arr, mv)
    else:
        lse = _group_lse_2d(_ops_for(x2), x2, lay, arr, mv)
    return _restore(lse, lead, lay.n_groups)


def group_log_softmax(
    scores: Any,
    tree: Tree,
    partition: str = "level",
    stop: bool = False,
    mask_value: float | None = None,
) -> Any:
    """Log-probability of every class (and stop) within its group, without ``(B, L, C)``.

    For ``partition="level"`` and ``stop=False`` this equals the paper's
    ``log_softmax(partition_scores(scores, tree, mask_value), -1)`` read at each class's own
    level, at O(B*C) cost and memory instead of O(B*L*C).

    Parameters
    ----------
    scores : array of shape (..., n_outputs)
        Scores of any real floating dtype (NumPy, torch CPU/CUDA, CuPy, array API).
    tree : Tree
        The class tree.
    partition : {"level", "sibling"}, default="level"
        ``"level"``: one softmax per depth (the paper's); ``"sibling"``: one softmax per
        set of siblings (a conditional softmax: path probabilities multiply into a proper
        distribution over the leaves, or over all nodes with ``stop=True``).
    stop : bool, default=False
        Whether ``scores`` carry one stop column per group except group 0, after the class
        columns (see :func:`n_outputs`).
    mask_value : float, default=None
        See :func:`group_logsumexp`; only a finite value changes the result.

    Returns
    -------
    array of shape (..., n_outputs)
        Same namespace, device and dtype as ``scores``. With torch, autograd works through it
        (backward is O(B*C) as well).

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.groups import group_log_softmax
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> logp = group_log_softmax(np.zeros(9), tree, "sibling")
    >>> np.exp(logp).round(3)
    array([0.5  , 0.5  , 0.5  , 0.5  , 0.5  , 0.5  , 0.333, 0.333, 0.333])
    >>> group_log_softmax(np.zeros(11), tree, "level", stop=True).shape
    (11,)
    """
    x2, lead, lay = _prepare(scores, tree, partition, stop)
    arr = _device_arrays(tree, lay, x2)
    mv = _normalise_mask_value(mask_value)
    if is_torch_array(x2):
        out = _torch_functions()["GroupLogSoftmax"].apply(x2, lay, arr, mv)
    else:
        out = _group_log_softmax_2d(_ops_for(x2), x2, lay, arr, mv)
    return _restore(out, lead, lay.n_outputs)


def _restore(out: Any, lead: tuple, width: int) -> Any:
    if len(lead) == 1:
        return out
    return array_namespace(out).reshape(out, (*lead, width))


def _check_semantics(semantics: str, stop: bool) -> None:
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
    if semantics == "terminal" and not stop:
        raise ValueError(
            "semantics='terminal' needs stop=True: without stop columns the model says nothing about "
            "where a path ends, so a path cannot be scored as ending at an internal node"
        )


def _lse_levels(ops: _Ops, blocks: list, x: Any, lay: _Layout, mv: float | None) -> Any:
    """Level partition: the log-normaliser of every depth from its gathered block, ``(rows, L)``."""
    C = lay.n_classes
    parts = []
    for d, block in enumerate(blocks):
        lse = ops.logsumexp_rows(block)
        if lay.stop and d:
            lse = ops.logaddexp(lse, x[:, C + d - 1:C + d])
        if mv is not None and lay.log_masked_level[d] > -math.inf:
            lse = ops.logaddexp(lse, ops.full_like(lse, mv + lay.log_masked_level[d]))
        parts.append(lse)
    return ops.concat(parts, 1)


def _joint_levels(
    ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool, lse: Any = None
) -> list[tuple[Any, Any]]:
    """Joint path log-probabilities of every node, depth by depth, for a block of rows.

    Returns one ``(joint, stop)`` per depth ``d``: ``joint`` is ``(rows, n_d)`` over the nodes
    of depth ``d`` in depth order (``arr["order"]``: leaves by id, then internal nodes by id);
    ``stop`` is ``(rows, n_internal_d)``, the terminal scores of its internal nodes (path plus
    stop log-probability), or ``None`` unless ``terminal``.

    One gather of the scores per depth and one gather from the previous depth: a child's
    joint is its score plus ``k`` of its parent, where ``k = joint - lse(children's group)``.
    ``lse`` may be given (the differentiable path computes it with autograd).
    """
    C, L, bounds = lay.n_classes, lay.n_levels, lay.level_bounds
    level = lay.partition == "level"
    blocks = [ops.take(x, arr["order"][bounds[d]:bounds[d + 1], ...]) for d in range(L)]
    if lse is None:
        lse = _lse_levels(ops, blocks, x, lay, mv) if level else _lse_rows(ops, x, lay, arr, mv)
    lse = _empty_is_zero(ops, lse)
    out = []
    k_prev = None
    for d in range(L):
        a, b = bounds[d], bounds[d + 1]
        m = a + lay.n_leaves_at[d]
        if d == 0:  # the top-level classes form group 0 under both partitions
            joint = ops.sub_(blocks[0], lse[:, 0:1])
        else:
            joint = ops.add_(blocks[d], ops.take(k_prev, arr["parent_idx"][a:b, ...]))
        k_prev, stop = None, None
        if b > m:
            inner = joint[:, m - a:]
            if level:
                k_prev = inner - lse[:, d + 1:d + 2]
            else:
                k_prev = inner - ops.take(lse, arr["order_child_group"][m:b, ...])
            if terminal:
                xs = x[:, C + d:C + d + 1] if level else ops.take(x, arr["order_stop_col"][m:b, ...])
                stop = k_prev + xs
        out.append((joint, stop))
    return out


def _depth_ordered(ops: _Ops, levels: list[tuple[Any, Any]], lay: _Layout, terminal: bool) -> Any:
    """Concatenate the per-depth results of :func:`_joint_levels`: ``(rows, C)`` in depth order."""
    pieces = []
    for d, (joint, stop) in enumerate(levels):
        if terminal and stop is not None:
            pieces += [joint[:, :lay.n_leaves_at[d]], stop]
        else:
            pieces.append(joint)
    return ops.concat(pieces, 1)


def node_log_probs(
    scores: Any,
    tree: Tree,
    partition: str = "level",
    stop: bool = False,
    semantics: str = "partial",
    mask_value: float | None = None,
) -> Any:
    """Joint log-probability of the path ending at every node.

    ``out[..., c]`` is the sum of the group log-probabilities of the nodes on ``c``'s
    ancestral path (``c`` included); under ``semantics="terminal"`` an internal node also
    adds the log-probability of its stop column (:func:`stop_columns`). Computed level by
    level from the parent array: O(B*C), node ids in any order.

    With the sibling partition, ``exp`` of the partial value is the probability of ``c``'s
    subtree, and the terminal values of all nodes (or the partial values of the leaves,
    with ``stop=False``) sum to 1.

    Parameters
    ----------
    scores : array of shape (..., n_outputs)
    tree : Tree
    partition : {"level", "sibling"}, default="level"
    stop : bool, default=False
    semantics : {"partial", "terminal"}, default="partial"
        ``"terminal"`` needs ``stop=True``.
    mask_value : float, default=None
        See :func:`group_logsumexp`.

    Returns
    -------
    array of shape (..., n_classes)
        Same namespace, device and dtype as ``scores``; differentiable with torch.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.groups import node_log_probs
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> p = np.exp(node_log_probs(np.zeros(9), tree, "sibling"))
    >>> p.round(3)
    array([0.5  , 0.5  , 0.25 , 0.25 , 0.25 , 0.25 , 0.083, 0.083, 0.083])
    >>> float(p[tree.is_leaf].sum())
    1.0
    """
    _check_semantics(semantics, stop)
    x2, lead, lay = _prepare(scores, tree, partition, stop)
    arr = _device_arrays(tree, lay, x2)
    mv = _normalise_mask_value(mask_value)
    terminal = semantics == "terminal"
    if is_torch_array(x2) and x2.requires_grad:
        import torch

        if torch.is_grad_enabled():
            ops = _TorchGradOps()
            lse = None
            if partition == "sibling":
                lse = _torch_functions()["GroupLogSumExp"].apply(x2, lay, arr, mv)
            levels = _joint_levels(ops, x2, lay, arr, mv, terminal, lse)
            out = _depth_ordered(ops, levels, lay, terminal).index_select(1, arr["inverse_order"])
            return _restore(out, lead, lay.n_classes)
    ops, xk, arrk, back = _kernel_inputs(x2, lay, arr)
    out = back(_node_log_probs_2d(ops, xk, lay, arrk, mv, terminal))
    return _restore(out, lead, lay.n_classes)


def _node_log_probs_2d(ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool) -> Any:
    if _fused(x):
        # every column's group log-probability (stop columns included), then one sum along
        # each node's padded path: the level-by-level loop below in one launch
        logp_t = _triton.log_probs_transposed(x, _fused_lse(x, lay, mv), arr["col_group"])
        return _triton.path_sums(logp_t, _fused_plan(lay, x), arr["stop_col"] if terminal else None)
    if type(ops) is _Ops or x.shape[0] == 0:
        if x.shape[0] == 0:
            return ops.zeros((0, lay.n_classes), x)
        levels = _joint_levels(ops, x, lay, arr, mv, terminal)
        return ops.take(_depth_ordered(ops, levels, lay, terminal), arr["inverse_order"])
    out = ops.empty((x.shape[0], lay.n_classes), x)

    def chunk(a: int, b: int) -> None:
        levels = _joint_levels(ops, x[a:b, ...], lay, arr, mv, terminal)
        ops.take_into(_depth_ordered(ops, levels, lay, terminal), arr["inverse_order"], out[a:b, ...])

    _map_chunks(ops, chunk, x.shape[0], lay, _itemsize(x))
    return out
