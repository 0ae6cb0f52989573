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
  dozens of small launches of the route above, not memory traffic, would set the time;
  NumPy-backed batches of a partition with large groups go through a small C kernel
  (:mod:`._native`) when it was built.

Where things are: the layout in :mod:`._layout`, the array operations of each kind of array
and the row chunks in :mod:`._array_ops`; this module holds the kernels written with them,
the routing to the C and Triton kernels, the autograd Functions and the public functions.

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
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._backend import array_namespace, is_torch_array
from ..tree import Tree
from . import _native, _triton
from ._array_ops import _itemsize, _kernel_inputs, _map_chunks, _NumpyOps, _Ops, _ops_for, _TorchGradOps
from ._layout import _check_partition, _device_arrays, _Layout, _layout

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


# ---------------------------------------------------------------------------- public sizes
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


def _fused_lse(x: Any, lay: _Layout, arr: Mapping[str, Any], mask_value: float | None) -> Any:
    lse = _triton.segment_reduce(x, _fused_plan(lay, x), lse=True)
    if mask_value is not None:
        import torch

        lse = torch.logaddexp(lse, arr["log_masked"].to(lse.dtype) + mask_value)
    return lse


def _native_rows(ops: _Ops, x: Any, lay: _Layout, plan: Any, log_softmax: bool) -> tuple[Any, Any]:
    """The C kernel over the row chunks: ``(lse, out)``, ``out`` (the log-softmax) only if asked."""
    lse = np.empty((x.shape[0], lay.n_groups), dtype=x.dtype)
    out = np.empty(x.shape, dtype=x.dtype) if log_softmax else None

    def chunk(a: int, b: int) -> None:
        _native.group_lse(x[a:b], plan, lse[a:b], None if out is None else out[a:b])

    _map_chunks(ops, chunk, x.shape[0], lay, _itemsize(x))
    return lse, out


def _group_lse_2d(ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any], mask_value: float | None) -> Any:
    if _fused(x):
        return _fused_lse(x, lay, arr, mask_value)
    plan = _native_plan(ops, x, lay, mask_value)
    if plan is not None:
        return _native_rows(ops, x, lay, plan, log_softmax=False)[0]
    pieces = _map_chunks(ops, lambda a, b: _lse_rows(ops, x[a:b, ...], lay, arr, mask_value), x.shape[0], lay, _itemsize(x))
    if not pieces:
        return ops.zeros((0, lay.n_groups), x)
    return ops.concat(pieces, 0)


def _group_log_softmax_2d(ops: _Ops, x: Any, lay: _Layout, arr: Mapping[str, Any], mask_value: float | None) -> Any:
    if _fused(x):
        return _triton.combine(_triton.COMBINE_MINUS, x, _fused_lse(x, lay, arr, mask_value), arr["col_group"])
    plan = _native_plan(ops, x, lay, mask_value)
    if plan is not None:
        return _native_rows(ops, x, lay, plan, log_softmax=True)[1]
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
        logp_t = _triton.log_probs_transposed(x, _fused_lse(x, lay, arr, mv), arr["col_group"])
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
