"""A flat linear term in the re-ranking: each training target's one-vs-rest linear SVM margin.

On small taxonomies (a few hundred classes, a few rows per class) a flat linear SVM, one weight
vector per target class over every input feature trained to a margin, is as accurate as the
hierarchical network, and the two err on different rows. The re-ranking then adds the margin
of each candidate answer to the prototypes' score:

    log p(answer) + weight_p * similarity(x, prototype) + weight_f * margin(x, answer)

``margin`` is the decision value of a linear model of one class against the rest, trained to
put the class's rows at +1 and every other row at -1, on the training rows and their target
nodes: on sparse rows scikit-learn's ``LinearSVC`` (squared hinge, ``C=1``); on dense rows the
least-squares SVM of the same regularisation, ridge regression on the +-1 targets, solved in
closed form (one ``(features, features)`` system for every class at once: liblinear's
coordinate descent over dense rows costs minutes where this costs a fraction of the network's
fit). A candidate that was no training target gets :data:`NO_TARGET_MARGIN`, the margin every
negative class is trained to, so it is neither favoured nor ruled out. The weight is in nats per
unit of margin (:data:`DEFAULT_WEIGHT`). Whether a fit keeps the term is decided with the rest
of the configuration (:func:`~..fitting._config.resolve_flat_term`): its cost is one weight
per target and feature, so only small fits keep it by default.

Only the answer changes, as with the prototypes: probabilities and scores are the network's.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp

__all__ = ["DEFAULT_WEIGHT", "NO_TARGET_MARGIN", "FlatMargins"]

#: ``flat_term="auto"``'s weight, in nats per unit of margin: on the WordNet gloss subtrees of a
#: few hundred classes, re-ranking with both terms was most accurate with a weight in 8-32
#: (docs/performance.md, "Small taxonomies").
DEFAULT_WEIGHT = 16.0

#: The margin of a candidate that was no training target: the hinge loss's target for every
#: negative class.
NO_TARGET_MARGIN = -1.0


@dataclasses.dataclass
class FlatMargins:
    """A fitted flat linear SVM over the training targets, as plain arrays.

    Attributes
    ----------
    classes : ndarray of int64 of shape (n_targets,)
        The target node ids, ascending.
    coef : ndarray of float32 of shape (n_targets, n_features)
        One weight vector per target.
    intercept : ndarray of float32 of shape (n_targets,)
    n_classes : int
        Classes of the tree (node ids run ``0..n_classes-1``).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> from hiclass_parallel.estimators import FlatMargins
    >>> flat = FlatMargins.fit(X, np.array([2, 2, 4, 4]), n_classes=5)
    >>> flat.classes.tolist()
    [2, 4]
    >>> m = flat.margins(X[:1], np.array([[2, 4, 0]]))
    >>> bool(m[0, 0] > 0 > m[0, 1]), float(m[0, 2])
    (True, -1.0)
    """

    classes: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    n_classes: int

    @classmethod
    def fit(cls, X: Any, ids: np.ndarray, n_classes: int, sample_weight: np.ndarray | None = None,
            random_state: Any = None) -> FlatMargins:
        """The SVM of the rows of ``X`` labelled with node ids ``ids`` (``-1``: unlabelled,
        skipped), each row counted ``sample_weight`` times; at least two distinct targets."""
        X, ids = _host_matrix(X), np.asarray(ids)
        rows = np.flatnonzero(ids >= 0)
        classes = np.unique(ids[rows])
        if classes.size < 2:
            raise ValueError(f"a flat linear term needs at least two training targets, got {classes.size}")
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]
        if sp.issparse(X):
            coef, intercept = _linear_svm(X[rows], ids[rows], classes, weight, random_state)
        else:
            coef, intercept = _least_squares_svm(np.asarray(X)[rows], ids[rows], classes, weight)
        return cls(classes=classes.astype(np.int64), coef=np.ascontiguousarray(coef, dtype=np.float32),
                   intercept=np.asarray(intercept, dtype=np.float32), n_classes=int(n_classes))

    def rows_of(self, nodes: np.ndarray) -> np.ndarray:
        """The row of ``coef`` of each node id (``-1``: no training target, or no node)."""
        row = np.full(self.n_classes + 1, -1, dtype=np.int64)  # the last entry: node -1
        row[self.classes] = np.arange(self.classes.size)
        return row[np.where(nodes >= 0, nodes, self.n_classes)]

    def margins(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        """``(n, k)`` float32: the margin of row ``i`` for candidate class ``nodes[i, j]``;
        :data:`NO_TARGET_MARGIN` for a node that was no training target and for ``-1``."""
        nodes = np.asarray(nodes)
        decision = X @ self.coef.T if sp.issparse(X) else np.asarray(X, dtype=np.float32) @ self.coef.T
        decision = np.asarray(decision, dtype=np.float32) + self.intercept
        rows = self.rows_of(nodes)
        found = np.take_along_axis(decision, np.maximum(rows, 0), axis=1)
        return np.where(rows >= 0, found, np.float32(NO_TARGET_MARGIN)).astype(np.float32)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The SVM as plain arrays, for saving without pickle."""
        return {"classes": self.classes, "coef": self.coef, "intercept": self.intercept}

    @classmethod
    def from_arrays(cls, arrays: Any, n_classes: int, n_features: int) -> FlatMargins:
        """The inverse of :meth:`to_arrays`, checked against the model it belongs to (a
        ``ValueError`` naming what does not fit)."""
        expected = {"classes", "coef", "intercept"}
        if set(arrays) != expected:
            raise ValueError(f"expected the arrays {sorted(expected)}, got {sorted(arrays)}")
        classes, coef, intercept = arrays["classes"], arrays["coef"], arrays["intercept"]
        if classes.dtype != np.int64 or classes.ndim != 1 or classes.size < 2:
            raise ValueError(f"classes must be at least two int64 node ids, got {classes.dtype} of shape "
                             f"{classes.shape}")
        if classes.min() < 0 or classes.max() >= n_classes or (np.diff(classes) <= 0).any():
            raise ValueError(f"classes must be ascending distinct node ids of the tree's {n_classes} classes")
        if coef.dtype != np.float32 or coef.shape != (classes.size, n_features):
            raise ValueError(f"coef must be float32 of shape {(classes.size, n_features)}, got {coef.dtype} of "
                             f"shape {coef.shape}")
        if intercept.dtype != np.float32 or intercept.shape != (classes.size,):
            raise ValueError(f"intercept must be float32 of shape {(classes.size,)}, got {intercept.dtype} of "
                             f"shape {intercept.shape}")
        if not (np.isfinite(coef).all() and np.isfinite(intercept).all()):
            raise ValueError("coef and intercept must be finite")
        return cls(classes=classes, coef=np.ascontiguousarray(coef), intercept=intercept, n_classes=int(n_classes))


def _host_matrix(X: Any) -> Any:
    """Rows as the solvers take them: a torch tensor as a NumPy array (dense) or a scipy CSR
    matrix (sparse, the classifiers' own conversion), anything else as it is."""
    import torch

    if not isinstance(X, torch.Tensor):
        return X
    if X.layout == torch.strided:
        return X.detach().cpu().numpy()
    from ..fitting._validation import sparse_tensor_to_csr

    return sparse_tensor_to_csr(X)


#: The least-squares SVM's ridge penalty: ``LinearSVC``'s ``C=1`` (its objective
#: ``||w||^2 / 2 + C * loss`` is the ridge objective ``loss + penalty * ||w||^2`` divided by
#: ``2 * penalty``).
LEAST_SQUARES_PENALTY = 0.5


def _linear_svm(X: Any, ids: np.ndarray, classes: np.ndarray, weight: np.ndarray | None,
                random_state: Any) -> tuple[np.ndarray, np.ndarray]:
    """``LinearSVC``'s ``(coef, intercept)`` of rows ``X`` labelled ``ids``, a row per class."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    svm = LinearSVC(random_state=random_state)
    with warnings.catch_warnings():
        # liblinear stops at its iteration cap on badly scaled rows; the margins are then a
        # little less tight, which only weakens one term of the re-ranking.
        warnings.simplefilter("ignore", ConvergenceWarning)
        svm.fit(X, ids, sample_weight=weight)
    coef, intercept = np.asarray(svm.coef_), np.asarray(svm.intercept_).reshape(-1)
    if classes.size == 2:  # one binary SVM: the first class's margin is the second's negated
        coef, intercept = np.concatenate([-coef, coef]), np.concatenate([-intercept, intercept])
    return coef, intercept


def _least_squares_svm(X: np.ndarray, ids: np.ndarray, classes: np.ndarray,
                       weight: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares SVM's ``(coef, intercept)`` of dense rows ``X`` labelled ``ids``, a row
    per class: ridge regression of ``+1`` (the row's class) and ``-1`` (every other class),
    each row counted ``weight`` times, with an unpenalised intercept.

    Centred on the rows' weighted mean, the targets ``2 * onehot - 1`` lose their constant, so
    the right-hand sides are ``2 * Xc^T W onehot``, a sum of each class's rows: the cost is one
    pass over ``X``, the ``(features, features)`` Gram matrix and one solve with a right-hand
    side per class, never the ``(rows, classes)`` target matrix.
    """
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    w = np.ones(n) if weight is None else np.asarray(weight, dtype=np.float64)
    total = w.sum()
    if not total > 0:
        raise ValueError("a flat linear term needs training rows of positive weight")
    mean = w @ X / total
    Xc = X - mean
    column = np.searchsorted(classes, ids)
    members = sp.csr_matrix((w, (column, np.arange(n))), shape=(classes.size, n))
    class_sums = members @ Xc  # each class's weighted centred rows, summed
    gram = (Xc * w[:, None]).T @ Xc
    gram[np.diag_indices(d)] += LEAST_SQUARES_PENALTY
    coef = scipy.linalg.solve(gram, 2.0 * class_sums.T, assume_a="pos")  # (features, classes)
    share = np.bincount(column, weights=w, minlength=classes.size) / total
    intercept = (2.0 * share - 1.0) - mean @ coef
    return coef.T, intercept
