"""Why an answer was given: the input features behind each step of a predicted path.

A :class:`HierarchicalClassifier` answers with a path, and every node on it won a softmax
group: its siblings (``partition="sibling"``) or its level (``"level"``), plus that group's
stop score when the model has stops. :func:`explain_predictions` says, for each node on each
row's answer, which features of the row raised the node's score most over its strongest
rival in that group, and by how much.

- **Exact** for a module that is linear up to its scores: the default text model
  (:class:`~hiclass_parallel.estimators.SparseMLP` with its default ``activation=None``) and
  :class:`~hiclass_parallel.estimators.MLP` with ``hidden_units=0``. There the score of a
  column is ``s_c(x) = sum_j x_j A_jc + a_c``, with ``A_jc = W_in[j] . w_c`` (the input row of
  feature ``j`` through the output row of ``c``; plus the class-text match term
  ``scale * m_j * f_cj`` where the model reads class text) and ``a_c = b_in . w_c + bias_c``.
  The margin over the rival ``r`` splits exactly into one contribution per feature of the row,
  ``x_j (A_jc - A_jr)``, and a bias share ``a_c - a_r``: summed, they are the margin.
- **Approximate** for any other module (a ReLU :class:`~hiclass_parallel.estimators.MLP`, a
  module of your own): integrated gradients of the margin along the straight line from the
  zero row to ``x`` (``steps`` midpoint evaluations). The bias share is then the margin of
  the zero row, and the contributions add up to the rest of the margin only up to the
  integral's error; :attr:`Explanation.exact` says which.

The answer explained is the one :meth:`~HierarchicalClassifier.predict` gives, re-ranking
included: :attr:`Explanation.terms` splits its final score into the model's log-probability
and the re-ranking terms' shares (the class prototypes' ``weight * similarity``, the flat
term's ``weight * margin`` and the path-level term's ``weight * summed margins``).

:func:`explain_classes` gives, per class, the features that raise it most over the rest of
its group in general, read from the weights. Both take a fitted classifier or a
:class:`~sklearn.pipeline.Pipeline` ending in one: the rows then go through the pipeline's
transformers, and the features are named by their ``get_feature_names_out`` (a
``TfidfVectorizer``'s words).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ..ops.groups import stop_columns
from .answer import PRIOR_TERMS, last_nodes
from .networks import MLP, SparseMLP
from .prediction import decode, host_rows, term_label

__all__ = ["ClassExplanation", "Explanation", "explain_classes", "explain_predictions"]

#: Rows explained per chunk: bounds the ``(rows, scores)`` arrays of the rival search.
_CHUNK = 256


# ---------------------------------------------------------------------------- results
@dataclasses.dataclass
class Explanation:
    """The explanation of each row's answer, step by step along its path (arrays, one row each).

    A *step* is a node on the answer's path, from the top level down, then, for an answer
    that ends at an internal node (``semantics="terminal"``), the stop score that ended it
    there. ``S`` is the number of steps of the deepest answer; shorter answers are padded
    (column ``-1``, NaN margins, feature ``-1``).

    Attributes
    ----------
    columns : ndarray of int64 of shape (n_samples, S)
        The score column each step explains: a node id, or a stop column (``>= n_classes``).
    rivals : ndarray of int64 of shape (n_samples, S)
        The strongest other column of the same softmax group (``-1``: the group has no other).
    margins : ndarray of float32 of shape (n_samples, S)
        Score of the column minus score of the rival.
    features : ndarray of int64 of shape (n_samples, S, top)
        The features that raised the column most over the rival, largest contribution first
        (``-1`` pads: a row with fewer non-zero features).
    contributions : ndarray of float32 of shape (n_samples, S, top)
        Their contributions to the margin.
    bias : ndarray of float32 of shape (n_samples, S)
        The share of the margin no feature carries (the biases; the zero row's margin for an
        approximate explanation).
    rest : ndarray of float32 of shape (n_samples, S)
        The margin less ``bias`` and the listed contributions: the other features' part (and,
        for an approximate explanation, the error of the integral).
    exact : bool
        Whether the contributions are exact (a module linear up to its scores).
    terms : dict of str to ndarray of shape (n_samples,)
        The answer's final score, split: ``"log_prob"`` (the model's), ``"prototypes"``,
        ``"flat"`` and ``"path"`` (the re-ranking terms' shares; 0 where the model has none),
        ``"total"``.
    column_names : ndarray of object of shape (n_scores,)
        A name per score column: the class's label, or ``"(stop at <label>)"``.
    feature_names : ndarray of object or None
        The input features' names (``None``: refer to them by index).
    """

    columns: np.ndarray
    rivals: np.ndarray
    margins: np.ndarray
    features: np.ndarray
    contributions: np.ndarray
    bias: np.ndarray
    rest: np.ndarray
    exact: bool
    terms: dict[str, np.ndarray]
    column_names: np.ndarray
    feature_names: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.columns.shape[0])

    def _feature(self, j: int) -> str:
        return str(self.feature_names[j]) if self.feature_names is not None else f"x{j}"

    def steps(self, row: int) -> list[dict[str, Any]]:
        """The steps of one row as plain records: ``node``, ``rival``, ``margin``, ``bias``,
        ``rest`` and ``features`` (a list of ``(name, contribution)``)."""
        out = []
        for s in np.flatnonzero(self.columns[row] >= 0):
            rival = int(self.rivals[row, s])
            keep = self.features[row, s] >= 0
            out.append({
                "node": self.column_names[self.columns[row, s]],
                "rival": None if rival < 0 else self.column_names[rival],
                "margin": float(self.margins[row, s]),
                "bias": float(self.bias[row, s]),
                "rest": float(self.rest[row, s]),
                "features": [(self._feature(j), float(c)) for j, c in
                             zip(self.features[row, s][keep], self.contributions[row, s][keep])],
            })
        return out

    def describe(self, row: int) -> str:
        """One row's explanation as text: a line per step, then the final score's terms."""
        lines = []
        for step in self.steps(row):
            if step["rival"] is None:
                lines.append(f"{step['node']} (alone in its softmax group: nothing to explain)")
                continue
            rival = f"over {step['rival']}"
            words = ", ".join(f"{name} {value:+.2f}" for name, value in step["features"])
            lines.append(f"{step['node']} {rival} by {step['margin']:+.2f}: {words} (bias {step['bias']:+.2f}, "
                         f"other features {step['rest']:+.2f})")
        terms = ", ".join(f"{name} {float(value[row]):+.3f}" for name, value in self.terms.items())
        kind = "exact" if self.exact else "approximate (integrated gradients)"
        return "\n".join(lines + [f"score: {terms} [{kind}]"])

    def plot(self, row: int = 0, top: int | None = None, axes: Any = None) -> Any:
        """Bar charts of one row's path: a panel per step, its top features' contributions.

        Parameters
        ----------
        row : int, default=0
        top : int, default=None
            Features shown per step (``None``: every one kept).
        axes : sequence of matplotlib Axes, default=None
            One per step; ``None`` makes a figure.

        Returns
        -------
        matplotlib.figure.Figure
        """
        import matplotlib.pyplot as plt  # optional dependency, loaded on use

        steps = self.steps(row)
        if axes is None:
            fig, axes = plt.subplots(len(steps), 1, figsize=(6, 1.2 + 1.1 * len(steps)), squeeze=False)
            axes = axes[:, 0]
        else:
            axes = list(np.ravel(axes))
            fig = axes[0].figure
        for ax, step in zip(axes, steps):
            features = step["features"][:top] if top else step["features"]
            names = [name for name, _ in features][::-1]
            values = [value for _, value in features][::-1]
            ax.barh(names, values, color=["tab:blue" if v >= 0 else "tab:red" for v in values])
            rival = "no rival" if step["rival"] is None else f"vs {step['rival']}"
            ax.set_title(f"{step['node']} ({rival}): margin {step['margin']:+.2f}", fontsize=9, loc="left")
            ax.tick_params(labelsize=8)
            ax.axvline(0, color="0.5", linewidth=0.5)
        fig.tight_layout()
        return fig


@dataclasses.dataclass
class ClassExplanation:
    """Per class, the features that raise its score most over the mean of its softmax group.

    Attributes
    ----------
    classes : ndarray of shape (n,)
        The classes' labels.
    features : ndarray of int64 of shape (n, top)
    weights : ndarray of float32 of shape (n, top)
        The score a unit of each feature adds to the class over its group's mean score.
    exact : bool
        Read from the weights (a linear module), or the mean gradient times the input of the
        rows given (any other module).
    feature_names : ndarray of object or None
    """

    classes: np.ndarray
    features: np.ndarray
    weights: np.ndarray
    exact: bool
    feature_names: np.ndarray | None = None

    def top(self, label: Any) -> list[tuple[str, float]]:
        """``(feature name, weight)`` of one class, largest first."""
        where = np.flatnonzero(self.classes == np.asarray(label, dtype=self.classes.dtype))
        if not where.size:
            raise KeyError(f"{label!r} is not one of the explained classes")
        i = int(where[0])
        names = self.feature_names
        return [(str(names[j]) if names is not None else f"x{j}", float(w))
                for j, w in zip(self.features[i], self.weights[i]) if j >= 0]


# ---------------------------------------------------------------------------- entry points
def explain_predictions(estimator: Any, X: Any, *, top: int = 5, feature_names: Any = None,
                        steps: int = 32) -> Explanation:
    """Explain each row's predicted answer, node by node along its path.

    Parameters
    ----------
    estimator : HierarchicalClassifier or Pipeline
        A fitted classifier, or a fitted pipeline ending in one (``X`` then goes through its
        transformers first).
    X : {array-like, sparse matrix, torch.Tensor} or what the pipeline takes
        The rows to explain.
    top : int, default=5
        Features kept per step, largest contribution first.
    feature_names : array-like of str, default=None
        The features' names; ``None``: the pipeline's ``get_feature_names_out()`` where it has
        one, else the classifier's ``feature_names_in_``, else none.
    steps : int, default=32
        Evaluations of the gradient for an approximate explanation (integrated gradients);
        unused where the explanation is exact.

    Returns
    -------
    Explanation

    Examples
    --------
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from sklearn.pipeline import make_pipeline
    >>> from hiclass_parallel.estimators import HierarchicalClassifier
    >>> from hiclass_parallel.estimators.explain import explain_predictions
    >>> texts = ["red apple", "green apple", "ripe banana", "yellow banana", "oak tree", "pine tree"] * 5
    >>> paths = [["fruit", "apple"], ["fruit", "apple"], ["fruit", "banana"], ["fruit", "banana"],
    ...          ["plant", "tree"], ["plant", "tree"]] * 5
    >>> model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(max_epochs=30, random_state=0))
    >>> model = model.fit(texts, paths)
    >>> why = explain_predictions(model, ["a ripe yellow banana"], top=2)
    >>> [step["node"] for step in why.steps(0)]
    ['fruit', 'banana']
    >>> sorted(name for name, _ in why.steps(0)[1]["features"])  # what raised "banana" most over "apple"
    ['ripe', 'yellow']
    >>> bool(abs(why.margins[0, 1] - why.bias[0, 1] - why.rest[0, 1] - why.contributions[0, 1].sum()) < 1e-4)
    True
    """
    clf, X, names = _unwrap(estimator, X, feature_names)
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise ValueError(f"top must be a positive int, got {top!r}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")

    decoder = clf._decoder()
    X = decoder.rows(X)
    paths, log_prob, _ = decode(decoder, X)
    answer = last_nodes(paths[:, None, :])[:, 0]
    terms = {"log_prob": log_prob.astype(np.float32)}
    zero = np.zeros(len(answer), dtype=np.float32)
    reranks = decoder.reranking is not None and decoder.decoding != "threshold"
    host = host_rows(X)
    terms["prototypes"] = (np.float32(decoder.weight) * decoder.prototypes.score(host, answer[:, None])[:, 0]
                           if reranks and decoder.weight else zero)
    for name in PRIOR_TERMS:  # each term's weighted score of the answer; 0 where it did not re-rank
        term, weight = decoder.terms.get(name, (None, 0.0))
        terms[term_label(name)] = (np.float32(weight) * term.score(host, answer[:, None])[:, 0]
                                   if reranks and term is not None else zero.copy())
    terms["total"] = sum((terms[name] for name in terms if name != "log_prob"), start=terms["log_prob"])

    columns = _step_columns(clf, paths, answer)
    groups = _column_groups(clf)
    linear = _linear_parts(clf.net_.module_)
    n, S = columns.shape
    out = {name: [] for name in ("rivals", "margins", "features", "contributions", "bias", "rest")}
    for start in range(0, n, _CHUNK):
        rows = X[start:start + _CHUNK]
        cols = columns[start:start + _CHUNK]
        scores = clf.decision_function(rows)
        rivals = _rivals(scores, cols, groups)
        margin = np.where(cols >= 0, _take(scores, cols) - _take(scores, rivals), np.nan).astype(np.float32)
        margin[rivals < 0] = np.nan
        if linear is not None:
            feats, contrib, bias = _exact_contributions(linear, rows, cols, rivals)
        else:
            feats, contrib, bias = _integrated_gradients(clf, rows, cols, rivals, steps)
        feats, contrib, total = _top_features(feats, contrib, top)
        feats[rivals < 0] = -1  # alone in its group: the softmax gives it everything, nothing to explain
        contrib[rivals < 0] = 0.0
        total[rivals < 0] = 0.0
        bias = np.where(rivals >= 0, bias, np.nan).astype(np.float32)
        for name, value in (("rivals", rivals), ("margins", margin), ("features", feats),
                            ("contributions", contrib), ("bias", bias), ("rest", margin - bias - total)):
            out[name].append(value)
    joined = {name: np.concatenate(parts) if parts else np.zeros((0, S)) for name, parts in out.items()}
    return Explanation(columns=columns, exact=linear is not None, terms=terms, column_names=_column_names(clf),
                       feature_names=names, **joined)


def explain_classes(estimator: Any, classes: Any = None, *, top: int = 10, X: Any = None,
                    feature_names: Any = None) -> ClassExplanation:
    """The features that raise each class most over its softmax group, in general.

    For a linear module (the default text model), read from the weights: a unit of feature
    ``j`` adds ``A_jc - mean_k A_jk`` to class ``c`` over the mean of its group's columns
    ``k`` (see the module notes). For other modules, the mean over the rows ``X`` of the
    gradient times the input of the same difference (approximate; ``X`` is then required).

    Parameters
    ----------
    estimator : HierarchicalClassifier or Pipeline
    classes : array-like, default=None
        Labels of the classes to explain; ``None``: every class (its cost is
        ``n_features x hidden units`` per class: give the classes you want on large trees).
    top : int, default=10
    X : rows, default=None
        Rows for the approximate route (through the pipeline's transformers).
    feature_names : array-like of str, default=None
        As in :func:`explain_predictions`.

    Returns
    -------
    ClassExplanation

    Examples
    --------
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from sklearn.pipeline import make_pipeline
    >>> from hiclass_parallel.estimators import HierarchicalClassifier
    >>> from hiclass_parallel.estimators.explain import explain_classes
    >>> texts = ["red apple", "green apple", "ripe banana", "yellow banana"] * 5
    >>> y = ["apple", "apple", "banana", "banana"] * 5
    >>> model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(max_epochs=30, random_state=0)).fit(texts, y)
    >>> explain_classes(model, ["banana"], top=1).top("banana")[0][0]
    'banana'
    """
    clf, X, names = _unwrap(estimator, X, feature_names, transform=X is not None)
    tree = clf.tree_
    ids = np.arange(tree.n_classes) if classes is None else tree.to_ids(np.asarray(classes, dtype=object)
                                                                         if not isinstance(classes, np.ndarray)
                                                                         else classes)
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    groups = _column_groups(clf)
    members = [np.flatnonzero(groups == groups[c]) for c in ids]
    linear = _linear_parts(clf.net_.module_)
    if linear is not None:
        weights = np.stack([_class_direction(linear, c, m) for c, m in zip(ids, members)]) if ids.size else \
            np.zeros((0, clf.n_features_in_), dtype=np.float32)
    else:
        if X is None:
            raise ValueError(
                f"{type(clf.net_.module_).__name__} is not linear up to its scores: explain_classes needs rows X "
                "to average the gradient over (an approximate explanation)")
        weights = _mean_gradient_directions(clf, clf._validate_X(X, reset=False), ids, members)
    k = min(top, weights.shape[1])
    order = np.argsort(-weights, axis=1, kind="stable")[:, :k]
    return ClassExplanation(classes=tree.labels[ids], features=order.astype(np.int64),
                            weights=np.take_along_axis(weights, order, axis=1).astype(np.float32),
                            exact=linear is not None, feature_names=names)


# ---------------------------------------------------------------------------- the model's structure
def _unwrap(estimator: Any, X: Any, feature_names: Any, transform: bool = True) -> tuple[Any, Any, Any]:
    """The fitted classifier, the rows as it takes them, and the features' names."""
    from sklearn.utils.validation import check_is_fitted

    names = None if feature_names is None else np.asarray(feature_names, dtype=object)
    if hasattr(estimator, "steps") and hasattr(estimator, "__getitem__"):  # a Pipeline
        head, clf = estimator[:-1], estimator[-1]
        if transform and X is not None:
            X = head.transform(X)
        if names is None:
            try:
                names = np.asarray(head.get_feature_names_out(), dtype=object)
            except (AttributeError, ValueError, TypeError):
                names = None  # a transformer without names: features by index
    else:
        clf = estimator
    if not hasattr(clf, "_decoder") or not hasattr(clf, "tree_"):
        raise TypeError(f"explanations need a fitted HierarchicalClassifier (or a Pipeline ending in one), "
                        f"got {type(clf).__name__}")
    check_is_fitted(clf)
    if hasattr(clf, "hierarchy_"):
        raise TypeError(f"{type(clf).__name__} answers with label sets; explanations follow one answer's path "
                        "(HierarchicalClassifier)")
    if names is None and hasattr(clf, "feature_names_in_"):
        names = np.asarray(clf.feature_names_in_, dtype=object)
    if names is not None and names.shape != (clf.n_features_in_,):
        raise ValueError(f"feature_names has {names.size} names, but the classifier has {clf.n_features_in_} "
                         "features")
    return clf, X, names


def _column_groups(clf: Any) -> np.ndarray:
    """The softmax group of every score column: the classes', then the stops' (stop ``g`` is
    column ``C + g - 1``, in group ``g``)."""
    tree, partition = clf.tree_, clf.partition_
    groups = np.asarray(tree.groups(partition), dtype=np.int64)
    if clf.stop_:
        groups = np.concatenate([groups, np.arange(1, tree.n_groups(partition), dtype=np.int64)])
    return groups


def _column_names(clf: Any) -> np.ndarray:
    """A readable name per score column."""
    tree = clf.tree_
    labels = tree.labels
    names = np.empty(clf.n_scores_, dtype=object)
    names[: tree.n_classes] = list(labels)
    if clf.stop_:
        stop_col = stop_columns(tree, clf.partition_)
        internal = np.flatnonzero(stop_col >= 0)
        if clf.partition_ == "sibling":
            for node in internal:
                names[stop_col[node]] = f"(stop at {labels[node]})"
        else:
            for d in range(1, tree.n_levels):
                names[tree.n_classes + d - 1] = f"(stop at depth {d - 1})"
    return names


def _step_columns(clf: Any, paths: np.ndarray, answer: np.ndarray) -> np.ndarray:
    """The columns each row's steps explain: its path's nodes, then the stop that ends an
    answer at an internal node (terminal semantics)."""
    columns = paths.astype(np.int64)
    if clf.stop_ and clf.semantics == "terminal":
        stop_col = stop_columns(clf.tree_, clf.partition_)
        ends = np.where(answer >= 0, stop_col[np.maximum(answer, 0)], -1)
        if (ends >= 0).any():
            depth = (paths >= 0).sum(axis=1)
            extra = np.full((paths.shape[0], paths.shape[1] + 1), -1, dtype=np.int64)
            extra[:, :-1] = columns
            extra[np.arange(paths.shape[0]), depth] = ends
            columns = extra
    return columns


def _take(scores: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return np.take_along_axis(scores, np.maximum(cols, 0), axis=1)


def _rivals(scores: np.ndarray, cols: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The best other column of each step's group (``-1``: none).

    Each step's group members are gathered and reduced in one segment pass over them (sibling
    groups are small: the work follows the path, not the tree); where the steps' groups are
    large (the level partition), every group's maximum is found by segment reductions over the
    columns ordered by group instead, the steps' own columns masked (a row's steps lie in
    different groups)."""
    order = np.argsort(groups, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(groups[order]) != 0])
    lengths = np.diff(np.r_[starts, order.size])
    valid = cols >= 0
    rows, steps = np.nonzero(valid)
    step_groups = groups[cols[valid]]
    sizes = lengths[step_groups]
    rivals = np.full(cols.shape, -1, dtype=np.int64)
    if sizes.sum() <= 4 * scores.shape[1] * max(1, scores.shape[0] // 8):
        if sizes.size == 0:
            return rivals
        first = np.cumsum(sizes) - sizes
        local = np.arange(int(sizes.sum())) - np.repeat(first, sizes)
        members = order[np.repeat(starts[step_groups], sizes) + local]
        values = scores[np.repeat(rows, sizes), members].astype(np.float32)
        values[members == np.repeat(cols[valid], sizes)] = -np.inf  # the step's own column
        best = np.maximum.reduceat(values, first)
        at = np.where(values == np.repeat(best, sizes), np.arange(values.size), values.size)
        pick = np.minimum.reduceat(at, first)
        found = np.where(np.isfinite(best), members[np.minimum(pick, values.size - 1)], -1)
        rivals[rows, steps] = found
        return rivals
    masked = scores.astype(np.float32, copy=True)
    masked[rows, cols[valid]] = -np.inf
    ordered = masked[:, order]
    best = np.maximum.reduceat(ordered, starts, axis=1)  # (n, G)
    at = np.where(ordered == np.repeat(best, lengths, axis=1), np.arange(order.size), order.size)
    first = np.minimum.reduceat(at, starts, axis=1)
    rival_of_group = np.where(np.isfinite(best), order[np.minimum(first, order.size - 1)], -1)
    rivals[rows, steps] = rival_of_group[rows, step_groups]
    return rivals


@dataclasses.dataclass
class _Linear:
    """A module linear up to its scores, as ``s_c(x) = x . (W_in @ w_c + text_c) + b_in . w_c + bias_c``."""

    w_in: torch.Tensor | None  # (n_features, hidden); None: no hidden layer (w_out is over the features)
    b_in: torch.Tensor | None
    w_out: torch.Tensor  # (n_scores, hidden or n_features)
    bias: torch.Tensor  # (n_scores,)
    text: sp.csr_matrix | None = None  # (n_scores, n_features): scale * m_j * f_cj


def _linear_parts(module: Any) -> _Linear | None:
    """The module's weights where it is linear up to its scores (``None`` otherwise)."""
    from torch import nn


    if isinstance(module, SparseMLP) and isinstance(module.activation, nn.Identity):
        head = module.head
        text = None
        if head.has_text:
            ptr, idx, val = (t.cpu().numpy() for t in (head.text_ptr, head.text_idx, head.text_val))
            vocabulary = module.vocabulary.cpu().numpy()
            match = (module.class_feature_scale * module.match_weight.detach().cpu().numpy()).astype(np.float32)
            text = sp.csr_matrix((val * match[idx], vocabulary[idx], ptr),
                                 shape=(head.weight.num_embeddings, module.n_features))
        return _Linear(module.input.embedding.weight.detach(), module.input.bias.detach(),
                       head.weight.weight.detach(), head.bias.weight.detach()[:, 0], text)
    if isinstance(module, MLP) and len(module.layers) == 1:
        layer = module.layers[0]
        return _Linear(None, None, layer.weight.detach(), layer.bias.detach())
    return None


def _csr(rows: Any) -> sp.csr_matrix:
    """Rows as a canonical float32 CSR matrix (dense rows keep their non-zeros)."""
    if isinstance(rows, torch.Tensor):
        rows = rows.to_dense().cpu().numpy() if rows.layout != torch.strided else rows.cpu().numpy()
    X = sp.csr_matrix(rows, dtype=np.float32)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


def _padded(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """``(n, M)`` feature ids (``-1`` pads) and values (0 pads) of each row's non-zeros."""
    lengths = np.diff(X.indptr)
    width = max(int(lengths.max()) if lengths.size else 0, 1)
    feats = np.full((X.shape[0], width), -1, dtype=np.int64)
    vals = np.zeros((X.shape[0], width), dtype=np.float32)
    row = np.repeat(np.arange(X.shape[0]), lengths)
    pos = np.arange(X.nnz) - np.repeat(X.indptr[:-1], lengths)
    feats[row, pos], vals[row, pos] = X.indices, X.data
    return feats, vals


def _exact_contributions(linear: _Linear, rows: Any, cols: np.ndarray,
                         rivals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's feature contributions ``x_j (A_jc - A_jr)`` over the row's non-zeros
    (``(n, S, M)`` with the feature ids), and the bias shares ``(n, S)``."""
    X = _csr(rows)
    feats, vals = _padded(X)
    has = (cols >= 0) & (rivals >= 0)
    c = torch.as_tensor(np.where(has, cols, 0))
    r = torch.as_tensor(np.where(has, rivals, 0))
    f = torch.as_tensor(np.maximum(feats, 0))
    w_out = linear.w_out
    diff = (w_out[c] - w_out[r]).to(torch.float32)  # (n, S, H)
    if linear.w_in is not None:
        inputs = linear.w_in[f].to(torch.float32)  # (n, M, H)
        per_unit = torch.bmm(inputs, diff.transpose(1, 2))  # (n, M, S)
        bias = diff @ linear.b_in.to(torch.float32)  # (n, S)
    else:  # no hidden layer: the output rows are over the features
        per_unit = torch.gather(diff, 2, f[:, None, :].expand(-1, diff.shape[1], -1)).transpose(1, 2)
        bias = torch.zeros(diff.shape[:2])
    bias = bias + (linear.bias[c] - linear.bias[r]).to(torch.float32)
    per_unit = per_unit.numpy().astype(np.float32, copy=False)
    if linear.text is not None:  # the class-text match, per feature of the row
        n, M = feats.shape
        S = cols.shape[1]
        fj = np.broadcast_to(np.maximum(feats, 0)[:, :, None], (n, M, S)).reshape(-1)
        at_c = np.asarray(linear.text[np.broadcast_to(c.numpy()[:, None, :], (n, M, S)).reshape(-1), fj]).reshape(n, M, S)
        at_r = np.asarray(linear.text[np.broadcast_to(r.numpy()[:, None, :], (n, M, S)).reshape(-1), fj]).reshape(n, M, S)
        per_unit = per_unit + (at_c - at_r).astype(np.float32)
    contrib = vals[:, :, None] * per_unit  # (n, M, S)
    contrib = np.where(has[:, None, :], contrib, 0.0).astype(np.float32)
    return feats, contrib.transpose(0, 2, 1), bias.numpy().astype(np.float32)


def _integrated_gradients(clf: Any, rows: Any, cols: np.ndarray, rivals: np.ndarray,
                          steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integrated gradients of each step's margin from the zero row (midpoint rule), over the
    row's non-zero features, and the zero row's margin as the bias share. The rows go through
    the module dense, a few at a time (a gradient is as wide as the input)."""
    module = clf.net_.module_
    device = next(module.parameters()).device
    X = _csr(rows)
    feats, vals = _padded(X)
    n, S = cols.shape
    has = (cols >= 0) & (rivals >= 0)
    per_unit = np.zeros((n, S, feats.shape[1]), dtype=np.float32)
    bias = np.zeros((n, S), dtype=np.float32)
    block = max(1, 2**22 // max(X.shape[1], 1))
    was_training = module.training
    module.eval()
    try:
        for lo in range(0, n, block):
            hi = min(n, lo + block)
            c = torch.as_tensor(np.where(has[lo:hi], cols[lo:hi], 0), device=device)
            r = torch.as_tensor(np.where(has[lo:hi], rivals[lo:hi], 0), device=device)
            at = torch.as_tensor(np.maximum(feats[lo:hi], 0), device=device)
            dense = torch.as_tensor(X[lo:hi].toarray(), device=device)
            with torch.no_grad():
                base = module(torch.zeros_like(dense))
                bias[lo:hi] = (base.gather(1, c) - base.gather(1, r)).cpu().numpy()
            total = torch.zeros(hi - lo, S, at.shape[1], device=device)
            for k in range(steps):
                point = ((k + 0.5) / steps * dense).requires_grad_(True)
                scores = module(point)
                margin = scores.gather(1, c) - scores.gather(1, r)  # (rows, S)
                for s in np.flatnonzero(has[lo:hi].any(axis=0)):
                    (g,) = torch.autograd.grad(margin[:, s].sum(), point, retain_graph=True)
                    total[:, s] += g.gather(1, at)
            per_unit[lo:hi] = (total / steps).cpu().numpy()
    finally:
        module.train(was_training)
    contrib = np.where(has[:, :, None], vals[:, None, :] * per_unit, 0.0).astype(np.float32)
    return feats, contrib, bias


def _top_features(feats: np.ndarray, contrib: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``top`` largest contributions of each step (``(n, S, top)``, ``-1`` / 0 pads) and
    their sum ``(n, S)``."""
    n, S, M = contrib.shape
    present = np.broadcast_to((feats >= 0)[:, None, :], contrib.shape)
    key = np.where(present, contrib, -np.inf)
    k = min(top, M)
    order = np.argsort(-key, axis=2, kind="stable")[:, :, :k]
    chosen = np.take_along_axis(np.broadcast_to(feats[:, None, :], contrib.shape), order, axis=2)
    values = np.take_along_axis(contrib, order, axis=2)
    kept = np.take_along_axis(present, order, axis=2)
    chosen = np.where(kept, chosen, -1)
    values = np.where(kept, values, 0.0).astype(np.float32)
    if k < top:  # fewer features than asked: pad to `top`
        chosen = np.concatenate([chosen, np.full((n, S, top - k), -1, dtype=np.int64)], axis=2)
        values = np.concatenate([values, np.zeros((n, S, top - k), dtype=np.float32)], axis=2)
    return chosen.astype(np.int64), values, values.sum(axis=2)


def _class_direction(linear: _Linear, c: int, members: np.ndarray) -> np.ndarray:
    """``A_jc - mean_k A_jk`` over every feature ``j`` (``k``: the columns of ``c``'s group)."""
    diff = (linear.w_out[c] - linear.w_out[torch.as_tensor(members)].mean(0)).to(torch.float32)
    per_unit = (linear.w_in.to(torch.float32) @ diff if linear.w_in is not None else diff).numpy()
    if linear.text is not None:
        text = np.asarray(linear.text[c].toarray()).ravel() - np.asarray(linear.text[members].mean(axis=0)).ravel()
        per_unit = per_unit + text
    return per_unit.astype(np.float32)


def _mean_gradient_directions(clf: Any, X: Any, ids: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """The mean over the rows ``X`` of ``x * grad (s_c - mean_k s_k)`` for each class ``c``."""
    module = clf.net_.module_
    device = next(module.parameters()).device
    dense = torch.as_tensor(_csr(X).toarray(), device=device)
    was_training = module.training
    module.eval()
    out = np.zeros((ids.size, dense.shape[1]), dtype=np.float32)
    try:
        for i, (c, m) in enumerate(zip(ids, members)):
            point = dense.clone().requires_grad_(True)
            scores = module(point)
            target = (scores[:, int(c)] - scores[:, torch.as_tensor(m, device=device)].mean(1)).sum()
            (g,) = torch.autograd.grad(target, point)
            out[i] = (g * dense).mean(0).cpu().numpy()
    finally:
        module.train(was_training)
    return out
