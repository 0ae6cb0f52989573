"""Path-local work for the sibling partition: only the groups a sample's path goes through.

Under the sibling partition a class's probability is a product of conditional softmaxes, one
per group on its ancestral path (its own siblings, its parent's siblings, ... up to the
top-level group). So the exact loss of a labelled sample needs only the scores of those
groups -- on WordNet's nouns 212 of 82,115 columns on average -- and exact decoding needs
only the groups of the nodes it expands. This module holds the torch side of that:

- :class:`SiblingPlan`: the groups as a CSR table (each group's member columns, children
  ascending then its stop column), built once per ``(tree, stop)`` and cached on the tree;
- :func:`path_rows`: the ``(sample, group, target column)`` rows of a batch of labels;
- :func:`expand_rows`: every candidate column of those rows, flat, with segment ids;
- :func:`segment_logsumexp`: the log-normaliser of each row over its candidates.

Columns are scored on demand by a *score function* ``score(samples, columns) -> scores``,
for example a linear head's ``(h[samples] * W[columns]).sum(-1) + b[columns]``; the cost
is the number of candidate columns times the hidden width, never classes times hidden.

Why the level partition cannot be made path-local exactly: there a group is a whole depth,
so the log-normaliser of the level of a sample's class sums over every class at that depth
(tens of thousands on WordNet), whichever path the sample takes. Skipping them changes the
loss; sampling them (a sampled softmax) only estimates it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..tree import PAD, Tree

#: The integer arrays of a :class:`SiblingPlan`.
_ARRAYS = ("group_ptr", "group_cols", "col_pos", "group_of", "child_group", "group_parent", "paths")

__all__ = [
    "SiblingPlan", "sibling_plan", "path_rows", "expand_rows", "segment_logsumexp", "ScoreFn", "LinearScores",
    "score_matrix",
]

#: ``score(samples, columns) -> scores``: scores of the given (sample, column) pairs, 1-D.
#: A score function may also offer ``matrix(rows, columns) -> (len(rows), len(columns))``, the
#: block of those rows against those columns (:func:`score_matrix` falls back to pairs).
ScoreFn = Callable[[Any, Any], Any]


def score_matrix(score: ScoreFn, rows: Any, columns: Any) -> Any:
    """Scores of every row in ``rows`` against every column in ``columns``: ``(R, K)``.

    Uses the score function's own ``matrix`` when it has one (one dense product, no pair
    indices), else asks it for the ``R * K`` pairs.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.ops.sibling_paths import score_matrix
    >>> scores = torch.arange(12.0).reshape(3, 4)
    >>> score_matrix(lambda r, c: scores[r, c], torch.tensor([0, 2]), torch.tensor([3, 1]))
    tensor([[ 3.,  1.],
            [11.,  9.]])
    """
    matrix = getattr(score, "matrix", None)
    if matrix is not None:
        return matrix(rows, columns)
    R, K = rows.shape[0], columns.shape[0]
    return score(rows.repeat_interleave(K), columns.repeat(R)).reshape(R, K)


@dataclass(frozen=True, eq=False)
class SiblingPlan:
    """The sibling groups of one ``(tree, stop)`` as flat integer arrays (NumPy on the host).

    Attributes
    ----------
    n_classes, n_groups, n_levels, n_outputs : int
        Sizes; ``n_outputs`` is the width of a full score vector (classes, then stops).
    stop : bool
        Whether every group but group 0 ends with its stop column ``C + g - 1``.
    group_ptr : ndarray of int64 of shape (n_groups + 1,)
        Group ``g``'s members are ``group_cols[group_ptr[g]:group_ptr[g + 1]]``.
    group_cols : ndarray of int64 of shape (n_outputs,)
        Member columns of every group: the children in ascending id, then the stop column.
    col_pos : ndarray of int64 of shape (n_outputs,)
        Position of each column within its group's members.
    group_of : ndarray of int64 of shape (n_classes,)
        The group holding each class (its parent's children).
    child_group : ndarray of int64 of shape (n_classes,)
        The group of each internal node's children; ``-1`` for leaves.
    group_parent : ndarray of int64 of shape (n_groups,)
        The node whose children form each group; ``-1`` for group 0 (the top level).
    paths : ndarray of int64 of shape (n_classes + 1, n_levels)
        Ancestral paths padded with ``-1``; the extra last row is all padding.
    """

    n_classes: int
    n_groups: int
    n_levels: int
    n_outputs: int
    stop: bool
    group_ptr: np.ndarray
    group_cols: np.ndarray
    col_pos: np.ndarray
    group_of: np.ndarray
    child_group: np.ndarray
    group_parent: np.ndarray
    paths: np.ndarray

    _device_arrays: dict = field(default_factory=dict, repr=False)  # device -> tensors of `arrays`

    def arrays(self, like: Any) -> dict[str, Any]:
        """The integer arrays as torch tensors on the device of ``like``, cached per device."""
        import torch

        key = str(like.device)
        if key not in self._device_arrays:
            self._device_arrays[key] = {
                name: torch.from_numpy(getattr(self, name).copy()).to(like.device) for name in _ARRAYS
            }
        return self._device_arrays[key]


def _build_plan(tree: Tree, stop: bool) -> SiblingPlan:
    C, L = tree.n_classes, tree.n_levels
    group_of = tree.groups("sibling").astype(np.int64)
    G = int(group_of.max()) + 1 if C else 1
    group_parent = tree.group_parents("sibling").astype(np.int64)  # -1 first: group 0
    # Columns of a full score vector and their groups: classes, then one stop per group g >= 1.
    col_group = np.concatenate([group_of, np.arange(1, G, dtype=np.int64)]) if stop else group_of
    n_out = col_group.size
    group_cols = np.argsort(col_group, kind="stable")  # children ascending, then the stop
    sizes = np.bincount(col_group, minlength=G)
    group_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    col_pos = np.empty(n_out, dtype=np.int64)
    col_pos[group_cols] = np.arange(n_out) - group_ptr[col_group[group_cols]]
    child_group = np.full(C, PAD, dtype=np.int64)
    internal = group_parent[1:]
    child_group[internal] = np.arange(1, G)
    paths = np.concatenate([tree.paths.astype(np.int64), np.full((1, L), PAD, dtype=np.int64)])
    plan = SiblingPlan(C, G, L, n_out, bool(stop), group_ptr, group_cols, col_pos, group_of, child_group,
                       group_parent, paths)
    for name in _ARRAYS:
        getattr(plan, name).flags.writeable = False
    return plan


def sibling_plan(tree: Tree, stop: bool) -> SiblingPlan:
    """The :class:`SiblingPlan` of ``(tree, stop)``, built once and cached on the tree.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.sibling_paths import sibling_plan
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> plan = sibling_plan(tree, stop=True)
    >>> plan.group_cols[plan.group_ptr[3]:plan.group_ptr[4]].tolist()  # children of node 3, its stop
    [6, 7, 8, 11]
    """
    return tree.cached((__name__, bool(stop)), lambda: _build_plan(tree, bool(stop)))


def path_rows(plan: SiblingPlan, nodes: Any, terminal: bool) -> tuple[Any, Any, Any]:
    """The softmax rows of the exact sibling loss of a batch of labels.

    A label ``y`` contributes one row per node ``a`` on its ancestral path (the group of
    ``a``'s siblings, target ``a``) and, under terminal semantics with stop columns, one
    more for an internal ``y``: the group of its children, target ``y``'s stop column.

    Parameters
    ----------
    plan : SiblingPlan
    nodes : torch.Tensor of int64 of shape (B,)
        Target node ids; ``-1`` marks an unlabelled sample (no rows).
    terminal : bool
        Add the stop rows (ignored without stop columns).

    Returns
    -------
    sample, group, target : torch.Tensor of int64 of shape (R,)
        Per row: its sample, its group and the target column within the full score vector.
    """
    import torch

    arr = plan.arrays(nodes)
    safe = torch.where(nodes >= 0, nodes, plan.n_classes)
    path = arr["paths"][safe]  # (B, L), -1 beyond the label's depth
    sample, depth = (path >= 0).nonzero(as_tuple=True)
    target = path[sample, depth]
    group = arr["group_of"][target]
    if terminal and plan.stop:
        child = arr["child_group"][safe.clamp_max(plan.n_classes - 1)]
        stops = ((nodes >= 0) & (child >= 0)).nonzero(as_tuple=True)[0]
        g = child[stops]
        sample = torch.cat([sample, stops])
        group = torch.cat([group, g])
        target = torch.cat([target, plan.n_classes + g - 1])
    return sample, group, target


def expand_rows(plan: SiblingPlan, group: Any) -> tuple[Any, Any, Any]:
    """Every member column of each row's group, flat.

    Parameters
    ----------
    plan : SiblingPlan
    group : torch.Tensor of int64 of shape (R,)

    Returns
    -------
    row : torch.Tensor of int64 of shape (T,)
        The row of each candidate, non-decreasing (rows are contiguous segments).
    column : torch.Tensor of int64 of shape (T,)
        The candidate's column in the full score vector.
    start : torch.Tensor of int64 of shape (R,)
        Where each row's segment starts in the flat candidates.
    """
    import torch

    arr = plan.arrays(group)
    first = arr["group_ptr"][group]
    sizes = arr["group_ptr"][group + 1] - first
    start = torch.cumsum(sizes, 0) - sizes
    row = torch.repeat_interleave(torch.arange(group.shape[0], device=group.device), sizes)
    offset = torch.arange(row.shape[0], device=group.device) - start[row]
    return row, arr["group_cols"][first[row] + offset], start


def segment_logsumexp(values: Any, row: Any, n_rows: int) -> Any:
    """``logsumexp`` of ``values`` within each row's segment: ``(T,) -> (n_rows,)``.

    Differentiable in ``values``. The shift by each row's maximum is a constant for autograd
    (the result does not depend on it), so the gradient is the segment softmax. A row whose
    values are all ``-inf`` gives ``-inf``; an empty row gives ``-inf``.
    """
    import torch

    with torch.no_grad():
        top = torch.full((n_rows,), -torch.inf, dtype=values.dtype, device=values.device)
        top = top.scatter_reduce(0, row, values, "amax", include_self=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = torch.zeros(n_rows, dtype=values.dtype, device=values.device).index_add(
        0, row, torch.exp(values - top[row])
    )
    return torch.log(total) + top


class LinearScores:
    """The score function of a linear output layer on hidden rows: ``h @ weight.T + bias``, on demand.

    ``score(samples, columns)`` computes only the asked-for pairs (one matrix product against
    the distinct columns). :func:`~hiclass_parallel.ops.best_first.best_first_paths` also reads
    the layer itself through :meth:`linear_parts`, and on the CPU searches each row in C,
    scoring exactly the groups it expands. Any score function may offer ``linear_parts()``.

    Parameters
    ----------
    h : torch.Tensor of shape (n_rows, width)
    weight : torch.Tensor of shape (n_outputs, width)
    bias : torch.Tensor of shape (n_outputs,)

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.ops.sibling_paths import LinearScores
    >>> h, weight, bias = torch.ones(2, 3), torch.arange(12.0).reshape(4, 3), torch.zeros(4)
    >>> LinearScores(h, weight, bias)(torch.tensor([0, 1]), torch.tensor([1, 3]))
    tensor([12., 30.])
    """

    def __init__(self, h: Any, weight: Any, bias: Any):
        self.h, self.weight, self.bias = h, weight, bias

    def linear_parts(self) -> tuple[Any, Any, Any]:
        """``(h, weight, bias)``."""
        return self.h, self.weight, self.bias

    def __call__(self, samples: Any, columns: Any) -> Any:
        import torch

        # the rows of a batch share most columns (the upper groups): one product against the
        # distinct ones reads each weight row once
        unique, where = torch.unique(columns, return_inverse=True)
        return torch.addmm(self.bias[unique], self.h, self.weight[unique].t())[samples, where]

    def matrix(self, rows: Any, columns: Any) -> Any:
        """``(len(rows), len(columns))`` scores of those rows against those columns."""
        import torch

        return torch.addmm(self.bias[columns], self.h[rows], self.weight[columns].t())
