"""Answers with a guarantee: conformal risk control over the class tree.

:class:`ConformalHierarchicalClassifier` wraps a :class:`HierarchicalClassifier` (fitted, or
fitted here on part of the rows) and answers each row with the deepest node on its most
probable path that it can vouch for: with ``loss="miss"``, the answer covers the truth (the
true node is the answer or below it) on at least ``1 - alpha`` of new rows, on average over
exchangeable data. The recipe is the hierarchical example of conformal risk control
(Angelopoulos, Bates, Fisch, Lei and Schuster, "Conformal Risk Control", ICLR 2024):

1. from the model's distribution over the answers (:meth:`HierarchicalClassifier.predict_answer_proba`)
   the probability of every node's subtree (:func:`subtree_proba`: one sparse product, node
   marginals summed up the tree). Under the sibling partition, with stop scores matching the
   semantics, a subtree's probability is the probability of reaching its node
   (:func:`reach_log_proba`), so only the nodes on the most probable answer's path are
   needed: the classifier's exact decoding and the groups along its path, O(depth) groups per
   row instead of every class (the full sum stays the reference, and the route of the level
   partition);
2. the cut-off ``lambda``: start at the most probable answer and walk up its ancestors while
   the subtree's probability is at most ``lambda``; the answer is the deepest ancestor whose
   subtree holds more (the implicit root, "anything", if none does). A larger ``lambda``
   answers higher, so the loss of every row is non-increasing in ``lambda``;
3. ``lambda`` from held-out calibration rows: the smallest with
   ``n / (n + 1) * risk(lambda) + B / (n + 1) <= alpha`` (``risk``: the mean loss on the ``n``
   calibration rows, ``B``: the loss's bound). Then the expected loss on a new row is at
   most ``alpha`` (the paper's Theorem 1).

The split follows MAPIE's split-conformal design: ``cv="prefit"`` takes a fitted classifier
and calibrates on all the rows given to :meth:`~ConformalHierarchicalClassifier.fit`;
``cv="split"`` holds out ``calibration_size`` rows, fits a clone of the classifier on the
others, and calibrates on the held-out rows, which nothing else ever sees.

Everything runs on arrays of all rows at once; the only Python loops are over the levels of
the tree and over chunks of rows (to bound the memory of ``(rows, classes)`` probabilities).
"""

from __future__ import annotations

import copy
import warnings
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, _fit_context, clone
from sklearn.utils import _safe_indexing, check_random_state
from sklearn.utils._param_validation import Interval, RealNotInt, StrOptions
from sklearn.utils.validation import _num_samples, check_is_fitted

from ..exceptions import NonMonotoneLossError, UnsupportedEstimatorError
from ..labels._paths import as_host_labels, labels_to_ids
from ..metrics._conformal import loss_bound, mean_answer_depth, resolve_loss
from ..metrics._paths import tree_label_paths
from ..metrics._weights import check_sample_weight
from ..ops.best_first import best_first_paths
from ..ops.decode import best_paths
from ..ops.sibling_paths import expand_rows, path_rows, segment_logsumexp, sibling_plan
from .answer import held_out_view
from .classifier import HierarchicalClassifier
from .multilabel import MultiLabelHierarchicalClassifier

__all__ = [
    "ConformalHierarchicalClassifier",
    "NonMonotoneLossError",
    "UnsupportedEstimatorError",
    "subtree_proba",
    "reach_log_proba",
    "conformal_cutoff",
]

#: Floats of ``(rows, classes)`` probabilities held at once while predicting in chunks.
_CHUNK_FLOATS = 2**24

#: Rounding allowed when the losses are checked for monotonicity (in units of the bound).
_MONOTONE_TOL = 1e-9


# ---------------------------------------------------------------------------- the arrays
def _ancestor_matrix(tree: Any) -> sp.csr_matrix:
    """Sparse ``(C, C)``: entry ``(c, a)`` is 1 when ``a`` is ``c`` or one of its ancestors."""

    def build() -> sp.csr_matrix:
        paths = np.asarray(tree.paths)
        rows, cols = np.nonzero(paths >= 0)
        data = np.ones(rows.size, dtype=np.float32)
        return sp.csr_matrix((data, (rows, paths[rows, cols])), shape=(tree.n_classes, tree.n_classes))

    return tree.cached((__name__, "ancestor_matrix"), build)


def subtree_proba(answer_proba: Any, tree: Any) -> np.ndarray:
    """Probability of every node's subtree: the sum of the answer probabilities under it.

    Parameters
    ----------
    answer_proba : array-like of shape (n_samples, n_classes)
        One distribution over the answers per row, in node-id order, as
        :meth:`HierarchicalClassifier.predict_answer_proba` gives it (leaves only under
        ``semantics="partial"``, every node under ``"terminal"``).
    tree : Tree

    Returns
    -------
    ndarray of float32 of shape (n_samples, n_classes)
        Column ``a``: the probability that the answer is ``a`` or lies below it. A parent's
        value is at least each child's; the top-level nodes' values sum to the row's total.

    Notes
    -----
    One product with the sparse ancestor matrix of the tree (``(c, a)`` set when ``a`` is
    ``c`` or an ancestor of it), built once per tree: cost O(rows x classes x depth), no
    loop over rows or nodes.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.estimators.conformal import subtree_proba
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> p = np.zeros((1, 4), dtype=np.float32)
    >>> p[0, tree.to_ids(["small dog", "big dog", "cat"])] = [0.5, 0.3, 0.2]
    >>> dict(zip(tree.labels.tolist(), subtree_proba(p, tree)[0].astype(float).round(2).tolist()))
    {'dog': 0.8, 'small dog': 0.5, 'big dog': 0.3, 'cat': 0.2}
    """
    proba = np.asarray(answer_proba, dtype=np.float32)
    if proba.ndim != 2 or proba.shape[1] != tree.n_classes:
        raise ValueError(
            f"answer_proba must have shape (n_samples, {tree.n_classes}) for a tree of {tree.n_classes} classes, "
            f"got {proba.shape}"
        )
    # dense @ sparse: scipy computes it as (A.T @ P.T).T, one pass over the matrix's entries.
    return np.asarray(proba @ _ancestor_matrix(tree), dtype=np.float32)


def _answer_chains(answer_proba: np.ndarray, tree: Any) -> tuple[np.ndarray, np.ndarray]:
    """The path of each row's most probable answer and its nodes' subtree probabilities.

    Returns ``nodes`` (int64 ``(n, L)``, padded with -1) and ``mass`` (float64 ``(n, L)``,
    ``-inf`` at the pads), the mass non-increasing along each row (rounding in the sums could
    otherwise leave a child a hair above its parent).
    """
    _check_decidable(~np.isfinite(answer_proba).all(axis=1))
    start = np.argmax(answer_proba, axis=1)
    nodes = np.asarray(tree.paths, dtype=np.int64)[start]
    mass_all = subtree_proba(answer_proba, tree)
    mass = np.take_along_axis(mass_all, np.maximum(nodes, 0), axis=1).astype(np.float64)
    mass[nodes < 0] = -np.inf
    return nodes, np.minimum.accumulate(mass, axis=1)


def _check_decidable(bad: np.ndarray) -> None:
    """A named error for rows whose scores hold NaN or inf (``bad``: one bool per row)."""
    if bad.any():
        rows = np.flatnonzero(bad)
        raise ValueError(
            f"the classifier's answer probabilities hold NaN or inf in {rows.size} row(s), e.g. row {int(rows[0])}: "
            "its scores are not finite (a diverged model?); no answer can be vouched for"
        )


def reach_log_proba(score: Any, paths: Any, tree: Any, stop: bool) -> Any:
    """Log-probability of reaching each node of the paths, under the sibling partition.

    The sum of the conditional log-probabilities (each node's score against its siblings',
    the stop column included when ``stop``) from the top level down to the node. Under the
    sibling partition, with stop scores that match the semantics (``stop=False`` with
    leaf answers, ``stop=True`` with answers at every node), the softmax of each group sums
    to 1 over its children and its stop, so ``exp`` of this value is the probability of the
    node's subtree: the same number :func:`subtree_proba` sums from every answer below it.
    Only the groups along the paths are scored: ``O(depth x siblings)`` per row.

    Parameters
    ----------
    score : callable
        ``score(rows, columns) -> scores`` on torch tensors, as
        :func:`~hiclass_parallel.ops.best_first.best_first_paths` takes it (columns index the
        full score vector: the classes, then the stop columns).
    paths : torch.Tensor of int64 of shape (n_rows, n_levels)
        Node-id paths, padded with -1.
    tree : Tree
    stop : bool
        Whether the score vector has stop columns.

    Returns
    -------
    torch.Tensor of shape (n_rows, n_levels)
        Float64; ``-inf`` at the pads.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.groups import node_log_probs
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> scores = torch.randn(1, 9)
    >>> reach = reach_log_proba(lambda r, c: scores[r, c], torch.tensor([[0, 3, 7]]), tree, stop=False)
    >>> full = node_log_probs(scores, tree, "sibling")[0, [0, 3, 7]]
    >>> bool(torch.allclose(reach[0].float(), full, atol=1e-6))
    True
    """
    import torch


    plan = sibling_plan(tree, stop)
    paths = torch.as_tensor(paths, dtype=torch.int64)
    depth = (paths >= 0).sum(dim=1)
    last = paths.gather(1, (depth - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
    last = torch.where(depth > 0, last, torch.full_like(last, -1))
    # One softmax row per node on each path: its sibling group, and the node as the target.
    sample, group, target = path_rows(plan, last, terminal=False)
    entry, column, _ = expand_rows(plan, group)
    values = score(sample[entry], column).to(torch.float64)
    lse = segment_logsumexp(values, entry, group.shape[0])
    own = values[column == target[entry]]  # exactly one per softmax row, in row order
    out = torch.full(paths.shape, -torch.inf, dtype=torch.float64, device=paths.device)
    # path_rows lists each path's nodes top-down, path after path: a node's level is its
    # position within its path's run.
    start = torch.cumsum(depth, 0) - depth
    level = torch.arange(sample.shape[0], device=paths.device) - start[sample]
    out[sample, level] = own - lse
    return torch.cumsum(out, dim=1)  # -inf pads stay -inf: they follow the path's nodes


def _sibling_route(classifier: Any) -> bool:
    """Whether a node's subtree probability is its reach probability for this classifier
    (:func:`reach_log_proba`): a :class:`HierarchicalClassifier` of the sibling partition
    whose stop scores match its semantics."""
    return (isinstance(classifier, HierarchicalClassifier) and getattr(classifier, "partition_", None) == "sibling"
            and bool(classifier.stop_) == (classifier.semantics == "terminal"))


def _sibling_chains(classifier: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_answer_chains` of the rows of ``X`` for a classifier of :func:`_sibling_route`:
    the model's best path (its exact decoding, as ``predict_answer_proba``'s argmax) and the
    reach probabilities of its nodes, scoring only the groups on that path."""
    import dataclasses


    # The model's own most probable answer, whatever decoding rule predict is set to.
    decoder = dataclasses.replace(classifier._decoder(), decoding="best")
    tree, stop, semantics = decoder.tree, decoder.stop, decoder.semantics
    if decoder.model_route() != "exhaustive":  # scores on demand: the search and the path's groups
        def on_hidden(hidden: Any) -> tuple[Any, Any]:
            score = decoder.net.module_.scorer(hidden)
            paths, _ = best_first_paths(score, hidden.shape[0], tree, stop=stop, semantics=semantics, like=hidden)
            return paths, reach_log_proba(score, paths, tree, stop)

        paths, reach = decoder.per_batch(decoder.rows(X), on_hidden, hidden=True)
    else:
        def on_scores(scores: Any) -> tuple[Any, Any]:
            paths, _ = best_paths(scores, tree, partition="sibling", stop=stop, semantics=semantics)
            return paths, reach_log_proba(lambda r, c: scores[r, c], paths, tree, stop)

        paths, reach = decoder.per_batch(decoder.rows(X), on_scores)
    nodes = paths.astype(np.int64, copy=False)
    # An undecidable row (NaN or +inf scores) decodes to the empty path.
    _check_decidable((nodes[:, 0] < 0) | np.isnan(reach).any(axis=1))
    mass = np.where(nodes >= 0, np.exp(reach), -np.inf)
    return nodes, np.minimum.accumulate(mass, axis=1)


def _chain_losses(nodes: np.ndarray, truth: np.ndarray, tree: Any, loss: Any, bound: float) -> np.ndarray:
    """Loss of each answer a row can get: column 0 the root's, column ``j + 1`` that of the
    chain's node at depth ``j`` (pads repeat the deepest node's). Checked: within
    ``[0, bound]`` and non-increasing as the answer moves up."""
    n, n_levels = nodes.shape
    out = np.empty((n, n_levels + 1), dtype=np.float64)
    out[:, 0] = _call_loss(loss, np.full(n, -1, dtype=np.int64), truth, tree)
    for depth in range(n_levels):  # one call per level, on all rows at once
        out[:, depth + 1] = out[:, depth]
        live = nodes[:, depth] >= 0
        if live.any():
            out[live, depth + 1] = _call_loss(loss, nodes[live, depth], truth[live], tree)
    bad = ~np.isfinite(out) | (out < -_MONOTONE_TOL * bound) | (out > bound * (1 + _MONOTONE_TOL))
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise NonMonotoneLossError(
            f"the loss gave {out[row, col]!r} for row {int(row)}, outside [0, {bound}] (its bound): a loss for "
            "conformal risk control must be finite and within [0, bound]; set a bound attribute on the loss"
        )
    rising = out[:, :-1] > out[:, 1:] + _MONOTONE_TOL * bound
    if rising.any():
        row, col = (int(v) for v in np.argwhere(rising)[0])
        upper = "the root" if col == 0 else repr(tree.labels[nodes[row, col - 1]])
        raise NonMonotoneLossError(
            f"the loss is not monotone: on calibration row {row} (true node {tree.labels[truth[row]]!r}) the answer "
            f"{upper} costs {out[row, col]!r}, more than its descendant {tree.labels[nodes[row, col]]!r} "
            f"({out[row, col + 1]!r}); moving an answer up the tree must never raise the loss"
        )
    return out


def _call_loss(loss: Any, answer: np.ndarray, truth: np.ndarray, tree: Any) -> np.ndarray:
    values = np.asarray(loss(answer, truth, tree), dtype=np.float64)
    if values.shape != answer.shape:
        raise ValueError(
            f"the loss returned shape {values.shape} for {answer.shape[0]} rows; it must return one value per row"
        )
    return values


def conformal_cutoff(mass: Any, losses: Any, alpha: float, bound: float = 1.0) -> tuple[float, float]:
    """The conformal risk control cut-off ``lambda`` from calibration rows.

    The smallest ``lambda`` such that ``n / (n + 1) * risk(lambda) + bound / (n + 1) <= alpha``,
    where ``risk(lambda)`` is the mean calibration loss when each row answers with the
    deepest node of its chain whose mass exceeds ``lambda``. The risk is a step function,
    so the smallest such ``lambda`` is one of the masses (or ``-inf``); it is found by one
    sort of all ``(row, node)`` masses and a cumulative sum of the loss changes.

    Parameters
    ----------
    mass : array-like of shape (n, n_levels)
        Per calibration row, the subtree probability of each node of its chain from the top
        level down, non-increasing, ``-inf`` past the chain's end.
    losses : array-like of shape (n, n_levels + 1)
        Per row, the loss of answering the root (column 0) and each chain node (column
        ``j + 1`` for depth ``j``; past the chain's end, the last node's), non-increasing as
        the answer moves up (towards column 0).
    alpha : float
        The target risk.
    bound : float, default=1.0
        The bound ``B`` of the loss.

    Returns
    -------
    lambda_ : float
        The cut-off; ``-inf``: the most probable answer already meets the target (always
        answer it); ``inf``: no cut-off does, with these rows (always answer the root).
    risk : float
        The calibration risk at ``lambda_``.

    Examples
    --------
    Four calibration rows on a chain of two levels (masses top-down), missed (loss 1) when
    they answer at depth 1 and covered above:

    >>> import numpy as np
    >>> mass = np.array([[0.9, 0.6], [0.8, 0.7], [0.95, 0.4], [0.7, 0.5]])
    >>> losses = np.array([[0, 0, 1]] * 4, dtype=float)
    >>> conformal_cutoff(mass, losses, alpha=0.45)   # 4/5 * risk + 1/5 <= 0.45: risk <= 5/16
    (0.6, 0.25)
    """
    mass = np.asarray(mass, dtype=np.float64)
    losses = np.asarray(losses, dtype=np.float64)
    n = mass.shape[0]
    if n == 0:
        raise ValueError("conformal_cutoff needs at least one calibration row")
    if losses.shape != (n, mass.shape[1] + 1):
        raise ValueError(
            f"losses must have shape ({n}, {mass.shape[1] + 1}) for mass of shape {mass.shape}, got {losses.shape}"
        )

    def meets(risk: np.ndarray | float) -> np.ndarray:
        # A hair of slack: risks that are sums of k / n must not miss an exact tie with alpha.
        return n / (n + 1) * np.asarray(risk) + bound / (n + 1) <= alpha + 1e-12

    start = float(losses[:, -1].mean())  # every row at its most probable answer
    if meets(start):
        return -np.inf, start
    live = np.isfinite(mass)
    # Excluding chain node j (mass <= lambda) moves the answer one level up: column j+1 -> j.
    change = (losses[:, :-1] - losses[:, 1:])[live]
    values = mass[live]
    order = np.argsort(values, kind="stable")
    values = values[order]
    risk = start + np.cumsum(change[order]) / n
    risk = risk[np.searchsorted(values, values, side="right") - 1]  # ties: all of them excluded at once
    ok = meets(risk)
    if not ok.any():
        return np.inf, float(losses[:, 0].mean())
    first = int(np.argmax(ok))
    return float(values[first]), float(risk[first])


def _answers_at(nodes: np.ndarray, mass: np.ndarray, cutoff: float) -> np.ndarray:
    """Each row's deepest chain node with mass above ``cutoff`` (-1, the root, if none)."""
    count = (mass > cutoff).sum(axis=1)  # a prefix of the chain: mass never grows downwards
    rows = np.arange(nodes.shape[0])
    return np.where(count > 0, nodes[rows, np.maximum(count - 1, 0)], -1)


# ---------------------------------------------------------------------------- the estimator
def _last_step(estimator: Any) -> Any:
    from sklearn.pipeline import Pipeline

    while isinstance(estimator, Pipeline):
        estimator = estimator.steps[-1][1]
    return estimator


def _truth_ids(classifier: Any, y: Any) -> np.ndarray:
    """Node ids of labels ``y`` as the classifier reads them (its own label form: path strings
    with ``path_sep``, name paths where names repeat, labels at any depth)."""
    targets = getattr(classifier, "targets_", None)
    values = targets.read(y) if hasattr(targets, "read") else as_host_labels(y, classifier.pad_label_)
    return labels_to_ids(values, classifier.tree_, classifier.pad_label_)


def _check_supported(estimator: Any) -> None:
    """Refuse estimators without one answer per row on a tree, naming them."""
    last = _last_step(estimator)
    inner = getattr(last, "classifier", last)  # a ClassTextClassifier holds the classifier
    name = type(last).__name__
    if isinstance(inner, MultiLabelHierarchicalClassifier) or isinstance(last, MultiLabelHierarchicalClassifier):
        raise UnsupportedEstimatorError(
            f"ConformalHierarchicalClassifier needs one answer per row on a tree; {type(inner).__name__} predicts "
            "label sets (and may stand on a hierarchy with several parents), which is not supported: use a "
            "HierarchicalClassifier"
        )
    if not (callable(getattr(last, "predict_answer_proba", None)) and callable(getattr(last, "fit", None))):
        raise UnsupportedEstimatorError(
            f"ConformalHierarchicalClassifier wraps a HierarchicalClassifier (or a Pipeline or ClassTextClassifier "
            f"ending in one), which gives each row a distribution over the tree's answers (predict_answer_proba); "
            f"got {name}"
        )


class ConformalHierarchicalClassifier(MetaEstimatorMixin, ClassifierMixin, BaseEstimator):
    """The deepest answer that holds the truth at a guaranteed rate (conformal risk control).

    For each row, walk up from the classifier's most probable answer until the subtree's
    probability exceeds a cut-off ``lambda``, and answer that node (the implicit root,
    "anything", if even the top level falls short). ``lambda`` is chosen on calibration
    rows so that, on new rows exchangeable with them, the expected loss is at most
    ``alpha``: with ``loss="miss"``, the answer covers the true node (is it, or one of its
    ancestors) on at least ``1 - alpha`` of the rows, on average. The guarantee is
    marginal (over rows, not per class or per row), holds for any model, good or bad (a
    worse model gets vaguer answers, not fewer covered ones), and needs no assumption on
    the data beyond exchangeability of the calibration and the new rows. See
    ``docs/conformal.md``.

    Parameters
    ----------
    estimator : HierarchicalClassifier, Pipeline or ClassTextClassifier, default=None
        The classifier: a :class:`HierarchicalClassifier`, or a ``Pipeline`` (or
        :class:`ClassTextClassifier`) ending in one, so that its transformers are fitted on
        the training rows only. ``None`` means ``HierarchicalClassifier()``. Its
        ``semantics`` decides the answers: leaves and their ancestors under ``"partial"``,
        any node under ``"terminal"`` (which needs stop scores). Multi-label classifiers and
        hierarchies with several parents are refused (:class:`UnsupportedEstimatorError`).
    alpha : float, default=0.1
        The target risk, in (0, 1): with ``loss="miss"``, the miss rate (1 - coverage).
    loss : {"miss", "tree_distance"} or callable, default="miss"
        What is bounded. ``"miss"``: 1 when the answer does not cover the truth
        (:func:`~hiclass_parallel.metrics.miss_loss`). ``"tree_distance"``: the distance
        from the true node to the answer's subtree over ``2 * n_levels``
        (:func:`~hiclass_parallel.metrics.tree_distance_loss`), to bound how severe the
        mistakes are rather than how many. A callable ``loss(answer, truth, tree)`` of
        your own must follow :class:`~hiclass_parallel.metrics.ConformalLoss` (bounded,
        non-increasing as the answer moves up); such a model cannot be saved without pickle.
    cv : {"split", "prefit"}, default="split"
        ``"split"``: :meth:`fit` holds out ``calibration_size`` rows, fits a clone of
        ``estimator`` on the others, and calibrates on the held-out rows. ``"prefit"``:
        ``estimator`` is already fitted (on other rows!) and every row given to :meth:`fit`
        calibrates a copy of it (refitting ``estimator`` afterwards leaves the answers as
        they were).
    calibration_size : "auto", float or int, default="auto"
        Rows held out with ``cv="split"``: ``"auto"`` is 20% of the rows, at most 2,000; a
        float in (0, 1) a fraction; an int a number of rows.
    random_state : int, RandomState instance or None, default=None
        Draws the calibration rows of ``cv="split"``.

    Attributes
    ----------
    estimator_ : estimator
        The fitted classifier (with ``cv="prefit"``, a copy of ``estimator``: the cut-off
        belongs to the model it was calibrated for).
    lambda_ : float
        The calibrated cut-off on the subtree probability (``-inf``: always the most
        probable answer; ``inf``: always the root).
    calibration_risk_ : float
        The mean loss of the answers on the calibration rows, at ``lambda_``.
    n_calibration_ : int
        Number of calibration rows.
    calibration_indices_ : ndarray of int64 or None
        With ``cv="split"``, the positions in ``X`` of the calibration rows (the classifier
        was fitted on all the others); ``None`` with ``cv="prefit"``.
    semantics_ : str
        The classifier's ``semantics`` at calibration (prediction checks it is unchanged).
    loss_bound_ : float
        The bound ``B`` of the loss.
    tree_ : Tree
        The classifier's tree.
    classes_ : ndarray of shape (n_classes,)
        The classifier's classes.
    pad_label_ : hashable
        The classifier's pad label: an all-pad path is the root's answer.

    See Also
    --------
    hiclass_parallel.metrics.coverage_score, hiclass_parallel.metrics.conformal_risk,
    hiclass_parallel.metrics.conformal_scorers : how the answers score.
    save_conformal, load_conformal : saving without pickle.

    Notes
    -----
    The cut-off is the smallest ``lambda`` with ``n / (n + 1) * risk(lambda) + B / (n + 1)
    <= alpha`` (``n`` calibration rows, ``risk`` their mean loss, ``B`` the loss's bound).
    The ``B / (n + 1)`` term pays for the finite sample; when ``alpha < B / (n + 1)`` no
    cut-off qualifies, every answer is the root, and a warning says how many rows are
    needed. For the miss loss this is split conformal prediction: the mean coverage lies in
    ``[1 - alpha, 1 - alpha + 1 / (n + 1))`` when the subtree probabilities have no ties.

    The guarantee needs the calibration rows to reach the classifier as new rows do. Put a
    text vectorizer inside ``estimator`` (a ``Pipeline``), so that it is fitted on the
    training rows only; sparse features made before the split lose, in the calibration rows,
    the features no training row has (as the classifier's own ``calibration`` does), which
    comes close but is not exact.

    The answers start from the model's own most probable answer
    (``predict_answer_proba``'s argmax): class prototypes, ``decoding`` and
    ``predict_confidence``'s calibration are not used. Prediction sets with nodes at
    several levels are not offered (one node per row).

    Examples
    --------
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import ConformalHierarchicalClassifier, HierarchicalClassifier
    >>> from hiclass_parallel.metrics import coverage_score
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=1500, n_features=8, branching=3, depth=2, random_state=0)
    >>> model = ConformalHierarchicalClassifier(
    ...     HierarchicalClassifier(tree, max_epochs=5, random_state=0), alpha=0.1, random_state=0,
    ... ).fit(X[:1000], y[:1000])
    >>> model.n_calibration_
    200
    >>> answers = model.predict(X[1000:])
    >>> answers.shape
    (500, 2)
    >>> bool(coverage_score(y[1000:], answers, tree) > 0.8)
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        "estimator": "no_validation",  # checked in fit, with an error naming the estimator
        "alpha": [Interval(Real, 0, 1, closed="neither")],
        "loss": [StrOptions({"miss", "tree_distance"}), callable],
        "cv": [StrOptions({"split", "prefit"})],
        "calibration_size": [StrOptions({"auto"}), Interval(RealNotInt, 0, 1, closed="neither"),
                             Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        estimator: Any = None,
        *,
        alpha: float = 0.1,
        loss: Any = "miss",
        cv: str = "split",
        calibration_size: str | float | int = "auto",
        random_state: Any = None,
    ):
        self.estimator = estimator
        self.alpha = alpha
        self.loss = loss
        self.cv = cv
        self.calibration_size = calibration_size
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ConformalHierarchicalClassifier:
        """Fit the classifier (``cv="split"``) and calibrate the cut-off on rows it never saw.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
            Features, as the classifier (or the pipeline) takes them.
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            Labels at any depth of the tree, or label paths.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the rows in training the classifier (``cv="split"``: the training
            rows' weights are passed to its ``fit``; to a ``Pipeline``'s last step). The
            calibration counts every row once: the guarantee is about new rows as they come,
            not weighted. Every weight is checked as the classifier checks them (a NaN,
            negative, infinite or complex one is an error naming it), the calibration rows'
            too.

        Returns
        -------
        self : ConformalHierarchicalClassifier

        Raises
        ------
        UnsupportedEstimatorError
            The estimator gives no single answer on a tree (a multi-label classifier).
        NonMonotoneLossError
            A loss of your own rose as an answer moved up, or left ``[0, bound]``.

        Warns
        -----
        UserWarning
            When no cut-off meets ``alpha`` with these calibration rows (too few for
            ``alpha``, or a loss whose root answer costs more than ``alpha``): every answer
            is then the root.
        """
        estimator = HierarchicalClassifier() if self.estimator is None else self.estimator
        _check_supported(estimator)
        loss = resolve_loss(self.loss)
        bound = loss_bound(loss)
        n = _num_samples(X)
        if isinstance(y, (list, tuple)) or hasattr(y, "__len__"):
            if len(y) != n:
                raise ValueError(f"X has {n} rows but y has {len(y)}")
        if self.cv == "prefit":
            if sample_weight is not None:
                raise ValueError("sample_weight weighs the rows that train the classifier; with cv='prefit' no row "
                                 "trains it (the calibration counts every row once): fit the classifier with them")
            check_is_fitted(_last_step(estimator))
            # A copy: the cut-off belongs to this model, and refitting (or training on) the
            # user's object afterwards must not put another model under it.
            fitted, cal_X, cal_y, cal_rows = copy.deepcopy(estimator), X, y, None
        else:
            cal_rows, train_rows = self._split(n)
            fitted = clone(estimator).fit(_safe_indexing(X, train_rows), _safe_indexing(y, train_rows),
                                          **self._weights(estimator, sample_weight, n, train_rows))
            cal_X, cal_y = self._calibration_rows(X, train_rows, cal_rows), _safe_indexing(y, cal_rows)
        _check_supported(fitted)
        classifier = self._classifier(fitted)
        truth = _truth_ids(classifier, cal_y)
        nodes, mass = self._chains(fitted, cal_X)
        losses = _chain_losses(nodes, truth, classifier.tree_, loss, bound)
        cutoff, risk = conformal_cutoff(mass, losses, self.alpha, bound)
        n_cal = nodes.shape[0]
        if cutoff == np.inf:
            need = int(np.ceil(bound / self.alpha)) - 1
            root_risk = float(losses[:, 0].mean())
            why = (f"{n_cal} calibration rows are too few for alpha={self.alpha} (the correction B/(n+1) alone "
                   f"exceeds it: at least {need} rows are needed)" if bound / (n_cal + 1) > self.alpha
                   else f"the loss of the root's answer averages {root_risk:.4g} on the calibration rows, above alpha")
            warnings.warn(f"no cut-off meets alpha={self.alpha}: {why}; every answer is the root", UserWarning,
                          stacklevel=2)
        # Everything lands on self together: a failed fit leaves a fitted model as it was.
        self.estimator_, self.lambda_, self.calibration_risk_ = fitted, float(cutoff), float(risk)
        self.n_calibration_, self.calibration_indices_ = int(n_cal), cal_rows
        self.semantics_, self.loss_bound_ = str(classifier.semantics), float(bound)
        return self

    def _split(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Calibration and training row positions, drawn once from ``random_state``."""
        size = self.calibration_size
        if size == "auto":
            n_cal = min(int(np.ceil(0.2 * n)), 2000)
        elif isinstance(size, Integral):
            n_cal = int(size)
        else:
            n_cal = int(np.ceil(size * n))
        if not 1 <= n_cal < n:
            raise ValueError(
                f"calibration_size={size!r} asks for {n_cal} calibration row(s) of {n}: the calibration and the "
                "training rows both need at least one"
            )
        order = check_random_state(self.random_state).permutation(n)
        return np.sort(order[:n_cal]).astype(np.int64), np.sort(order[n_cal:]).astype(np.int64)

    @staticmethod
    def _weights(estimator: Any, sample_weight: Any, n: int, train_rows: np.ndarray) -> dict[str, Any]:
        """The ``fit`` keyword carrying the training rows' weights (none without weights)."""
        from sklearn.pipeline import Pipeline

        if sample_weight is None:
            return {}
        # Every row's weight is checked as the classifier checks them (the calibration rows'
        # too, though they count once each): a NaN or negative weight is a mistake anywhere.
        weight = check_sample_weight(sample_weight, n)
        name = "sample_weight"
        while isinstance(estimator, Pipeline):  # a Pipeline takes its last step's weights by name
            name = f"{estimator.steps[-1][0]}__{name}"
            estimator = estimator.steps[-1][1]
        return {name: weight[train_rows]}

    def _calibration_rows(self, X: Any, train_rows: np.ndarray, cal_rows: np.ndarray) -> Any:
        """The calibration rows of ``X`` as the classifier will see new rows.

        Sparse features given to the classifier itself (a vectorizer fitted before the split,
        on the calibration rows too) hold, in the calibration rows, features no training row
        has: their weights are untrained, and such rows would look nothing like new ones,
        whose words unknown to the vectorizer are dropped. They are shown as new documents,
        as the classifier's own calibration shows its held-out rows: without those features,
        rescaled to the norm every row has. A ``Pipeline`` fits its vectorizer on the training
        rows only, so its raw rows are new documents already.
        """
        from sklearn.pipeline import Pipeline


        if sp.issparse(X) and not isinstance(self.estimator, Pipeline):
            return held_out_view(X, train_rows, cal_rows)
        return _safe_indexing(X, cal_rows)

    @staticmethod
    def _classifier(fitted: Any) -> Any:
        """The fitted tree classifier inside (a Pipeline's last step; a ClassTextClassifier's classifier)."""
        last = _last_step(fitted)
        return getattr(last, "classifier_", last)

    @staticmethod
    def _chains(fitted: Any, X: Any, route: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Chains and masses of the rows of X.

        ``route="auto"``: along the best path only where the subtree probabilities are reach
        probabilities (:func:`_sibling_route`), else (and with ``route="full"``, the
        reference) from the full distribution over the answers, in chunks of rows.
        """
        from sklearn.pipeline import Pipeline

        model = fitted
        while isinstance(model, Pipeline):
            X = model[:-1].transform(X) if len(model.steps) > 1 else X
            model = model.steps[-1][1]
        classifier = ConformalHierarchicalClassifier._classifier(model)
        if route == "auto" and _sibling_route(classifier):
            if classifier is not model:  # a ClassTextClassifier: its vectorizer first
                X = model._features(X)
            if _num_samples(X) == 0:
                raise ValueError("X has no rows")
            return _sibling_chains(classifier, X)
        tree = classifier.tree_
        n = _num_samples(X)
        step = max(1, _CHUNK_FLOATS // tree.n_classes)
        parts = [
            _answer_chains(model.predict_answer_proba(_safe_indexing(X, slice(start, min(start + step, n)))), tree)
            for start in range(0, n, step)
        ]
        if not parts:
            raise ValueError("X has no rows")
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    # ------------------------------------------------------------------ fitted state
    @property
    def classifier_(self) -> Any:
        """The fitted :class:`HierarchicalClassifier` inside ``estimator_``."""
        check_is_fitted(self, "estimator_")
        return self._classifier(self.estimator_)

    @property
    def tree_(self) -> Any:
        return self.classifier_.tree_

    @property
    def classes_(self) -> np.ndarray:
        return self.classifier_.classes_

    @property
    def pad_label_(self) -> Any:
        return self.classifier_.pad_label_

    @property
    def n_features_in_(self) -> int:
        check_is_fitted(self, "estimator_")
        return self.estimator_.n_features_in_

    # ------------------------------------------------------------------ prediction
    def predict_node(self, X: Any) -> np.ndarray:
        """Node id of each row's answer.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        nodes : ndarray of int64 of shape (n_samples,)
            Indices into ``classes_`` (and ``tree_``); ``-1`` is the implicit root: the
            model vouches for nothing more specific than "anything".
        """
        check_is_fitted(self, "lambda_")
        semantics = self.classifier_.semantics
        if semantics != self.semantics_:
            raise ValueError(
                f"the classifier's semantics is now {semantics!r}, but the cut-off was calibrated with "
                f"{self.semantics_!r}: set it back, or fit again to calibrate for {semantics!r}"
            )
        nodes, mass = self._chains(self.estimator_, X)
        return _answers_at(nodes, mass, self.lambda_)

    def predict(self, X: Any) -> np.ndarray:
        """The answer of each row as an ancestral path, in the classifier's own form.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        paths : ndarray of shape (n_samples, n_levels), or (n_samples,) with ``path_sep``
            As the classifier's ``predict`` writes its answers: names from the top level
            down to the answer, right-padded with ``pad_label_`` (an all-pad row is the
            root's answer, "anything"); with the classifier's ``path_sep``, one path string
            per row (``pad_label_`` for the root's answer). So the classifier's labels and
            metrics read them, and :meth:`score` scores them.
        """
        nodes = self.predict_node(X)
        classifier = self.classifier_
        strings = classifier._answers() if hasattr(classifier, "_answers") else None
        if strings is not None:
            return strings[nodes]  # index -1 is the pad: the root's answer
        table = np.asarray(self.tree_.paths)[np.maximum(nodes, 0)]
        table[nodes < 0] = -1
        names = classifier._path_lookup() if hasattr(classifier, "_path_lookup") else classifier._label_lookup()
        return names[table]

    def predict_labels(self, X: Any) -> np.ndarray:
        """The label of each row's answer (``pad_label_`` for the root's).

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        return self.classifier_._label_lookup()[self.predict_node(X)]

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean depth of the answers (levels: 0 for the root): how specific they are.

        The risk is held at ``alpha`` by the calibration, whatever the classifier, so a
        better classifier shows in deeper answers: this is what ``GridSearchCV`` (with
        ``alpha`` fixed) maximises by default. Use
        :func:`~hiclass_parallel.metrics.conformal_scorers` for coverage and risk.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            True labels, in any form the classifier's ``fit`` takes (checked against the
            tree, not used in the value).
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        float
        """
        from sklearn.utils.validation import check_consistent_length


        classifier = self.classifier_
        # y in any form the classifier's fit takes; a class the tree lacks (a held-out class no
        # training row had) is read as the classifier's score reads it, with one warning
        sep = getattr(getattr(classifier, "targets_", None), "sep", None)
        truth = tree_label_paths(y, self.tree_, pad_label=classifier.pad_label_, path_sep=sep)
        check_consistent_length(X, truth)
        nodes = self.predict_node(X)
        # Node-id paths, not labels: the answers' identity without a second label look-up (the
        # root, -1, is the empty path).
        paths = np.asarray(self.tree_.paths)
        answers = np.where(nodes[:, None] >= 0, paths[np.maximum(nodes, 0)], -1)
        return mean_answer_depth(truth, answers, input_type="ids", sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        tags.classifier_tags.multi_class = True
        tags.non_deterministic = self.random_state is None
        return tags
