"""Hierarchical metrics on ancestral paths.

All metrics first turn ``y_true`` and ``y_pred`` into node-id paths (see
:func:`~hiclass_parallel.metrics._paths.check_paths`) and then work with whole-array NumPy
operations on ``(n_samples, n_levels)`` arrays; the only Python loops are over levels.

Conventions shared by every function here:

- A sample's *node set* is the set of classes on its ancestral path, root excluded
  (Kiritchenko et al., 2005). A label at depth ``d`` has ``d + 1`` nodes.
- An *empty* path (all pads; e.g. a prediction that stops at the root) has no nodes.
- The *lowest common ancestor* (LCA) of the true and predicted node is the deepest node the
  two paths share; it is the implicit root when they differ at the top level already.
- Node identity is the node id (or, without a tree, the whole prefix), never the name.
"""

from __future__ import annotations

import math

import warnings
from typing import Any, Literal, NamedTuple

import numpy as np
from sklearn.exceptions import UndefinedMetricWarning

from ._paths import InputType, Unknown, check_paths

__all__ = [
    "LevelAccuracy",
    "exact_path_accuracy_score",
    "hierarchical_f1_score",
    "hierarchical_fbeta_score",
    "hierarchical_precision_score",
    "hierarchical_recall_score",
    "level_accuracy_score",
    "mean_tree_distance",
    "mistake_severity",
    "tree_distance",
]

Average = Literal["micro", "macro"]
ZeroDivision = Literal["warn"] | float


# ---------------------------------------------------------------------------- helpers
def _check_zero_division(zero_division: Any) -> None:
    if isinstance(zero_division, str):
        if zero_division != "warn":
            raise ValueError(f"zero_division must be 'warn', 0.0, 1.0 or np.nan, got {zero_division!r}")
        return
    if not (isinstance(zero_division, (int, float, np.number)) and (np.isnan(zero_division) or zero_division in (0, 1))):
        raise ValueError(f"zero_division must be 'warn', 0.0, 1.0 or np.nan, got {zero_division!r}")


def _zero_value(zero_division: Any) -> float:
    return 0.0 if isinstance(zero_division, str) else float(zero_division)


def _divide(num: np.ndarray, den: np.ndarray, zero_division: Any, what: str) -> np.ndarray:
    """``num / den`` with ``zero_division`` where ``den == 0``, warning as scikit-learn does."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    zero = den == 0
    out = np.divide(num, den, out=np.zeros(np.broadcast(num, den).shape), where=~zero)
    if zero.any():
        out[zero] = _zero_value(zero_division)
        if zero_division == "warn":
            warnings.warn(
                f"{what} is ill-defined and being set to 0.0; use zero_division to control this behaviour.",
                UndefinedMetricWarning,
                stacklevel=3,
            )
    return out


def _weighted_mean(values: np.ndarray, weight: np.ndarray | None) -> float:
    """Mean ignoring NaN entries (``zero_division=np.nan`` drops them), NaN if none is left."""
    keep = ~np.isnan(values)
    w = np.ones(values.shape[0]) if weight is None else weight
    total = float(w[keep].sum())
    if total == 0:
        return float("nan")
    return float(np.dot(values[keep], w[keep]) / total)


def _weighted_sum(values: np.ndarray, weight: np.ndarray | None) -> float:
    return float(values.sum()) if weight is None else float(np.dot(values, weight))


def _path_counts(true: np.ndarray, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: |true set|, |pred set| and |intersection| (= depth of the LCA + 1).

    In a tree two ancestral paths share exactly their common prefix, so the intersection of
    the node sets is the length of the common prefix of the id paths.
    """
    n_true = (true >= 0).sum(axis=1)
    n_pred = (pred >= 0).sum(axis=1)
    match = (true == pred) & (true >= 0)
    n_common = np.logical_and.accumulate(match, axis=1).sum(axis=1) if match.shape[1] else n_true * 0
    return n_true, n_pred, n_common


def _check_average(average: Any) -> None:
    if average not in ("micro", "macro"):
        raise ValueError(f"average must be 'micro' or 'macro', got {average!r}")


def _prf(
    y_true: Any,
    y_pred: Any,
    tree: Any,
    *,
    beta: float,
    average: str,
    pad_label: Any,
    input_type: str,
    sample_weight: Any,
    zero_division: Any,
    path_sep: str | None,
    unknown: str,
    warn_for: tuple[str, ...],
) -> tuple[float, float, float]:
    _check_average(average)
    _check_zero_division(zero_division)
    if not (isinstance(beta, (int, float, np.number)) and beta >= 0):
        raise ValueError(f"beta must be a non-negative number, got {beta!r}")
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    n_true, n_pred, n_common = _path_counts(true, pred)
    return _prf_from_counts(n_true, n_pred, n_common, weight, beta=beta, average=average,
                            zero_division=zero_division, warn_for=warn_for)


def _fbeta_denominator(common: Any, n_true: Any, n_pred: Any, b2: float) -> Any:
    """``(b2 |T| + |P|) / (1 + b2)`` written as ``|T & P| + (b2 |T - P| + |P - T|) / (1 + b2)``.

    F-beta is ``|T & P|`` over this. The usual form, ``(1 + b2) |T & P| / (b2 |T| + |P|)``,
    rounds its two sides differently and gave 1.0000000000000002 for a perfect prediction
    (beta=0.35); here a perfect prediction divides ``|T & P|`` by itself, the denominator is
    never below the numerator (so F <= 1), and a huge finite ``b2`` cannot overflow.
    """
    missed = np.maximum(np.subtract(n_true, common), 0)  # weighted sums may round below |T & P|
    extra = np.maximum(np.subtract(n_pred, common), 0)
    return common + missed * (b2 / (1 + b2)) + extra / (1 + b2)


def _prf_from_counts(
    n_true: np.ndarray,
    n_pred: np.ndarray,
    n_common: np.ndarray,
    weight: np.ndarray | None,
    *,
    beta: float,
    average: str,
    zero_division: Any,
    warn_for: tuple[str, ...],
) -> tuple[float, float, float]:
    """hP, hR, hF from per-sample node-set sizes |T|, |P|, |T & P| (shared by the DAG metrics)."""
    # beta * beta, not beta ** 2: a huge beta gives inf instead of OverflowError. F-beta tends
    # to recall as beta grows, so beta=inf (or a beta whose square overflows) is recall, not
    # the NaN of inf / inf.
    b2 = float(beta) * float(beta)
    recall_only = math.isinf(b2)
    # Only the metric asked for warns; the others are computed silently along the way.
    silent = 0.0 if zero_division == "warn" else zero_division
    zd = {k: zero_division if k in warn_for else silent for k in ("precision", "recall", "f-score")}
    if average == "micro":
        common = _weighted_sum(n_common, weight)
        sum_true = _weighted_sum(n_true, weight)
        sum_pred = _weighted_sum(n_pred, weight)
        p = _divide(common, sum_pred, zd["precision"], "Hierarchical precision (no predicted nodes)")
        r = _divide(common, sum_true, zd["recall"], "Hierarchical recall (no true nodes)")
        if recall_only:
            f = _divide(common, sum_true, zd["f-score"], "Hierarchical F-score with beta=inf (no true nodes)")
        else:
            f = _divide(common, _fbeta_denominator(common, sum_true, sum_pred, b2), zd["f-score"],
                        "Hierarchical F-score (no true and no predicted nodes)")
        return float(p), float(r), float(f)
    p = _divide(n_common, n_pred, zd["precision"], "Hierarchical precision of samples with an empty prediction")
    r = _divide(n_common, n_true, zd["recall"], "Hierarchical recall of samples with an empty true path")
    if recall_only:
        f = _divide(n_common, n_true, zd["f-score"], "Hierarchical F-score with beta=inf of samples with an empty true path")
    else:
        f = _divide(n_common, _fbeta_denominator(n_common, n_true, n_pred, b2), zd["f-score"],
                    "Hierarchical F-score of samples with empty true and predicted paths")
    return _weighted_mean(p, weight), _weighted_mean(r, weight), _weighted_mean(f, weight)


_COMMON_PARAMS = """    y_true : array-like of shape (n_samples,) or (n_samples, n_columns)
        True labels (at any depth; needs ``tree``), path strings (with ``path_sep``) or
        ancestral paths right-padded with ``pad_label``: arrays, lists of lists (ragged ones
        too), DataFrames of levels, tuples of names. NumPy, list, pandas, torch or CuPy
        (moved to the host once).
    y_pred : array-like of shape (n_samples,) or (n_samples, n_columns)
        Predicted labels or paths, as ``y_true``; an all-pad path is an empty prediction.
    tree : Tree, default=None
        The class tree. Needed for 1-D plain labels and to check that paths are valid.
        Without it, both inputs must be paths and a node is identified by its whole prefix.
    pad_label : object, default=None
        Padding value of label paths. ``None`` recognises ``""``, ``None``, ``-1`` and NaN.
    input_type : {"auto", "labels", "ids"}, default="auto"
        Whether values are labels or node ids; ``"auto"`` reads integer arrays as node ids
        when the tree's labels are not integers.
    path_sep : str, default=None
        1-D string labels are path strings, such as ``"Electronics/Cables"``, split on
        ``path_sep`` (as the estimators' ``path_sep`` reads them); no tree is then needed.
    unknown : {"warn", "ignore", "raise"}, default="warn"
        Labels holding classes the tree lacks (a held-out split with classes no training
        row had): each such class is a miss and its known ancestors are hits, as the label
        path says; ``"warn"`` says once how many rows held one
        (:class:`~hiclass_parallel.exceptions.UnknownClassWarning`), ``"raise"`` refuses
        them (:class:`~hiclass_parallel.exceptions.UnknownLabelError`)."""

_WEIGHT_PARAM = """    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights."""


def _doc(func):
    func.__doc__ = func.__doc__.replace("    {common}", _COMMON_PARAMS).replace("    {weight}", _WEIGHT_PARAM)
    return func


# ---------------------------------------------------------------------------- hP / hR / hF
@_doc
def hierarchical_precision_score(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    average: Average = "micro",
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
    zero_division: ZeroDivision = "warn",
) -> float:
    """Hierarchical precision hP (Kiritchenko et al.).

    With ``T_i`` and ``P_i`` the node sets of the true and predicted paths of sample ``i``
    (root excluded), ``average="micro"`` gives ``sum_i |T_i & P_i| / sum_i |P_i|`` and
    ``average="macro"`` the mean over samples of ``|T_i & P_i| / |P_i|``.

    Parameters
    ----------
    {common}
    {weight}
    average : {"micro", "macro"}, default="micro"
        ``"micro"`` sums intersections and set sizes over samples; ``"macro"`` averages the
        per-sample scores.
    zero_division : {"warn", 0.0, 1.0, np.nan}, default="warn"
        Value where the denominator is 0 (no predicted nodes: empty predictions). ``"warn"``
        acts as 0 and warns. With ``np.nan`` and ``"macro"``, such samples are left out of
        the average.

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> hierarchical_precision_score(["happy big dog", "cat"], ["big dog", "dog"], tree)
    0.6666666666666666
    """
    return _prf(
        y_true, y_pred, tree, beta=1.0, average=average, pad_label=pad_label, input_type=input_type,
        sample_weight=sample_weight, zero_division=zero_division, path_sep=path_sep, unknown=unknown,
        warn_for=("precision",),
    )[0]


@_doc
def hierarchical_recall_score(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    average: Average = "micro",
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
    zero_division: ZeroDivision = "warn",
) -> float:
    """Hierarchical recall hR (Kiritchenko et al.).

    ``average="micro"``: ``sum_i |T_i & P_i| / sum_i |T_i|``; ``average="macro"``: the mean
    over samples of ``|T_i & P_i| / |T_i|``, where ``T_i`` and ``P_i`` are the node sets of
    the true and predicted paths (root excluded).

    Parameters
    ----------
    {common}
    {weight}
    average : {"micro", "macro"}, default="micro"
        ``"micro"`` sums intersections and set sizes over samples; ``"macro"`` averages the
        per-sample scores.
    zero_division : {"warn", 0.0, 1.0, np.nan}, default="warn"
        Value where the denominator is 0 (empty true paths). ``"warn"`` acts as 0 and warns.

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> hierarchical_recall_score(["happy big dog", "cat"], ["big dog", "dog"], tree)
    0.5
    """
    return _prf(
        y_true, y_pred, tree, beta=1.0, average=average, pad_label=pad_label, input_type=input_type,
        sample_weight=sample_weight, zero_division=zero_division, path_sep=path_sep, unknown=unknown,
        warn_for=("recall",),
    )[1]


@_doc
def hierarchical_fbeta_score(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    beta: float,
    average: Average = "micro",
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
    zero_division: ZeroDivision = "warn",
) -> float:
    """Hierarchical F-beta score hF_beta (Kiritchenko et al.).

    ``hF_beta = (1 + beta**2) * hP * hR / (beta**2 * hP + hR)``, computed as scikit-learn
    does from counts: ``(1 + beta**2) * |T & P| / (beta**2 * |T| + |P|)``, which is 0 rather
    than undefined when nothing matches. ``"micro"`` sums the counts over samples first;
    ``"macro"`` averages the per-sample scores.

    Parameters
    ----------
    {common}
    {weight}
    beta : float
        Weight of recall: ``beta > 1`` favours recall, ``beta < 1`` precision, ``beta = 0``
        is precision alone.
    average : {"micro", "macro"}, default="micro"
    zero_division : {"warn", 0.0, 1.0, np.nan}, default="warn"
        Value where ``beta**2 * |T| + |P| == 0`` (both paths empty).

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> round(hierarchical_fbeta_score(["happy big dog", "cat"], ["big dog", "dog"], tree, beta=2.0), 4)
    0.5263
    """
    return _prf(
        y_true, y_pred, tree, beta=beta, average=average, pad_label=pad_label, input_type=input_type,
        sample_weight=sample_weight, zero_division=zero_division, path_sep=path_sep, unknown=unknown,
        warn_for=("f-score",),
    )[2]


@_doc
def hierarchical_f1_score(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    average: Average = "micro",
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
    zero_division: ZeroDivision = "warn",
) -> float:
    """Hierarchical F1 hF (Kiritchenko et al.): ``2 * hP * hR / (hP + hR)``.

    Per sample ``2 |T & P| / (|T| + |P|)``; ``"micro"`` sums the counts over samples first,
    ``"macro"`` averages the per-sample scores. This is what
    ``HierarchicalClassifier.score`` returns.

    Parameters
    ----------
    {common}
    {weight}
    average : {"micro", "macro"}, default="micro"
    zero_division : {"warn", 0.0, 1.0, np.nan}, default="warn"
        Value where ``|T| + |P| == 0`` (both paths empty).

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_paths([["animal", "dog"], ["toy", "dog toy"], ["animal", "cat"]])
    >>> y_true = [["animal", "dog"], ["animal", "cat"]]
    >>> y_pred = [["animal", "cat"], ["animal", ""]]
    >>> round(hierarchical_f1_score(y_true, y_pred, tree), 4)
    0.5714
    >>> round(hierarchical_f1_score(y_true, y_pred, tree, average="macro"), 4)
    0.5833

    Without a tree, a node is its whole path, so two nodes that share a name under
    different parents never match:

    >>> hierarchical_f1_score([["animal", "dog"]], [["toy", "dog"]])
    0.0
    """
    return _prf(
        y_true, y_pred, tree, beta=1.0, average=average, pad_label=pad_label, input_type=input_type,
        sample_weight=sample_weight, zero_division=zero_division, path_sep=path_sep, unknown=unknown,
        warn_for=("f-score",),
    )[2]


# ---------------------------------------------------------------------------- accuracies
class LevelAccuracy(NamedTuple):
    """Per-level accuracy, returned by :func:`level_accuracy_score`.

    Attributes
    ----------
    accuracy : ndarray of float of shape (n_levels,)
        Fraction of the samples whose true path reaches depth ``l`` whose predicted path has
        the same node at depth ``l``.
    support : ndarray of shape (n_levels,)
        Number of samples (sum of weights, if any) whose true path reaches depth ``l``.
    """

    accuracy: np.ndarray
    support: np.ndarray


@_doc
def level_accuracy_score(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    level: int | None = None,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
    zero_division: ZeroDivision = np.nan,
) -> LevelAccuracy | float:
    """Accuracy at each depth of the tree, over the samples whose true path reaches it.

    At depth ``l`` (0 = top level) the score is the fraction of samples with a true node at
    depth ``l`` whose prediction has the same node at depth ``l`` (and so, in a tree, the
    same ancestors). A prediction that stops above depth ``l`` counts as wrong there. This is
    the per-level recall; precision per level is in
    :func:`hierarchical_classification_report`.

    Parameters
    ----------
    {common}
    {weight}
    level : int, default=None
        Return only the accuracy at this depth (negative values count from the deepest
        level), as a float; useful with :func:`make_hierarchical_scorer`.
    zero_division : {"warn", 0.0, 1.0, np.nan}, default=np.nan
        Accuracy at depths no true path reaches (support 0).

    Returns
    -------
    LevelAccuracy or float
        ``(accuracy, support)``, each of shape (n_levels,), or a float when ``level`` is
        given. ``n_levels`` is ``tree.n_levels`` with a tree, else the widest input.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> acc, support = level_accuracy_score(["happy big dog", "small dog", "cat"], ["big dog", "big dog", "cat"], tree)
    >>> acc.tolist(), support.tolist()
    ([1.0, 0.5, 0.0], [3, 2, 1])
    >>> level_accuracy_score(["happy big dog", "cat"], ["big dog", "cat"], tree, level=0)
    1.0
    """
    _check_zero_division(zero_division)
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    reach = true >= 0
    correct = reach & (true == pred)
    if weight is None:
        support = reach.sum(axis=0)
        hits = correct.sum(axis=0)
    else:
        support = weight @ reach
        hits = weight @ correct
    n_levels = true.shape[1]
    if level is not None:
        if not -n_levels <= int(level) < n_levels:
            raise ValueError(f"level={level} is out of range for {n_levels} levels")
        lv = int(level) % n_levels
        return float(_divide(hits[lv], support[lv], zero_division, f"Accuracy at level {lv} (no true label reaches it)"))
    acc = _divide(hits, support, zero_division, "Accuracy at levels no true label reaches")
    return LevelAccuracy(acc, support)


@_doc
def exact_path_accuracy_score(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    normalize: bool = True,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
) -> float:
    """Fraction of samples whose predicted node is exactly the true node (whole path right).

    A prediction deeper or shallower than the true label counts as wrong; for partial
    credit use :func:`hierarchical_f1_score`.

    Parameters
    ----------
    {common}
    {weight}
    normalize : bool, default=True
        If False, return the number (sum of weights) of exact matches.

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> exact_path_accuracy_score(["happy big dog", "cat"], ["big dog", "cat"], tree)
    0.5
    """
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    exact = (true == pred).all(axis=1).astype(np.float64)
    if normalize:
        return _weighted_mean(exact, weight)
    return _weighted_sum(exact, weight)


# ---------------------------------------------------------------------------- distances
@_doc
def tree_distance(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
) -> np.ndarray:
    """Number of tree edges between each true and predicted node, via their LCA.

    ``distance = (depth_true - depth_lca) + (depth_pred - depth_lca)``, where the implicit
    root has depth -1, so two different top-level classes are 2 apart, and an empty
    prediction is ``depth_true + 1`` away from the true node. 0 means an exact match.

    Parameters
    ----------
    {common}

    Returns
    -------
    ndarray of int64 of shape (n_samples,)

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> tree_distance(["happy big dog", "small dog", "cat", "cat"], ["big dog", "happy big dog", "dog", ""], tree)
    array([1, 3, 2, 1])
    """
    true, pred, _ = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                path_sep=path_sep, unknown=unknown)
    n_true, n_pred, n_common = _path_counts(true, pred)
    return (n_true + n_pred - 2 * n_common).astype(np.int64)


@_doc
def mean_tree_distance(
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
    """Mean of :func:`tree_distance` over samples (lower is better; 0 = all exact).

    Parameters
    ----------
    {common}
    {weight}

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> mean_tree_distance(["happy big dog", "cat"], ["big dog", "dog"], tree)
    1.5
    """
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    n_true, n_pred, n_common = _path_counts(true, pred)
    return _weighted_mean((n_true + n_pred - 2 * n_common).astype(np.float64), weight)


def _node_heights(tree: Any) -> np.ndarray:
    """Height of every node: edges on the longest downward path to a leaf (leaves: 0).

    One vectorised step per level, deepest first: a parent is one above its highest child.
    """
    height = np.zeros(tree.n_classes, dtype=np.int64)
    depth = np.asarray(tree.depth)
    parents = np.asarray(tree.parents, dtype=np.int64)
    for level in range(tree.n_levels - 1, 0, -1):
        nodes = np.flatnonzero(depth == level)
        np.maximum.at(height, parents[nodes], height[nodes] + 1)
    return height


@_doc
def mistake_severity(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    height: Literal["true", "tree"] = "true",
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
    zero_division: ZeroDivision = "warn",
) -> float:
    """Mean height of the lowest common ancestor over mistakes (Bertinetto et al., 2020).

    A *mistake* is a sample whose predicted node differs from its true node (including
    predictions that stop above, or go below, the true node). Correct samples are left out,
    so this measures how bad the mistakes are, not how many there are. Lower is better.

    Bertinetto et al. use trees whose leaves all sit at one depth and true labels that are
    leaves; there "the height of the LCA" is unambiguous. For trees with leaves (and labels)
    at different depths, ``height`` chooses one of two precise definitions:

    ``"true"`` (default)
        Edges from the *true node* up to the LCA: ``depth(true) - depth(lca)``, with the
        implicit root at depth -1. It counts how many levels of the true path the
        prediction failed to reproduce, is 0 when the prediction is a descendant of the true
        node, and does not depend on the rest of the tree.
    ``"tree"``
        The usual height of the LCA node in ``tree``: the number of edges on the longest
        downward path from it to a leaf (a leaf has height 0; the implicit root has height
        ``tree.n_levels``). Needs ``tree``.

    Both equal Bertinetto et al.'s height when all true labels are leaves at the same depth.

    Parameters
    ----------
    {common}
    {weight}
    height : {"true", "tree"}, default="true"
        Which height of the LCA to average, as defined above.
    zero_division : {"warn", 0.0, 1.0, np.nan}, default="warn"
        Value when there are no mistakes.

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> y_true = ["happy big dog", "happy big dog", "small dog", "cat"]
    >>> y_pred = ["happy big dog", "small dog", "cat", "cat"]
    >>> mistake_severity(y_true, y_pred, tree)
    2.0
    >>> mistake_severity(y_true, y_pred, tree, height="tree")
    2.5
    """
    _check_zero_division(zero_division)
    if height not in ("true", "tree"):
        raise ValueError(f"height must be 'true' or 'tree', got {height!r}")
    if height == "tree" and tree is None:
        raise ValueError("height='tree' needs tree= to know the height of each node")
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    n_true, _, n_common = _path_counts(true, pred)
    mistake = ~(true == pred).all(axis=1)
    if height == "true":
        lca_height = (n_true - n_common).astype(np.float64)
    else:
        rows = np.arange(true.shape[0])
        lca = np.where(n_common > 0, true[rows, np.maximum(n_common - 1, 0)], -1)
        # index -1: the root; a class the tree lacks (an id past its own) has nothing known below it
        heights = np.concatenate([_node_heights(tree), [0, tree.n_levels]])
        lca_height = heights[np.where(lca >= tree.n_classes, tree.n_classes, lca)].astype(np.float64)
    w = mistake.astype(np.float64) if weight is None else weight * mistake
    total = float(w.sum())
    if total == 0:
        return float(_divide(0.0, 0.0, zero_division, "Mistake severity (there are no mistakes)"))
    return float(np.dot(lca_height, w) / total)
