"""A path-level linear term: one-vs-rest SVM margins of every node on a candidate's path, summed.

The flat linear term (:mod:`._flat_margins`) scores a candidate answer by the margin of its own
class, trained on the rows labelled with exactly that class. A path-level SVM trains one margin
per node of the tree instead, a row positive for every node on its target's path (its answer
and all its ancestors), and scores a candidate ``c`` by the margins of the nodes on its path:

    score(x, c) = sum over the nodes a on the path from the root to c of margin_a(x)

so a candidate whose ancestors the row also resembles scores higher, and a rare target borrows
from its parents' rows, as the hierarchical network does, while the margins are a flat linear
model's.

**One fit per level, or one solve for all.** The nodes of one depth partition the rows (each
row's path holds at most one of them), so their one-vs-rest problems are those of a single
multi-class SVM over that level's nodes, the rows whose path ends above the level forming one
more class, "none". On sparse rows more than their features :meth:`PathMargins.fit` runs
``LinearSVC`` once per level (:meth:`~._flat_margins.FlatMargins.fit`); on dense rows, and on
sparse rows fewer than their features (a small text taxonomy: hundreds of rows, thousands of
features), every level's problems are least-squares SVMs on the same rows with the same
penalty, so one system gives them all (:func:`~._flat_margins.least_squares_margins`, in the
dual where the rows are fewer). There the squared hinge's margins and the least squares' agree
closely: with fewer rows than features almost every row is within its margin, where the two
losses are the same (``docs/prototypes.md``, "A path-level linear term"). Every node's margin
is kept in one :class:`~._flat_margins.FlatMargins`. A node every training row holds (a single
root) has the margin of a positive everywhere, +1; a node no training row's path holds gets
:data:`~.._defaults.NO_TARGET_MARGIN`, as a flat term's non-target does.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ._flat_margins import FlatMargins, _host_matrix, least_squares_margins

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
            random_state: Any = None, solver: str = "auto") -> PathMargins:
        """The path-level SVM of the rows of ``X`` labelled with node ids ``ids`` of ``tree``
        (``-1``: unlabelled, skipped), each row counted ``sample_weight`` times; at least two
        distinct nodes on the training rows' paths. ``solver``: ``"least_squares"``, every
        level's least-squares SVMs from one system; ``"svm"``, one
        :meth:`~._flat_margins.FlatMargins.fit` a level (``LinearSVC`` on sparse rows);
        ``"auto"``, the first where :func:`least_squares_route` says so (the fit chooses by
        the two routes' estimated costs)."""
        if solver not in ("auto", "least_squares", "svm"):
            raise ValueError(f"solver must be 'auto', 'least_squares' or 'svm', got {solver!r}")
        X, ids = _host_matrix(X), np.asarray(ids)
        paths = np.asarray(tree.paths, dtype=np.int64)
        n_classes = int(tree.n_classes)
        labelled = ids >= 0
        if not labelled.any():
            raise ValueError("a path-level linear term needs labelled training rows")
        levels, ones = level_labels(paths, ids)
        n_features = int(X.shape[1])
        classes, coef, intercept = np.zeros(0, dtype=np.int64), np.zeros((0, n_features)), np.zeros(0)
        least_squares = solver == "least_squares" or (solver == "auto" and least_squares_route(X, int(labelled.sum())))
        if levels and least_squares:
            classes, coef, intercept = _least_squares_levels(X, levels, labelled, sample_weight)
        elif levels:
            classes, coef, intercept = _svm_levels(X, levels, sample_weight, n_classes, random_state)
        keep = classes < n_classes  # the levels' "none" classes score no candidate
        ones = np.concatenate(ones) if ones else np.zeros(0, dtype=np.int64)
        classes = np.concatenate([classes[keep], ones])
        coef = np.concatenate([coef[keep], np.zeros((ones.size, n_features))])
        intercept = np.concatenate([intercept[keep], np.ones(ones.size)])
        if classes.size < 2:
            raise ValueError(f"a path-level linear term needs at least two nodes on the training rows' paths, "
                             f"got {classes.size}")
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


def level_labels(paths: np.ndarray, ids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``(levels, ones)`` of the rows labelled with node ids ``ids`` (``-1``: unlabelled) of the
    tree of ancestral ``paths``: each level's labels (an array a row: the level's node on the
    row's path, or "none", id ``n_classes``, for a row whose path ends above it: one class more,
    a negative of every node of the level; ``-1`` for an unlabelled row) where the level has
    two classes or more, and the node of each level of one (every labelled row holds it: a
    single root), which fits nothing: its margin is that of a positive everywhere, +1.

    Examples
    --------
    >>> paths = np.array([[0, -1], [1, -1], [0, 2], [0, 3], [1, 4]])
    >>> levels, ones = level_labels(paths, np.array([2, 3, 1, -1]))
    >>> [labels.tolist() for labels in levels], ones  # "none" is id 5
    ([[0, 0, 1, -1], [2, 3, 5, -1]], [])
    """
    n_classes = paths.shape[0]
    labelled = ids >= 0
    on_path = np.where(labelled[:, None], paths[np.maximum(ids, 0)], -1)
    levels, ones = [], []
    for level in range(paths.shape[1]):
        nodes = on_path[:, level]
        if not (nodes >= 0).any():
            break
        labels = np.where(labelled, np.where(nodes >= 0, nodes, n_classes), -1)
        present = np.unique(labels[labelled])
        if present.size < 2:
            ones.append(present)
        else:
            levels.append(labels)
    return levels, ones


def least_squares_route(X: Any, n_rows: int) -> bool:
    """Whether the least-squares SVMs are the path-level term's SVMs on these rows: dense rows,
    or sparse rows fewer than their features, where almost every row lies within its margin and
    the squared hinge of ``LinearSVC`` is the least squares (elsewhere ``LinearSVC``'s a
    level). A sparse torch tensor counts as sparse rows."""
    return not is_sparse(X) or n_rows < int(X.shape[1])


def is_sparse(X: Any) -> bool:
    """Whether ``X`` is sparse rows: a scipy sparse matrix or a torch tensor of a sparse layout."""
    if sp.issparse(X):
        return True
    import torch

    return isinstance(X, torch.Tensor) and X.layout != torch.strided


def _least_squares_levels(X: Any, levels: list[np.ndarray], labelled: np.ndarray,
                          weight: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(classes, coef, intercept)`` of every level's least-squares SVMs (each level's
    ``labels``: a node or "none" per labelled row) from one system: every level's problems share
    the labelled rows (each row is in one class of every level), so one solve with a right-hand
    side per class gives them all."""
    rows = np.flatnonzero(labelled)
    classes, member_rows = [], []
    for labels in levels:
        present, column = np.unique(labels[rows], return_inverse=True)
        member_rows.append(len(classes) + column)
        classes.extend(present.tolist())
    members = sp.csr_matrix((np.ones(rows.size * len(levels)),
                             (np.concatenate(member_rows), np.tile(np.arange(rows.size), len(levels)))),
                            shape=(len(classes), rows.size))
    X_rows = X[rows] if sp.issparse(X) else np.asarray(X)[rows]
    coef, intercept = least_squares_margins(X_rows, members, None if weight is None else
                                            np.asarray(weight, dtype=np.float64)[rows])
    return np.asarray(classes, dtype=np.int64), coef, intercept


def _svm_levels(X: Any, levels: list[np.ndarray], weight: np.ndarray | None, n_classes: int,
                random_state: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(classes, coef, intercept)`` of one multi-class ``LinearSVC`` per level
    (:meth:`~._flat_margins.FlatMargins.fit` over the level's nodes and its "none" class)."""
    fits = [FlatMargins.fit(X, labels, n_classes + 1, sample_weight=weight, random_state=random_state)
            for labels in levels]
    return (np.concatenate([f.classes for f in fits]), np.concatenate([f.coef for f in fits]),
            np.concatenate([f.intercept for f in fits]))
