"""Metrics of answers at any depth, and the losses that conformal risk control bounds.

An *answer* here is one node of the tree per sample, possibly internal, or the implicit root
("anything", an empty path): what
:class:`~hiclass_parallel.estimators.ConformalHierarchicalClassifier` returns. The answer
*covers* the truth when it lies on the true label's path (it is the true node or one of its
ancestors; the root covers everything): read as a set, the answer's subtree then holds the
truth for certain, whatever finer class a coarse label leaves open.

- :func:`coverage_score`: the fraction of covered rows;
- :func:`mean_answer_depth`: how specific the answers are (levels fixed: 0 for the root);
- :func:`leaf_answer_rate`, :func:`label_depth_answer_rate`: the fraction of answers that
  are leaves, and that are as deep as the label;
- :func:`conformal_risk`: the mean of a bounded loss (:func:`miss_loss`, whose mean is
  ``1 - coverage``, :func:`tree_distance_loss`, or a :class:`ConformalLoss` of your own);
- :func:`conformal_scorers`: all of them as scorers for ``cross_validate`` and ``GridSearchCV``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._hierarchical import _path_counts
from ._paths import InputType, Unknown, check_paths
from ._scorers import make_hierarchical_scorer

__all__ = [
    "ConformalLoss",
    "miss_loss",
    "tree_distance_loss",
    "resolve_loss",
    "loss_bound",
    "coverage_score",
    "mean_answer_depth",
    "leaf_answer_rate",
    "label_depth_answer_rate",
    "conformal_risk",
    "conformal_scorers",
]


# ---------------------------------------------------------------------------- losses
@runtime_checkable
class ConformalLoss(Protocol):
    """A loss of an answer node against the true node, for conformal risk control.

    Any callable ``loss(answer, truth, tree)`` will do, a plain function included. It is
    called with node-id arrays of one shape ``(n,)``: ``answer`` holds the answers (``-1``
    for the implicit root, "anything") and ``truth`` the true nodes (ids of ``tree``); it
    returns one float per row. It must be:

    - **bounded**: every value in ``[0, bound]``, where ``bound`` is the loss's attribute of
      that name if it has one, else 1. The bound enters the finite-sample correction
      (``B / (n + 1)``), so a tight one gives deeper answers;
    - **monotone**: for every true node, moving the answer up to one of its ancestors never
      raises the loss (so a larger cut-off, which answers higher, never raises the risk);
    - **zero at the root**, or at most the ``alpha`` asked for: the root's answer is the last
      resort, and the guarantee needs it to meet the target.

    The classifier checks the first two on the calibration rows (a violation is a named
    error) and warns when the third fails. Loop over levels, not rows: the loss is called
    once per level of the tree on all rows at once.

    Examples
    --------
    A loss that counts a miss only below the top level (a wrong top-level class is not a
    miss the user cares about; the root's answer still costs nothing):

    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.metrics import ConformalLoss, miss_loss
    >>> def deep_miss(answer, truth, tree):
    ...     deep = (answer >= 0) & (tree.depth[np.maximum(answer, 0)] > 0)
    ...     return np.where(deep, miss_loss(answer, truth, tree), 0.0)
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> isinstance(deep_miss, ConformalLoss)
    True
    >>> ids = tree.to_ids(["small dog", "big dog", "dog"])
    >>> deep_miss(ids, tree.to_ids(["big dog", "big dog", "cat"]), tree).tolist()
    [1.0, 0.0, 0.0]
    """

    def __call__(self, answer: np.ndarray, truth: np.ndarray, tree: Any) -> np.ndarray: ...


def _paths_of(nodes: np.ndarray, tree: Any) -> np.ndarray:
    """Ancestral paths of node ids, ``-1`` (the root) giving the empty path."""
    table = np.asarray(tree.paths)
    out = table[np.maximum(nodes, 0)]
    out[nodes < 0] = -1
    return out


def _covered(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Rows whose predicted path is a prefix of the true one (node-id paths, pads ``-1``)."""
    return ((pred == true) | (pred < 0)).all(axis=1)


def _distance_to_subtree(pred: np.ndarray, true: np.ndarray, n_levels: int) -> np.ndarray:
    """Edges from the true node to the answer's subtree, over ``2 * n_levels``: 0 when covered."""
    n_true, n_pred, n_common = _path_counts(true, pred)
    distance = np.where(n_common == n_pred, 0, n_pred + n_true - 2 * n_common)
    return distance.astype(np.float64) / (2.0 * max(int(n_levels), 1))


def _check_nodes(answer: Any, truth: Any, tree: Any) -> tuple[np.ndarray, np.ndarray]:
    answer = np.asarray(answer, dtype=np.int64)
    truth = np.asarray(truth, dtype=np.int64)
    if answer.shape != truth.shape or answer.ndim != 1:
        raise ValueError(f"answer and truth must be node ids of one shape (n,), got {answer.shape} and {truth.shape}")
    for name, ids, low in (("answer", answer, -1), ("truth", truth, 0)):
        bad = (ids < low) | (ids >= tree.n_classes)
        if bad.any():
            raise ValueError(
                f"{name} holds node ids out of range [{low}, {tree.n_classes}): {np.unique(ids[bad])[:5].tolist()}"
            )
    return answer, truth


def miss_loss(answer: Any, truth: Any, tree: Any) -> np.ndarray:
    """1 where the answer does not cover the true node, else 0: its mean is the miss rate.

    Parameters
    ----------
    answer : array-like of int of shape (n,)
        Answer node ids; ``-1`` is the implicit root, which covers everything.
    truth : array-like of int of shape (n,)
        True node ids.
    tree : Tree

    Returns
    -------
    ndarray of float64 of shape (n,)

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> truth = tree.to_ids(["small dog", "small dog", "dog"])
    >>> answer = tree.to_ids(["dog", "big dog", "small dog"])
    >>> miss_loss(answer, truth, tree).tolist()
    [0.0, 1.0, 1.0]
    """
    answer, truth = _check_nodes(answer, truth, tree)
    return (~_covered(_paths_of(answer, tree), _paths_of(truth, tree))).astype(np.float64)


miss_loss.bound = 1.0  # type: ignore[attr-defined]


def tree_distance_loss(answer: Any, truth: Any, tree: Any) -> np.ndarray:
    """Distance from the true node to the answer's subtree, over ``2 * tree.n_levels``.

    0 when the answer covers the truth (the truth lies in its subtree); otherwise the number
    of edges between the true node and the answer (through their lowest common ancestor, the
    implicit root counting as a node), divided by ``2 * n_levels``, the longest such path in
    a tree of that many levels, so the loss lies in [0, 1]. Moving a wrong answer up towards
    the common ancestor shortens the distance, and reaching it makes it 0: the loss is
    monotone, as conformal risk control needs. (The plain tree distance between two nodes
    is not: it grows again when a right answer moves up.) Its mean bounds how severe the
    mistakes are, rather than how many there are.

    Parameters
    ----------
    answer : array-like of int of shape (n,)
        Answer node ids; ``-1`` is the implicit root.
    truth : array-like of int of shape (n,)
        True node ids.
    tree : Tree

    Returns
    -------
    ndarray of float64 of shape (n,)

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> truth = tree.to_ids(["small dog", "small dog", "small dog"])
    >>> answer = tree.to_ids(["dog", "big dog", "cat"])
    >>> (tree_distance_loss(answer, truth, tree) * 2 * tree.n_levels).tolist()
    [0.0, 2.0, 3.0]
    """
    answer, truth = _check_nodes(answer, truth, tree)
    return _distance_to_subtree(_paths_of(answer, tree), _paths_of(truth, tree), tree.n_levels)


tree_distance_loss.bound = 1.0  # type: ignore[attr-defined]

#: The built-in losses by name.
LOSSES = {"miss": miss_loss, "tree_distance": tree_distance_loss}


def resolve_loss(loss: Any) -> Any:
    """The loss callable for a name (``"miss"``, ``"tree_distance"``) or a callable itself.

    Parameters
    ----------
    loss : {"miss", "tree_distance"} or callable

    Returns
    -------
    callable
        A :class:`ConformalLoss`.

    Examples
    --------
    >>> resolve_loss("miss") is miss_loss
    True
    """
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {sorted(LOSSES)} or a callable, got {loss!r}")
        return LOSSES[loss]
    if not callable(loss):
        raise TypeError(f"loss must be one of {sorted(LOSSES)} or a callable loss(answer, truth, tree), got {loss!r}")
    return loss


def loss_bound(loss: Any) -> float:
    """The bound ``B`` of a loss: its ``bound`` attribute, else 1.

    Parameters
    ----------
    loss : {"miss", "tree_distance"} or callable

    Returns
    -------
    float

    Examples
    --------
    >>> loss_bound("tree_distance")
    1.0
    """
    bound = getattr(resolve_loss(loss), "bound", 1.0)
    if isinstance(bound, bool) or not isinstance(bound, (int, float, np.integer, np.floating)):
        raise TypeError(f"the loss's bound attribute must be a positive number, got {bound!r}")
    bound = float(bound)
    if not (np.isfinite(bound) and bound > 0):
        raise ValueError(f"the loss's bound attribute must be a positive finite number, got {bound!r}")
    return bound


# ---------------------------------------------------------------------------- metrics
_COMMON = """y_true : array-like of shape (n_samples,) or (n_samples, n_levels)
        True labels at any depth (with ``tree``), node ids, or label paths.
    y_pred : array-like of shape (n_samples,) or (n_samples, n_levels)
        The answers, in the same forms: paths padded with ``pad_label`` (an all-pad row is
        the root's answer, "anything"), labels or node ids (``-1``: the root).
    tree : Tree, default=None
        The class tree; without it both inputs must be 2-D paths.
    pad_label : object, default=None
        The padding of label paths (see :func:`check_paths`).
    input_type : {"auto", "labels", "ids"}, default="auto"
        Whether the values are labels or node ids (see :func:`check_paths`).
    path_sep : str, default=None
        1-D string labels are path strings split on it (see :func:`check_paths`).
    unknown : {"warn", "ignore", "raise"}, default="warn"
        True labels holding classes the tree lacks: each such class is a node of its own
        under its known ancestors, which an answer above it covers (see :func:`check_paths`).
    sample_weight : array-like of shape (n_samples,), default=None"""


def _doc(func: Any) -> Any:
    func.__doc__ = func.__doc__.replace("{common}", _COMMON)
    return func


def _mean(values: np.ndarray, weight: np.ndarray | None) -> float:
    if weight is None:
        return float(values.mean())
    if weight.sum() == 0:
        raise ValueError("sample_weight sums to 0: a weighted mean needs at least one positive weight")
    return float(np.average(values, weights=weight))


@_doc
def coverage_score(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
) -> float:
    """Fraction of rows whose answer covers the truth (lies on the true label's path).

    Under ``semantics="terminal"`` the true node must be the answer or below it; under
    ``"partial"`` the answer must lie on the true label's path: both say the answer is the
    true node or one of its ancestors. The root's answer (an empty path) always covers.

    Parameters
    ----------
    {common}

    Returns
    -------
    float
        In [0, 1]; ``1 - conformal_risk(..., loss="miss")``.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> coverage_score(["small dog", "cat", "big dog"], [["dog", ""], ["", ""], ["dog", "small dog"]], tree)
    0.6666666666666666
    """
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    return _mean(_covered(pred, true).astype(np.float64), weight)


@_doc
def mean_answer_depth(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
) -> float:
    """Mean number of levels the answers fix: 0 for the root, 1 for a top-level class...

    ``y_true`` is checked but does not enter the value: it is there so that the function
    serves as a scorer beside the others.

    Parameters
    ----------
    {common}

    Returns
    -------
    float
        Higher means more specific answers.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> mean_answer_depth(["small dog", "cat"], [["dog", "small dog"], ["", ""]], tree)
    1.0
    """
    _, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                  sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    return _mean((pred >= 0).sum(axis=1).astype(np.float64), weight)


@_doc
def leaf_answer_rate(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
) -> float:
    """Fraction of answers that are leaves of the tree (right or wrong); needs ``tree``.

    Parameters
    ----------
    {common}

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> leaf_answer_rate(["small dog", "cat"], [["dog", "small dog"], ["dog", ""]], tree)
    0.5
    """
    if tree is None:
        raise ValueError("leaf_answer_rate needs tree=: only the tree knows which nodes are leaves")
    _, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                  sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    depth = (pred >= 0).sum(axis=1)
    last = pred[np.arange(pred.shape[0]), np.maximum(depth - 1, 0)]
    # An answer the tree lacks (an id past its own) is not one of its leaves.
    known = (depth > 0) & (last < tree.n_classes)
    leaf = known & np.asarray(tree.is_leaf)[np.where(known, last, 0)]
    return _mean(leaf.astype(np.float64), weight)


@_doc
def label_depth_answer_rate(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
) -> float:
    """Fraction of answers exactly as deep as the true label (right or wrong).

    With labels at the leaves this is the fraction of leaf answers; with coarser labels it
    says how often the answer is as specific as the label could check.

    Parameters
    ----------
    {common}

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> label_depth_answer_rate(["dog", "cat"], [["dog", "small dog"], ["dog", ""]], tree)
    0.5
    """
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    same = (pred >= 0).sum(axis=1) == (true >= 0).sum(axis=1)
    return _mean(same.astype(np.float64), weight)


@_doc
def conformal_risk(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    loss: Any = "miss",
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
) -> float:
    """The realised risk: the mean loss of the answers, the quantity conformal risk control bounds.

    Parameters
    ----------
    {common}
    loss : {"miss", "tree_distance"} or callable, default="miss"
        :func:`miss_loss` (the mean is ``1 - coverage``), :func:`tree_distance_loss`
        (normalised by ``2 * tree.n_levels``, or twice the paths' width without a tree), or
        a :class:`ConformalLoss` (needs ``tree``).

    Returns
    -------
    float
        Lower is better.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> y_true, y_pred = ["small dog", "cat"], [["dog", "big dog"], ["", ""]]
    >>> conformal_risk(y_true, y_pred, tree)
    0.5
    >>> conformal_risk(y_true, y_pred, tree, loss="tree_distance")  # 2 edges of 4, once in 2 rows
    0.25
    """
    func = resolve_loss(loss)
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    if func is miss_loss:
        values = (~_covered(pred, true)).astype(np.float64)
    elif func is tree_distance_loss:
        values = _distance_to_subtree(pred, true, tree.n_levels if tree is not None else pred.shape[1])
    else:
        if tree is None:
            raise ValueError("conformal_risk with a loss of your own needs tree=: the loss reads node ids of the tree")
        rows = np.arange(pred.shape[0])
        last_pred = pred[rows, np.maximum((pred >= 0).sum(axis=1) - 1, 0)]
        last_pred = np.where((pred >= 0).any(axis=1), last_pred, -1)
        last_true = true[rows, np.maximum((true >= 0).sum(axis=1) - 1, 0)]
        lacking = np.flatnonzero((last_true >= tree.n_classes) | (last_pred >= tree.n_classes))
        if lacking.size:
            raise ValueError(
                f"conformal_risk with a loss of your own reads node ids of the tree, but rows "
                f"{lacking[:5].tolist()} ({lacking.size} in all) hold classes the tree lacks; score them with "
                "loss='miss' or 'tree_distance', or leave those rows out"
            )
        values = np.asarray(func(last_pred.astype(np.int64), last_true.astype(np.int64), tree), dtype=np.float64)
        if values.shape != (pred.shape[0],):
            raise ValueError(f"the loss returned shape {values.shape}, expected ({pred.shape[0]},): one value per row")
    return _mean(values, weight)


def conformal_scorers(loss: Any = "miss") -> dict[str, Any]:
    """The answer metrics as scorers, for ``scoring=`` of ``cross_validate`` or ``GridSearchCV``.

    Parameters
    ----------
    loss : {"miss", "tree_distance"} or callable, default="miss"
        The loss of the ``"neg_risk"`` scorer.

    Returns
    -------
    dict of str to HierarchicalScorer
        ``"coverage"``, ``"mean_answer_depth"``, ``"leaf_answer_rate"``,
        ``"label_depth_answer_rate"`` (greater is better) and ``"neg_risk"`` (the risk,
        negated). Each reads the tree and the pad label from the fitted estimator.

    Examples
    --------
    >>> sorted(conformal_scorers())
    ['coverage', 'label_depth_answer_rate', 'leaf_answer_rate', 'mean_answer_depth', 'neg_risk']
    """
    resolve_loss(loss)
    return {
        "coverage": make_hierarchical_scorer(coverage_score),
        "mean_answer_depth": make_hierarchical_scorer(mean_answer_depth),
        "leaf_answer_rate": make_hierarchical_scorer(leaf_answer_rate),
        "label_depth_answer_rate": make_hierarchical_scorer(label_depth_answer_rate),
        "neg_risk": make_hierarchical_scorer(conformal_risk, greater_is_better=False, loss=loss),
    }
