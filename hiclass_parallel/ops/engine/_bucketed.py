"""The bucketed kernels of the lean engine, written once with an array kind's operations.

Each group's columns are gathered into the layout of :mod:`._layout` (groups of similar size
side by side in dense ``(rows, groups, width)`` blocks padded with ``-inf``), so the max,
``exp`` and sum of every group are ordinary reductions over one axis; path log-probabilities
are accumulated level by level from the parent array (one loop over the ``L`` levels, never
over samples or nodes). :class:`BucketedBackend` runs them over row chunks: the backend of
NumPy, CuPy, torch (the torch-op route) and any array-API namespace. The C and Triton
backends (:mod:`._native`, :mod:`._triton`) subclass it and replace some primitives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...tree import PAD
from ._array_ops import ArrayOps, itemsize, map_chunks
from ._layout import Layout

__all__ = ["BucketedBackend", "empty_is_zero", "joint_levels", "depth_ordered", "lse_rows"]


# ---------------------------------------------------------------------------- row kernels
def lse_rows(ops: ArrayOps, x: Any, lay: Layout, arr: Mapping[str, Any], mask_value: float | None) -> Any:
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


def empty_is_zero(ops: ArrayOps, lse: Any) -> Any:
    """A group whose scores are all ``-inf`` has no mass: give it the log-normaliser 0, so its
    members get log-probability ``-inf`` (probability 0) instead of ``-inf - -inf = NaN`` (what
    the paper's dense softmax would give), and masking a whole subtree with ``-inf`` is safe."""
    return ops.where(lse == -math.inf, 0.0, lse)


def _sum_rows(ops: ArrayOps, x: Any, lay: Layout, arr: Mapping[str, Any]) -> Any:
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


def _lse_levels(ops: ArrayOps, blocks: list, x: Any, lay: Layout, mv: float | None) -> Any:
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


def joint_levels(
    ops: ArrayOps, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool, lse: Any = None
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
        lse = _lse_levels(ops, blocks, x, lay, mv) if level else lse_rows(ops, x, lay, arr, mv)
    lse = empty_is_zero(ops, lse)
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


def depth_ordered(ops: ArrayOps, levels: list[tuple[Any, Any]], lay: Layout, terminal: bool) -> Any:
    """Concatenate the per-depth results of :func:`joint_levels`: ``(rows, C)`` in depth order."""
    pieces = []
    for d, (joint, stop) in enumerate(levels):
        if terminal and stop is not None:
            pieces += [joint[:, :lay.n_leaves_at[d]], stop]
        else:
            pieces.append(joint)
    return ops.concat(pieces, 1)


def _best_rows(
    ops: ArrayOps, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool, log_t: float | None
) -> tuple[Any, Any]:
    """Winning node id ``(rows,)`` (``-1`` for none) and its score, for a block of rows.

    The candidates of each depth form at most two contiguous *segments* of the depth order
    (its leaves, its internal nodes), each in ascending id order, so a first-occurrence argmax
    per segment and the lowest id among the segments that reach the maximum give the
    lowest-id winner without any ``(rows, C)`` result.
    """
    C, bounds = lay.n_classes, lay.level_bounds
    levels = joint_levels(ops, x, lay, arr, mv, terminal and log_t is None)
    values, ids, seg_depth = [], [], []
    for d, (joint, stop) in enumerate(levels):
        a, b = bounds[d], bounds[d + 1]
        m = a + lay.n_leaves_at[d]
        segments = []
        if m > a:
            segments.append((joint[:, :m - a], a, m))
        if b > m and (terminal or log_t is not None):
            segments.append((joint[:, m - a:] if log_t is not None else stop, m, b))
        for v, start, end in segments:
            pos = ops.argmax_rows(v)
            values.append(ops.take_rows(v, pos))
            ids.append(ops.take1(arr["order"][start:end, ...], pos))
            seg_depth.append(d)
    V = ops.stack(values, 1)  # (rows, segments)
    I = ops.stack(ids, 1)
    if log_t is None:
        value = ops.max(V, 1)
        node = ops.min(ops.where(V == ops.expand(value, 1), I, C), 1)
        return node, value
    # Path log-probabilities never grow along a path, so the depths holding a node at or
    # above the threshold are a prefix: cut at the deepest, at its best node (lowest id on ties).
    depth_of = ops.index_array(seg_depth, I)
    deepest = ops.max(ops.where(V >= log_t, depth_of, -1), 1)
    at_depth = depth_of == ops.expand(deepest, 1)
    value = ops.max(ops.where(at_depth, V, -math.inf), 1)
    node = ops.min(ops.where(at_depth & (V == ops.expand(value, 1)), I, C), 1)
    found = deepest >= 0
    return ops.where(found, node, PAD), ops.where(found, value, 0.0)


# ---------------------------------------------------------------------------- the backend
class BucketedBackend:
    """The lean engine's primitives on the bucketed layout, for one kind of array.

    ``name`` identifies the route (see :mod:`._backends`); ``ops`` are the array operations of
    the kind. Every primitive takes 2-D scores ``(rows, n_outputs)``, the layout ``lay`` and its
    arrays ``arr`` in the scores' namespace and device, and returns arrays of that kind. None
    records an autograd graph: :mod:`._autograd` wraps them.
    """

    #: Whether :meth:`cross_entropy_forward` / ``_backward`` exist (the fused CUDA kernels).
    fuses_loss = False

    def __init__(self, name: str, ops: ArrayOps):
        self.name = name
        self.ops = ops

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _chunks(self, fn: Any, x: Any, lay: Layout) -> list:
        return map_chunks(self.ops, fn, x.shape[0], lay, itemsize(x))

    def lse(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        """Log-normaliser of every group, ``(rows, G)``; ``-inf`` for a group of ``-inf`` only."""
        ops = self.ops
        pieces = self._chunks(lambda a, b: lse_rows(ops, x[a:b, ...], lay, arr, mv), x, lay)
        return ops.concat(pieces, 0) if pieces else ops.zeros((0, lay.n_groups), x)

    def log_softmax(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        """Every column's log-probability within its group, ``(rows, n_outputs)``."""
        ops = self.ops
        if not ops.in_place:  # functional namespaces: one block
            lse = lse_rows(ops, x, lay, arr, mv) if x.shape[0] else ops.zeros((0, lay.n_groups), x)
            return x - ops.take(empty_is_zero(ops, lse), arr["col_group"])
        out = ops.empty(tuple(x.shape), x)

        def chunk(a: int, b: int) -> None:
            lse = empty_is_zero(ops, lse_rows(ops, x[a:b, ...], lay, arr, mv))
            ops.rsub_(ops.take_into(lse, arr["col_group"], out[a:b, ...]), x[a:b, ...])  # x - lse[group]

        self._chunks(chunk, x, lay)
        return out

    def log_softmax_backward(self, out: Any, grad: Any, lay: Layout, arr: Mapping[str, Any]) -> Any:
        """``grad - exp(out) * (group sum of grad)[group]``: the gradient of :meth:`log_softmax`."""
        ops = self.ops
        result = ops.empty(tuple(out.shape), out)

        def chunk(a: int, b: int) -> None:
            sums = _sum_rows(ops, grad[a:b, ...], lay, arr)
            res = ops.take_into(sums, arr["col_group"], result[a:b, ...])
            ops.rsub_(ops.mul_(res, ops.exp(out[a:b, ...])), grad[a:b, ...])

        self._chunks(chunk, out, lay)
        return result

    def exp_minus(self, x: Any, shift: Any, lay: Layout, arr: Mapping[str, Any], row_sign: Any = None) -> Any:
        """``exp(x - shift[:, col_group])`` (softmax times a group weight), each row multiplied by
        ``row_sign`` (``(rows,)`` of -1 and 1) when given; one allocation."""
        ops = self.ops
        result = ops.empty(tuple(x.shape), x)

        def chunk(a: int, b: int) -> None:
            res = ops.take_into(shift[a:b, ...], arr["col_group"], result[a:b, ...])
            ops.exp_(ops.rsub_(res, x[a:b, ...]))

        self._chunks(chunk, x, lay)
        if row_sign is not None:
            result = ops.mul_(result, ops.expand(ops.astype(row_sign, x), 1))
        return result

    def node_log_probs(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool) -> Any:
        """Joint log-probability of the path ending at every node, ``(rows, C)``."""
        ops = self.ops
        if not ops.in_place or x.shape[0] == 0:
            if x.shape[0] == 0:
                return ops.zeros((0, lay.n_classes), x)
            levels = joint_levels(ops, x, lay, arr, mv, terminal)
            return ops.take(depth_ordered(ops, levels, lay, terminal), arr["inverse_order"])
        out = ops.empty((x.shape[0], lay.n_classes), x)

        def chunk(a: int, b: int) -> None:
            levels = joint_levels(ops, x[a:b, ...], lay, arr, mv, terminal)
            ops.take_into(depth_ordered(ops, levels, lay, terminal), arr["inverse_order"], out[a:b, ...])

        self._chunks(chunk, x, lay)
        return out

    def best_nodes(
        self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool, log_t: float | None
    ) -> tuple[Any, Any]:
        """The winning node of every row (``-1`` for none) and its score: see ``best_paths``."""
        ops = self.ops
        results = self._chunks(lambda a, b: _best_rows(ops, x[a:b, ...], lay, arr, mv, terminal, log_t), x, lay)
        if not results:
            return ops.to_int(ops.zeros((0,), x)), ops.zeros((0,), x)
        return ops.concat([r[0] for r in results], 0), ops.concat([r[1] for r in results], 0)

    def best_paths(
        self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool, log_t: float | None
    ) -> tuple[Any, Any]:
        """The winning path of every row ``(rows, L)`` (all ``-1`` for none) and its score."""
        node, value = self.best_nodes(x, lay, arr, mv, terminal, log_t)
        ops = self.ops
        return ops.take1(arr["paths_ext"], ops.where(node >= 0, ops.to_int(node), lay.n_classes)), value
