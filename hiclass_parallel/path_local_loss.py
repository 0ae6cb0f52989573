"""Layer 3: the exact sibling-partition cross-entropy, scoring only each sample's path groups.

:class:`HierarchicalCrossEntropy` takes a full ``(B, n_outputs)`` score matrix, so a model
pays for every class on every row. Under the sibling partition the same loss needs only the
groups on each sample's labelled path (:mod:`hiclass_parallel.ops.sibling_paths`), so
:class:`PathLocalCrossEntropy` takes a *score function* instead and asks it for those
columns only: per sample, the sum of the group sizes on its path times the hidden width.
Loss and gradients are those of ``HierarchicalCrossEntropy(tree, "sibling", stop, ...)`` on
the full scores (tested on random trees with shuffled ids).

The level partition has no such form: see :mod:`hiclass_parallel.ops.sibling_paths`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .ops.groups import SEMANTICS
from .ops.sibling_paths import ScoreFn, expand_rows, path_rows, segment_logsumexp, sibling_plan
from .tree import PAD, Tree

__all__ = ["PathLocalCrossEntropy"]

REDUCTIONS = ("mean", "sum", "none")


class PathLocalCrossEntropy(nn.Module):
    """Exact sibling cross-entropy over the groups on each labelled path, scored on demand.

    Parameters
    ----------
    tree : Tree
        The class tree.
    stop : bool, default=False
        Whether the score vector has stop columns (one per internal node, after the ``C``
        class columns, as :func:`~hiclass_parallel.ops.groups.n_outputs` counts them).
    reduction : {"mean", "sum", "none"}, default="mean"
        ``"mean"``: mean over all labelled rows (one per path node, plus stop rows), as
        :class:`~hiclass_parallel.losses.HierarchicalCrossEntropy`; ``"sum"``; ``"none"``:
        per-sample sums ``(B,)``.
    semantics : {"partial", "terminal"}, default=None
        As in :class:`~hiclass_parallel.losses.HierarchicalCrossEntropy`: ``None`` means
        ``"terminal"`` with ``stop=True``, else ``"partial"``.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.losses import HierarchicalCrossEntropy
    >>> from hiclass_parallel.path_local_loss import PathLocalCrossEntropy
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> scores = torch.randn(4, 9, dtype=torch.float64)
    >>> target = torch.tensor([6, 2, 1, -1])
    >>> local = PathLocalCrossEntropy(tree)(lambda rows, cols: scores[rows, cols], target)
    >>> full = HierarchicalCrossEntropy(tree, "sibling")(scores, target)
    >>> bool(torch.isclose(local, full))
    True
    """

    def __init__(self, tree: Tree, stop: bool = False, reduction: str = "mean", *, semantics: str | None = None):
        super().__init__()
        if not isinstance(tree, Tree):
            raise TypeError(f"tree must be a hiclass_parallel.Tree, got {type(tree).__name__}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if semantics is None:
            semantics = "terminal" if stop else "partial"
        if semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
        self.tree = tree
        self.stop = bool(stop)
        self.reduction = reduction
        self.semantics = semantics
        self.n_outputs = sibling_plan(tree, self.stop).n_outputs

    def extra_repr(self) -> str:
        return f"n_outputs={self.n_outputs}, stop={self.stop}, semantics={self.semantics!r}, reduction={self.reduction!r}"

    def forward(self, score: ScoreFn, target: torch.Tensor) -> torch.Tensor:
        """Loss of the scores ``score(samples, columns)`` against node ids ``target (B,)``.

        ``-1`` marks an unlabelled sample. Returns a scalar (``"mean"``, ``"sum"``) or
        per-sample losses ``(B,)`` (``"none"``).
        """
        if target.ndim != 1 or target.dtype.is_floating_point or target.dtype == torch.bool:
            raise ValueError(f"target must be integer node ids of shape (B,), got {target.dtype} {tuple(target.shape)}")
        C = self.tree.n_classes
        bad = (target < PAD) | (target >= C)
        if bool(bad.any()):
            raise IndexError(f"target ids {sorted(set(target[bad].tolist()))[:5]} are out of range [0, {C}) (-1: unlabelled)")
        plan = sibling_plan(self.tree, self.stop)
        sample, group, column = path_rows(plan, target, self.semantics == "terminal")
        row, cand, start = expand_rows(plan, group)
        values = score(sample[row], cand)
        lse = segment_logsumexp(values, row, group.shape[0])
        picked = values[start + plan.arrays(target)["col_pos"][column]]
        per_row = lse - picked
        B = target.shape[0]
        per_sample = torch.zeros(B, dtype=values.dtype, device=values.device).index_add(0, sample, per_row)
        if self.reduction == "none":
            return per_sample
        total = per_sample.sum()
        if self.reduction == "sum":
            return total
        return total / max(int(sample.shape[0]), 1)
