"""A path-level linear term: one-vs-rest SVM margins of every node on a candidate's path, summed.

The flat linear term (:mod:`._flat_margins`) scores a candidate answer by the margin of its own
class, trained on the rows labelled with exactly that class. A path-level SVM trains one margin
per node of the tree instead, a row positive for every node on its target's path (its answer
and all its ancestors), and scores a candidate ``c`` by the margins of the nodes on its path:

    score(x, c) = sum over the nodes a on the path from the root to c of margin_a(x)

so a candidate whose ancestors the row also resembles scores higher, and a rare target borrows
from its parents' rows, as the hierarchical network does, while the margins are a flat linear
model's.

**One fit per level.** The nodes of one depth partition the rows (each row's path holds at
most one of them), so their one-vs-rest problems are those of a single multi-class SVM over
that level's nodes, the rows whose path ends above the level forming one more class, "none":
:meth:`PathMargins.fit` runs :meth:`~._flat_margins.FlatMargins.fit` once per level (the same
``LinearSVC``, or the least-squares SVM on dense rows) and keeps every node's margin in one
:class:`~._flat_margins.FlatMargins`. A node every training row holds (a single root) has the
margin of a positive everywhere, +1; a node no training row's path holds gets
:data:`~.._defaults.NO_TARGET_MARGIN`, as a flat term's non-target does.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ._flat_margins import FlatMargins

if TYPE_CHECKING:
    import torch

__all__ = ["PathMargins"]


@dataclasses.dataclass
class PathMargins:
    """A fitted path-level linear SVM: every node's margin, summed along a candidate's path.

    Attributes
    ----------
    margins : FlatMargins
        One margin per node on a training row's path (its ``classes``), over every feature.
    paths : ndarray of int64 of shape (n_classes, n_levels)
        The tree's ancestral paths (``-1`` pads): the nodes each candidate's score sums.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.estimators.answer import PathMargins
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1])  # 0: a (2, 3 below), 1: b (4 below)
    >>> X = np.array([[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 1.0, 0.0], [0.1, 0.9, 0.0], [0.0, 0.0, 1.0]])
    >>> term = PathMargins.fit(X, np.array([2, 2, 3, 3, 4]), tree)
    >>> term.margins.classes.tolist()  # every node on a training path
    [0, 1, 2, 3, 4]
    >>> s = term.score(X[:1], np.array([[2, 3, 4, -1]]))
    >>> bool(s[0, 0] > s[0, 1] > s[0, 2]), float(s[0, 3])  # its own leaf, its sibling, the other branch; no candidate
    (True, 0.0)
    """

    margins: FlatMargins
    paths: np.ndarray

    @classmethod
    def fit(cls, X: Any, ids: np.ndarray, tree: Any, sample_weight: np.ndarray | None = None,
            random_state: Any = None) -> PathMargins:
        """The path-level SVM of the rows of ``X`` labelled with node ids ``ids`` of ``tree``
        (``-1``: unlabelled, skipped), each row counted ``sample_weight`` times; at least two
        distinct nodes on the training rows' paths."""
        ids = np.asarray(ids)
        paths = np.asarray(tree.paths, dtype=np.int64)
        n_classes = int(tree.n_classes)
        labelled = ids >= 0
        if not labelled.any():
            raise ValueError("a path-level linear term needs labelled training rows")
        on_path = np.where(labelled[:, None], paths[np.maximum(ids, 0)], -1)
        parts = []
        for level in range(paths.shape[1]):
            nodes = on_path[:, level]
            present = np.unique(nodes[nodes >= 0])
            if present.size == 0:
                break
            # The rows whose path ends above this level are one class more ("none", id
            # n_classes): negatives of every node of the level, as in one-vs-rest per node.
            labels = np.where(labelled, np.where(nodes >= 0, nodes, n_classes), -1)
            if np.unique(labels[labels >= 0]).size < 2:  # one node every labelled row holds
                parts.append((present, None, np.ones(present.size, dtype=np.float32)))
                continue
            level_fit = FlatMargins.fit(X, labels, n_classes + 1, sample_weight=sample_weight,
                                        random_state=random_state)
            keep = level_fit.classes < n_classes
            parts.append((level_fit.classes[keep], level_fit.coef[keep], level_fit.intercept[keep]))
        classes = np.concatenate([part[0] for part in parts])
        if classes.size < 2:
            raise ValueError(f"a path-level linear term needs at least two nodes on the training rows' paths, "
                             f"got {classes.size}")
        n_features = int(X.shape[1])
        coef = np.concatenate([np.zeros((part[0].size, n_features), dtype=np.float32) if part[1] is None else part[1]
                               for part in parts])
        intercept = np.concatenate([part[2] for part in parts])
        order = np.argsort(classes, kind="stable")  # the levels' node sets are disjoint
        margins = FlatMargins(classes=classes[order], coef=np.ascontiguousarray(coef[order], dtype=np.float32),
                              intercept=np.asarray(intercept[order], dtype=np.float32), n_classes=n_classes)
        return cls(margins=margins, paths=paths)

    def score(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        """``(n, k)`` float32: the summed margins of the nodes on each candidate's path; 0 for
        ``-1`` (no candidate)."""
        nodes = np.asarray(nodes)
        n, k = nodes.shape
        on_path = np.where(nodes[..., None] >= 0, self.paths[np.maximum(nodes, 0)], -1)  # (n, k, L)
        margins = self.margins.score(X, on_path.reshape(n, -1)).reshape(on_path.shape)
        return np.where(on_path >= 0, margins, np.float32(0.0)).sum(axis=2, dtype=np.float32)

    def export_module(self) -> torch.nn.Module:
        """:meth:`score` in torch ops, for export (:meth:`~._terms.Term.export_module`):
        :class:`~._export_terms.PathMarginScores`."""
        from ._export_terms import PathMarginScores

        return PathMarginScores(self.paths, self.margins.export_module())

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The term as plain arrays, for saving without pickle (the paths are the tree's)."""
        return self.margins.to_arrays()

    @classmethod
    def from_arrays(cls, arrays: Any, tree: Any, n_features: int) -> PathMargins:
        """The inverse of :meth:`to_arrays`, checked against the model it belongs to (its
        ``tree`` and ``n_features``; a ``ValueError`` naming what does not fit)."""
        margins = FlatMargins.from_arrays(arrays, tree, n_features)
        if sp.issparse(margins.coef):
            raise ValueError("a path-level linear term's weights are dense; got the parts of a sparse matrix")
        return cls(margins=margins, paths=np.asarray(tree.paths, dtype=np.int64))
