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
unit of margin, learnt on held-out rows (``flat_term="auto"``) or given.

The SVM against every row costs one weight per target and feature and a pass over all rows per
target. Where that is too much, the SVM of the candidates (:meth:`FlatMargins.fit_on_candidates`)
trains each target only where the re-ranking will compare it: against the training rows whose
``prototype_candidates`` most probable answers of the trained network hold it (its hard
negatives), over the features its own rows hold (a sparse weight vector). Its cost is about
``candidates + 1`` passes over the training rows in all, whatever the number of targets, and its
weights are at most the non-zeros of the training rows. Which of the two a fit tries, if any, is
decided with the rest of the configuration, by their estimated costs against the budget
(:func:`~..fitting._config.resolve_flat_term`).

Only the answer changes, as with the prototypes: probabilities and scores are the network's.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .._checks import sparse_tensor_to_csr
from .._defaults import LEAST_SQUARES_PENALTY, NO_TARGET_MARGIN

if TYPE_CHECKING:
    import torch

__all__ = ["NO_TARGET_MARGIN", "FlatMargins"]


@dataclasses.dataclass
class FlatMargins:
    """A fitted flat linear SVM over the training targets, as plain arrays.

    Attributes
    ----------
    classes : ndarray of int64 of shape (n_targets,)
        The target node ids, ascending.
    coef : ndarray of float32 of shape (n_targets, n_features), or scipy CSR matrix
        One weight vector per target: dense for the SVM against every row (:meth:`fit`), a
        sparse CSR matrix of float32 for the SVM of the candidates (:meth:`fit_on_candidates`).
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
    >>> m = flat.score(X[:1], np.array([[2, 4, 0]]))
    >>> bool(m[0, 0] > 0 > m[0, 1]), float(m[0, 2])
    (True, -1.0)

    The SVM of the candidates, each target against the rows whose candidates hold it:

    >>> import scipy.sparse as sp
    >>> rivals = np.array([[4], [4], [2], [2]])
    >>> flat = FlatMargins.fit_on_candidates(sp.csr_matrix(X), np.array([2, 2, 4, 4]), rivals, n_classes=5)
    >>> sp.issparse(flat.coef), bool(flat.score(sp.csr_matrix(X[:1]), np.array([[2, 4]]))[0, 0] > 0)
    (True, True)
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
        classes = _training_targets(ids)
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]
        if sp.issparse(X):
            coef, intercept = _linear_svm(X[rows], ids[rows], classes, weight, random_state)
        else:
            coef, intercept = _least_squares_svm(np.asarray(X)[rows], ids[rows], classes, weight)
        return cls(classes=classes.astype(np.int64), coef=np.ascontiguousarray(coef, dtype=np.float32),
                   intercept=np.asarray(intercept, dtype=np.float32), n_classes=int(n_classes))

    @classmethod
    def fit_on_candidates(cls, X: Any, ids: np.ndarray, candidates: np.ndarray, n_classes: int,
                          sample_weight: np.ndarray | None = None, random_state: Any = None) -> FlatMargins:
        """The SVM of the candidates: for each target of the rows of sparse ``X`` labelled with
        node ids ``ids`` (``-1``: unlabelled, skipped), a linear SVM of its rows against the
        labelled rows whose ``candidates`` (``(n_rows, k)`` node ids, ``-1`` pads: the answers the
        re-ranking will compare) hold it, over the features its own rows hold, each row counted
        ``sample_weight`` times; at least two distinct targets.

        A target that is no other row's candidate has no negatives to train against: it gets
        the margin of its positives (+1) everywhere; one whose rows hold no feature gets
        :data:`NO_TARGET_MARGIN`.
        """
        X, ids, candidates = _host_matrix(X), np.asarray(ids), np.asarray(candidates)
        if not sp.issparse(X):
            raise TypeError("the SVM of the candidates takes sparse rows (dense rows fit the SVM against every row)")
        if candidates.ndim != 2 or candidates.shape[0] != ids.shape[0]:
            raise ValueError(f"candidates must be of shape ({ids.shape[0]}, k), got {candidates.shape}")
        X = sp.csr_matrix(X, dtype=np.float32)
        classes = _training_targets(ids)
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        coef, intercept = _candidate_svms(X, ids, candidates, classes, n_classes, weight, random_state)
        return cls(classes=classes.astype(np.int64), coef=coef, intercept=intercept, n_classes=int(n_classes))

    def rows_of(self, nodes: np.ndarray) -> np.ndarray:
        """The row of ``coef`` of each node id (``-1``: no training target, or no node)."""
        row = np.full(self.n_classes + 1, -1, dtype=np.int64)  # the last entry: node -1
        row[self.classes] = np.arange(self.classes.size)
        return row[np.where(nodes >= 0, nodes, self.n_classes)]

    def score(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        """``(n, k)`` float32: the margin of row ``i`` for candidate class ``nodes[i, j]``;
        :data:`NO_TARGET_MARGIN` for a node that was no training target and for ``-1``."""
        nodes = np.asarray(nodes)
        rows = self.rows_of(nodes)
        if not sp.issparse(self.coef):
            decision = X @ self.coef.T if sp.issparse(X) else np.asarray(X, dtype=np.float32) @ self.coef.T
            found = np.take_along_axis(np.asarray(decision, dtype=np.float32), np.maximum(rows, 0), axis=1)
        else:  # sparse weights: every target's decision for a chunk of rows at a time, bounding memory
            X = X if sp.issparse(X) else np.asarray(X, dtype=np.float32)
            transposed = self.coef.T.tocsr()
            found = np.zeros(nodes.shape, dtype=np.float32)
            step = max(1, _CHUNK_ENTRIES // max(1, self.classes.size))
            for start in range(0, nodes.shape[0], step):
                decision = X[start:start + step] @ transposed
                decision = decision.toarray() if sp.issparse(decision) else np.asarray(decision)
                chunk = np.maximum(rows[start:start + step], 0)
                found[start:start + step] = np.take_along_axis(decision, chunk, axis=1)
        found = found + self.intercept[np.maximum(rows, 0)]
        return np.where(rows >= 0, found, np.float32(NO_TARGET_MARGIN)).astype(np.float32)

    def export_module(self) -> torch.nn.Module:
        """:meth:`score` in torch ops, for export (:meth:`~._terms.Term.export_module`): the
        weights as buffers, dense (:class:`~._export_terms.DenseMarginScores`) or as the sparse
        weights' entries (:class:`~._export_terms.SparseMarginScores`)."""
        from ._export_terms import DenseMarginScores, SparseMarginScores

        kind = SparseMarginScores if sp.issparse(self.coef) else DenseMarginScores
        return kind(self.rows_of(np.arange(-1, self.n_classes)), self.coef, self.intercept)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The SVM as plain arrays, for saving without pickle (sparse weights as their CSR parts)."""
        if sp.issparse(self.coef):
            return {"classes": self.classes, "coef_data": self.coef.data, "coef_indices": self.coef.indices,
                    "coef_indptr": self.coef.indptr, "intercept": self.intercept}
        return {"classes": self.classes, "coef": self.coef, "intercept": self.intercept}

    @classmethod
    def from_arrays(cls, arrays: Any, tree: Any, n_features: int) -> FlatMargins:
        """The inverse of :meth:`to_arrays`, checked against the model it belongs to (its
        ``tree`` and ``n_features``; a ``ValueError`` naming what does not fit)."""
        n_classes = tree.n_classes
        dense, sparse = {"classes", "coef", "intercept"}, {"classes", "coef_data", "coef_indices", "coef_indptr",
                                                           "intercept"}
        if set(arrays) not in (dense, sparse):
            raise ValueError(f"expected the arrays {sorted(dense)} or {sorted(sparse)}, got {sorted(arrays)}")
        classes, intercept = arrays["classes"], arrays["intercept"]
        if classes.dtype != np.int64 or classes.ndim != 1 or classes.size < 2:
            raise ValueError(f"classes must be at least two int64 node ids, got {classes.dtype} of shape "
                             f"{classes.shape}")
        if classes.min() < 0 or classes.max() >= n_classes or (np.diff(classes) <= 0).any():
            raise ValueError(f"classes must be ascending distinct node ids of the tree's {n_classes} classes")
        if intercept.dtype != np.float32 or intercept.shape != (classes.size,):
            raise ValueError(f"intercept must be float32 of shape {(classes.size,)}, got {intercept.dtype} of "
                             f"shape {intercept.shape}")
        coef = (_sparse_coef_from_arrays(arrays, classes.size, n_features) if "coef_data" in arrays
                else _dense_coef_from_arrays(arrays["coef"], classes.size, n_features))
        if not (np.isfinite(coef.data if sp.issparse(coef) else coef).all() and np.isfinite(intercept).all()):
            raise ValueError("coef and intercept must be finite")
        return cls(classes=classes, coef=coef, intercept=intercept, n_classes=int(n_classes))


def _training_targets(ids: np.ndarray) -> np.ndarray:
    """The distinct node ids of the labelled rows (``ids >= 0``), ascending; a ``ValueError``
    with fewer than two (a flat SVM tells one target from another)."""
    classes = np.unique(ids[ids >= 0])
    if classes.size < 2:
        raise ValueError(f"a flat linear term needs at least two training targets, got {classes.size}")
    return classes


def _dense_coef_from_arrays(coef: np.ndarray, n_targets: int, n_features: int) -> np.ndarray:
    """A saved dense weight matrix, checked (a ``ValueError`` naming what does not fit)."""
    if coef.dtype != np.float32 or coef.shape != (n_targets, n_features):
        raise ValueError(f"coef must be float32 of shape {(n_targets, n_features)}, got {coef.dtype} of "
                         f"shape {coef.shape}")
    return np.ascontiguousarray(coef)


def _sparse_coef_from_arrays(arrays: Any, n_targets: int, n_features: int) -> sp.csr_matrix:
    """A saved sparse weight matrix from its CSR parts, checked before scipy reads them (a
    ``ValueError`` naming what does not fit)."""
    data, indices, indptr = arrays["coef_data"], arrays["coef_indices"], arrays["coef_indptr"]
    if data.dtype != np.float32 or data.ndim != 1:
        raise ValueError(f"coef_data must be 1-D float32, got {data.dtype} of shape {data.shape}")
    if indices.dtype.kind != "i" or indices.shape != data.shape:
        raise ValueError(f"coef_indices must be integers of coef_data's shape {data.shape}, got {indices.dtype} "
                         f"of shape {indices.shape}")
    if indptr.dtype.kind != "i" or indptr.shape != (n_targets + 1,):
        raise ValueError(f"coef_indptr must be integers of shape {(n_targets + 1,)}, got {indptr.dtype} of shape "
                         f"{indptr.shape}")
    if indptr[0] != 0 or indptr[-1] != data.size or (np.diff(indptr) < 0).any():
        raise ValueError(f"coef_indptr must rise from 0 to the {data.size} weights")
    if indices.size and (indices.min() < 0 or indices.max() >= n_features):
        raise ValueError(f"coef_indices must be feature ids below {n_features}")
    coef = sp.csr_matrix((data, indices, indptr), shape=(n_targets, n_features))
    if not coef.has_sorted_indices or not coef.has_canonical_format:
        raise ValueError("coef_indices must be ascending and distinct within each target")
    return coef


def _host_matrix(X: Any) -> Any:
    """Rows as the solvers take them: a torch tensor as a NumPy array (dense) or a scipy CSR
    matrix (sparse, the classifiers' own conversion), anything else as it is."""
    import torch

    if not isinstance(X, torch.Tensor):
        return X
    if X.layout == torch.strided:
        return X.detach().cpu().numpy()

    return sparse_tensor_to_csr(X)


#: Sparse weights are applied to this many (rows x targets) decisions at a time.
_CHUNK_ENTRIES = 2**22


def _candidate_svms(X: sp.csr_matrix, ids: np.ndarray, candidates: np.ndarray, classes: np.ndarray,
                    n_classes: int, weight: np.ndarray | None, random_state: Any) -> tuple[sp.csr_matrix, np.ndarray]:
    """The sparse ``(coef, intercept)`` of :meth:`FlatMargins.fit_on_candidates`, a row per class."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    labelled = np.flatnonzero(ids >= 0)
    # Which rows train which target: its own rows and the rows it is a candidate of, each once.
    row = np.concatenate([labelled, np.repeat(labelled, candidates.shape[1])])
    node = np.concatenate([ids[labelled], candidates[labelled].reshape(-1)])
    keep = node >= 0
    members = sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.int32), (node[keep], row[keep])),
                            shape=(n_classes, ids.shape[0]))
    members.sum_duplicates()
    members.sort_indices()
    parts, intercept = [], np.ones(classes.size, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # as in _linear_svm
        _ignore_target_type_warning()
        for i, target in enumerate(classes):
            rows = members.indices[members.indptr[target]:members.indptr[target + 1]]
            positive = ids[rows] == target
            subset = X[rows]  # sliced once: its positives' features, then its columns
            features = np.unique(subset[positive].indices)
            if positive.all() or not features.size:
                # Nothing to tell it from (the positives' margin, +1), or nothing to tell it by
                # (its rows are empty: the margin of a class that was no target).
                parts.append((np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)))
                intercept[i] = np.float32(1.0 if positive.all() else NO_TARGET_MARGIN)
                continue
            svm = LinearSVC(random_state=random_state)
            svm.fit(subset[:, features], positive.astype(np.int64),
                    sample_weight=None if weight is None else weight[rows])
            parts.append((features, svm.coef_[0].astype(np.float32)))
            intercept[i] = np.float32(svm.intercept_[0])
    indptr = np.concatenate([[0], np.cumsum([f.size for f, _ in parts])])
    coef = sp.csr_matrix((np.concatenate([v for _, v in parts]), np.concatenate([f for f, _ in parts]), indptr),
                         shape=(classes.size, X.shape[1]))
    return coef, intercept


def _ignore_target_type_warning() -> None:
    """Inside ``warnings.catch_warnings()``: silence scikit-learn's guess that class ids are a
    regression target ("The number of unique classes is greater than 50% of the number of
    samples"), which a small fit with many classes triggers. The ids are classes by
    construction; the warning would reach the user from a model they never made."""
    warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%", category=UserWarning)



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
        _ignore_target_type_warning()
        svm.fit(X, ids, sample_weight=weight)
    coef, intercept = np.asarray(svm.coef_), np.asarray(svm.intercept_).reshape(-1)
    if classes.size == 2:  # one binary SVM: the first class's margin is the second's negated
        coef, intercept = np.concatenate([-coef, coef]), np.concatenate([-intercept, intercept])
    return coef, intercept


def _least_squares_svm(X: Any, ids: np.ndarray, classes: np.ndarray,
                       weight: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares SVM's ``(coef, intercept)`` of rows ``X`` labelled ``ids``, a row per
    class of ``classes`` (:func:`least_squares_margins` of each class's rows)."""
    column = np.searchsorted(classes, ids)
    members = sp.csr_matrix((np.ones(ids.size), (column, np.arange(ids.size))), shape=(classes.size, ids.size))
    return least_squares_margins(X, members, weight)


def least_squares_margins(X: Any, members: sp.spmatrix, weight: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares SVM of each class of ``members`` (a ``(classes, rows)`` 0/1 matrix: the
    rows of ``X`` each class holds, ``+1`` targets, every other row ``-1``): ridge regression of
    those targets, each row counted ``weight`` times, with an unpenalised intercept, as
    ``(coef, intercept)``, a row per class. The classes need not partition the rows (the
    path-level term solves every level's at once).

    One system solves every class: in the primal the ``(features, features)`` Gram matrix of
    the rows centred on their weighted mean (right-hand sides: each class's centred rows,
    summed), in the dual, where the rows are fewer than the features (text: thousands of
    features, hundreds of rows), the ``(rows, rows)`` one, by ``(A^T A + p I)^-1 A^T b = A^T (A
    A^T + p I)^-1 b`` with ``A`` the centred rows scaled by the square roots of their weights.
    The centred rows are never formed (the products are those of ``X`` less the mean's part),
    so sparse rows stay sparse; nor is the ``(rows, classes)`` target matrix in the primal.
    """
    n, d = X.shape
    w = np.ones(n) if weight is None else np.asarray(weight, dtype=np.float64)
    total = w.sum()
    if not total > 0:
        raise ValueError("a linear term needs training rows of positive weight")
    X = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    members = sp.csr_matrix(members, dtype=np.float64)
    mean = np.asarray(X.T @ w).reshape(-1) / total
    share = (members @ w) / total  # each class's weighted share of the rows: its mean target is 2 share - 1
    if n < d:
        x_mean = np.asarray(X @ mean).reshape(-1)
        gram = _dense(X @ X.T) - x_mean[:, None] - x_mean[None, :] + mean @ mean  # Xc Xc^T
        root = np.sqrt(w)
        gram *= root[:, None] * root[None, :]
        gram[np.diag_indices(n)] += LEAST_SQUARES_PENALTY
        targets = 2.0 * (members.T.toarray() - share)  # each class's centred +-1 targets
        alpha = scipy.linalg.solve(gram, root[:, None] * targets, assume_a="pos") * root[:, None]
        coef = _dense(X.T @ alpha).T - np.outer(alpha.sum(axis=0), mean)  # Xc^T alpha, a row per class
    else:
        weighted = sp.diags(w) @ X if sp.issparse(X) else X * w[:, None]
        class_sums = _dense(members @ weighted) - np.outer(share * total, mean)  # each class's centred rows
        gram = _dense(X.T @ weighted) - total * np.outer(mean, mean)
        gram[np.diag_indices(d)] += LEAST_SQUARES_PENALTY
        coef = scipy.linalg.solve(gram, 2.0 * class_sums.T, assume_a="pos").T
    intercept = (2.0 * share - 1.0) - coef @ mean
    return coef, intercept


def _dense(matrix: Any) -> np.ndarray:
    """A product that may be a scipy sparse matrix, as a NumPy array."""
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)
