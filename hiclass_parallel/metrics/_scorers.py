"""Scorers: hierarchical metrics in scikit-learn's ``scoring=`` API.

A scorer is called as ``scorer(estimator, X, y)``. Ours call ``estimator.predict(X)``
(ancestral paths), find the class tree on the fitted estimator (``tree_``; for a
``Pipeline`` or a fitted search, on its final estimator) and its padding label
(``pad_label_``), and compare the paths with ``y`` given as plain labels or as paths.
An estimator with a fitted ``hierarchy_`` (:class:`~hiclass_parallel.estimators.MultiLabelHierarchicalClassifier`:
label sets, classes with several parents) is scored with the DAG versions of the hierarchical
precision, recall and F-scores (:mod:`._dag`) instead.

They subclass scikit-learn's scorer base class, so :func:`~sklearn.model_selection.cross_validate`
and :class:`~sklearn.model_selection.GridSearchCV` with several of them call ``predict``
once per split, and ``sample_weight`` and metadata routing work as for built-in scorers.

The scorer names (``"hierarchical_f1"``, ...) are the package's own: :func:`get_scorer`
resolves them into scorer objects, which scikit-learn's ``scoring=`` takes alone, in a list
or in a dict. Nothing is written into scikit-learn's tables.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from functools import partial
from inspect import signature
from typing import Any

import numpy as np

from ._dag import (
    hierarchical_f1_score_dag,
    hierarchical_fbeta_score_dag,
    hierarchical_precision_score_dag,
    hierarchical_recall_score_dag,
)
from ._hierarchical import (
    exact_path_accuracy_score,
    hierarchical_f1_score,
    hierarchical_fbeta_score,
    hierarchical_precision_score,
    hierarchical_recall_score,
    mean_tree_distance,
    mistake_severity,
)

# scikit-learn has no public scorer base class; subclassing its private one is what lets
# several scorers share one predict per split and take sample_weight through routing.
# Without it (a version that moved it) scorers still work, each calling predict itself.
try:
    from sklearn.metrics._scorer import _BaseScorer, _cached_call
except ImportError:  # pragma: no cover
    _BaseScorer = None
    _cached_call = None

__all__ = [
    "HierarchicalScorer",
    "get_scorer",
    "get_scorer_names",
    "get_scorers",
    "make_hierarchical_scorer",
]

#: Wrappers whose fitted inner estimator holds the tree, tried in this order.
_INNER = ("_final_estimator", "best_estimator_", "estimator_", "classifier_", "module_estimator_")
_NOT_FOUND = object()
#: What a tree metric becomes for estimators with a ``hierarchy_`` (DAGs, label sets).
_DAG_VERSIONS = {
    hierarchical_precision_score: hierarchical_precision_score_dag,
    hierarchical_recall_score: hierarchical_recall_score_dag,
    hierarchical_f1_score: hierarchical_f1_score_dag,
    hierarchical_fbeta_score: hierarchical_fbeta_score_dag,
}


def _find_fitted(estimator: Any, name: str, depth: int = 0) -> Any:
    """``estimator.<name>``, or the same attribute of its final / best / inner estimator."""
    value = getattr(estimator, name, _NOT_FOUND)
    if value is not _NOT_FOUND or depth > 8:
        return value
    for inner in _INNER:
        try:
            nested = getattr(estimator, inner, None)
        except Exception:  # a property that raises before fit
            nested = None
        if nested is not None and nested is not estimator and not isinstance(nested, str):
            value = _find_fitted(nested, name, depth + 1)
            if value is not _NOT_FOUND:
                return value
    return _NOT_FOUND


_Base = _BaseScorer if _BaseScorer is not None else object


class HierarchicalScorer(_Base):  # type: ignore[misc, valid-type]
    """A scorer ``scorer(estimator, X, y)`` for estimators that predict ancestral paths.

    Use :func:`make_hierarchical_scorer` or :func:`get_scorer` rather than this class.

    Parameters
    ----------
    score_func : callable
        ``score_func(y_true, y_pred, tree=..., pad_label=..., **kwargs)``, one of the
        metrics of :mod:`hiclass_parallel.metrics` or any function with that signature.
    sign : {1, -1}
        ``-1`` for losses (lower is better), so that greater scores are always better.
    kwargs : dict
        Extra keyword arguments of ``score_func``.
    tree : Tree, default=None
        The tree to use. ``None`` takes ``tree_`` from the fitted estimator (or from the
        last step of a Pipeline, or the best estimator of a fitted search); if none is
        found, ``y`` must be 2-D paths.
    """

    def __init__(
        self,
        score_func: Callable[..., float],
        sign: int = 1,
        kwargs: dict[str, Any] | None = None,
        tree: Any = None,
        response_method: str = "predict",
    ):
        self._score_func = score_func
        self._sign = sign
        self._kwargs = dict(kwargs or {})
        self._response_method = response_method
        self._tree = tree

    def __repr__(self) -> str:
        name = getattr(self._score_func, "__name__", repr(self._score_func))
        sign = "" if self._sign > 0 else ", greater_is_better=False"
        tree = "" if self._tree is None else f", tree={self._tree!r}"
        kwargs = "".join(f", {k}={v!r}" for k, v in self._kwargs.items())
        return f"make_hierarchical_scorer({name}{sign}{tree}{kwargs})"

    def _predict(self, method_caller: Callable[..., Any], estimator: Any, X: Any) -> Any:
        try:
            return method_caller(estimator, self._response_method, X)
        except (AttributeError, ValueError):
            # scikit-learn's response helper reads ``classes_`` of classifiers; estimators
            # that predict paths need not have a 1-D ``classes_`` of scalars (a tree whose
            # names repeat labels its classes by their paths, tuples that scikit-learn reads
            # as a multi-label target). Call predict directly.
            return getattr(estimator, self._response_method)(X)

    def _score(self, method_caller: Callable[..., Any], estimator: Any, X: Any, y_true: Any, **kwargs: Any) -> float:
        y_pred = self._predict(method_caller, estimator, X)
        hierarchy = _find_fitted(estimator, "hierarchy_") if self._tree is None else _NOT_FOUND
        if hierarchy is not _NOT_FOUND:  # a multi-label / DAG estimator: label sets, every parent
            dag_metric = _DAG_VERSIONS.get(self._score_func)
            if dag_metric is None:
                name = getattr(self._score_func, "__name__", repr(self._score_func))
                raise ValueError(
                    f"{name} has no version for {type(estimator).__name__}, which predicts label sets on a "
                    "hierarchy with several parents; use hierarchical precision, recall or F1 scorers"
                )
            return self._sign * dag_metric(y_true, y_pred, hierarchy, **{**self._kwargs, **kwargs})
        tree = self._tree
        if tree is None:
            found = _find_fitted(estimator, "tree_")
            tree = None if found is _NOT_FOUND else found
        if tree is None and np.ndim(y_true) < 2:
            raise ValueError(
                f"cannot score {type(estimator).__name__}: y holds labels but the estimator has no "
                "fitted tree_ attribute (nor does its final step); pass tree= to make_hierarchical_scorer"
            )
        params = {**self._kwargs, **kwargs}
        if "pad_label" not in params:
            pad = _find_fitted(estimator, "pad_label_")
            if pad is not _NOT_FOUND:
                params["pad_label"] = pad
        if "path_sep" not in params and "path_sep" in signature(self._score_func).parameters:
            # Labels as path strings, read as the estimator read them: a class of y that the
            # fitted tree lacks keeps its known ancestors.
            targets = _find_fitted(estimator, "targets_")
            sep = getattr(targets, "sep", None) if targets is not _NOT_FOUND else None
            if sep is not None:
                params["path_sep"] = sep
        return self._sign * self._score_func(y_true, y_pred, tree=tree, **params)

    def __call__(self, estimator: Any, X: Any, y_true: Any, sample_weight: Any = None, **kwargs: Any) -> float:
        """Score ``estimator.predict(X)`` against ``y_true``.

        Parameters
        ----------
        estimator : object
            Fitted estimator whose ``predict`` returns ancestral paths (or labels).
        X : array-like
            Test data.
        y_true : array-like of shape (n_samples,) or (n_samples, n_columns)
            True labels or paths.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        float
        """
        if sample_weight is not None:
            kwargs["sample_weight"] = sample_weight
        return self._score(partial(_cached_call, None) if _cached_call else _plain_call, estimator, X, y_true, **kwargs)

    def _accept_sample_weight(self) -> bool:
        return "sample_weight" in signature(self._score_func).parameters


def _plain_call(estimator: Any, method: str, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
    return getattr(estimator, method)(*args)


def make_hierarchical_scorer(
    score_func: Callable[..., float],
    *,
    greater_is_better: bool = True,
    tree: Any = None,
    **kwargs: Any,
) -> HierarchicalScorer:
    """Make a scorer from a hierarchical metric, like :func:`sklearn.metrics.make_scorer`.

    The difference from ``make_scorer``: the tree (and the padding label) come from the
    fitted estimator at scoring time, so one scorer serves every fit of a grid search.

    Parameters
    ----------
    score_func : callable
        ``score_func(y_true, y_pred, tree=None, **kwargs)``, e.g.
        :func:`hierarchical_fbeta_score`.
    greater_is_better : bool, default=True
        False for losses such as :func:`mean_tree_distance`; the scorer then negates them.
    tree : Tree, default=None
        A fixed tree, for estimators without a ``tree_`` attribute that predict paths.
        ``None`` reads ``estimator.tree_`` (through a Pipeline's last step, or a fitted
        search's best estimator).
    **kwargs
        Passed to ``score_func`` (e.g. ``beta=2.0``, ``average="macro"``).

    Returns
    -------
    HierarchicalScorer

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.metrics import hierarchical_fbeta_score
    >>> class Constant:  # predicts the path of "big dog" for every sample
    ...     tree_ = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    ...     def predict(self, X):
    ...         return np.array([["dog", "big dog"]] * len(X))
    >>> f2 = make_hierarchical_scorer(hierarchical_fbeta_score, beta=2.0)
    >>> round(f2(Constant(), np.zeros((2, 1)), ["big dog", "cat"]), 4)
    0.625
    """
    return HierarchicalScorer(score_func, 1 if greater_is_better else -1, kwargs, tree=tree)


def _registry() -> dict[str, HierarchicalScorer]:
    scorers: dict[str, HierarchicalScorer] = {}
    for short, func in (
        ("precision", hierarchical_precision_score),
        ("recall", hierarchical_recall_score),
        ("f1", hierarchical_f1_score),
    ):
        scorers[f"hierarchical_{short}"] = make_hierarchical_scorer(func)
        for average in ("micro", "macro"):
            scorers[f"hierarchical_{short}_{average}"] = make_hierarchical_scorer(func, average=average)
    scorers["exact_path_accuracy"] = make_hierarchical_scorer(exact_path_accuracy_score)
    scorers["neg_mean_tree_distance"] = make_hierarchical_scorer(mean_tree_distance, greater_is_better=False)
    scorers["neg_tree_distance"] = make_hierarchical_scorer(mean_tree_distance, greater_is_better=False)
    scorers["neg_mistake_severity"] = make_hierarchical_scorer(
        mistake_severity, greater_is_better=False, zero_division=0.0
    )
    return scorers


_BY_NAME = _registry()


def get_scorer_names() -> list[str]:
    """Names of the hierarchical scorers, for :func:`get_scorer` and ``scoring=``.

    Returns
    -------
    list of str

    Examples
    --------
    >>> "hierarchical_f1" in get_scorer_names()
    True
    """
    return sorted(_BY_NAME)


def get_scorer(scoring: str | Callable[..., float]) -> Callable[..., float]:
    """A scorer by name: a hierarchical one, else scikit-learn's.

    ``"hierarchical_precision"``, ``"hierarchical_recall"``, ``"hierarchical_f1"`` (micro
    averages; add ``"_micro"`` or ``"_macro"`` to choose), ``"exact_path_accuracy"``,
    ``"neg_mean_tree_distance"`` (alias ``"neg_tree_distance"``) and
    ``"neg_mistake_severity"`` (0 when there are no mistakes). Other names go to
    :func:`sklearn.metrics.get_scorer`; callables are returned as they are.

    Parameters
    ----------
    scoring : str or callable

    Returns
    -------
    callable
        A new copy of the scorer, usable as ``scoring=`` anywhere in scikit-learn.

    Examples
    --------
    >>> get_scorer("hierarchical_f1_macro")
    make_hierarchical_scorer(hierarchical_f1_score, average='macro')
    """
    if isinstance(scoring, str) and scoring in _BY_NAME:
        return copy.deepcopy(_BY_NAME[scoring])
    from sklearn.metrics import get_scorer as sk_get_scorer

    try:
        return sk_get_scorer(scoring)
    except ValueError:
        raise ValueError(
            f"{scoring!r} is not a valid scoring value; hierarchical scorers are {get_scorer_names()}, "
            "and sklearn.metrics.get_scorer_names() lists the others"
        ) from None


def get_scorers(names: Iterable[str] | None = None) -> dict[str, Callable[..., float]]:
    """A ``{name: scorer}`` dict for ``scoring=`` with several metrics.

    Parameters
    ----------
    names : iterable of str, default=None
        Scorer names (hierarchical or scikit-learn's); ``None`` gives hierarchical
        precision, recall and F1, exact path accuracy and the mean tree distance.

    Returns
    -------
    dict
        Pass it as ``scoring=``; ``refit=`` (of a search) names one of its keys.

    Examples
    --------
    >>> sorted(get_scorers(["hierarchical_f1", "accuracy"]))
    ['accuracy', 'hierarchical_f1']
    """
    if names is None:
        names = [
            "hierarchical_precision",
            "hierarchical_recall",
            "hierarchical_f1",
            "exact_path_accuracy",
            "neg_mean_tree_distance",
        ]
    if isinstance(names, str):
        names = [names]
    return {name: get_scorer(name) for name in names}
