"""The lean engine: per-group log-softmax and path log-probabilities in O(B*C).

The paper normalises scores by spreading them over a ``(B, L, C)`` tensor, one masked row
per level, and taking a softmax of every row. Here each class's log-probability within its
group is computed with segment reductions over the ``(B, C)`` scores themselves:

- the columns are gathered once into a fixed *layout* in which every group is contiguous
  (:mod:`._layout`), so the max, ``exp`` and sum of every group are ordinary reductions;
- path log-probabilities are accumulated level by level from the parent array (one loop
  over the ``L`` levels, never over samples or nodes);
- a *backend* chosen from the scores' kind runs these primitives (:mod:`._backends`): the
  bucketed kernels on NumPy, torch, CuPy or any array-API namespace, a C kernel for large
  groups on the CPU, fused Triton kernels on CUDA; torch autograd wraps them
  (:mod:`._autograd`).

This module holds the public functions; :mod:`._engine` what they share with
:mod:`.decode` and :mod:`hiclass_parallel.losses`.

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

from typing import Any

import numpy as np

from .._backend import is_torch_array
from ..tree import Tree
from .engine._engine import SEMANTICS, Prepared, autograd, check_partition, check_semantics, layout, prepare, restore

__all__ = [
    "SEMANTICS",
    "n_outputs",
    "stop_columns",
    "group_logsumexp",
    "group_log_softmax",
    "node_log_probs",
]


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
    check_partition(partition)
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
    return layout(tree, partition, True).host["stop_col"].copy()


# ---------------------------------------------------------------------------- public API
def _differentiable(p: Prepared, function: str, primitive: str) -> Any:
    """A backend primitive on prepared scores; through its autograd Function for torch tensors."""
    if is_torch_array(p.x):
        return getattr(autograd(), function).apply(p.x, p.backend, p.lay, p.arr, p.mv)
    return getattr(p.backend, primitive)(p.x, p.lay, p.arr, p.mv)


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
    p = prepare(scores, tree, partition, stop, mask_value)
    return restore(_differentiable(p, "GroupLogSumExp", "lse"), p.lead, p.lay.n_groups)


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
    p = prepare(scores, tree, partition, stop, mask_value)
    return restore(_differentiable(p, "GroupLogSoftmax", "log_softmax"), p.lead, p.lay.n_outputs)


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
    check_semantics(semantics, stop)
    p = prepare(scores, tree, partition, stop, mask_value)
    terminal = semantics == "terminal"
    if is_torch_array(p.x) and p.x.requires_grad:
        import torch

        if torch.is_grad_enabled():
            out = autograd().node_log_probs(p.x, p.backend, p.lay, p.arr, p.mv, terminal)
            return restore(out, p.lead, p.lay.n_classes)
    out = p.backend.node_log_probs(p.x, p.lay, p.arr, p.mv, terminal)
    return restore(out, p.lead, p.lay.n_classes)
