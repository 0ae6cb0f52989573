"""Estimated costs of a fit's parts, in one unit, so that a re-ranking term is tried only within a budget.

The answer model re-ranks the network's candidates with terms (the class prototypes, a flat
linear SVM). Whether a term is tried is decided by its estimated cost against the network's own
estimated fit (:func:`~._config.resolve_linear_terms`, the budget
:data:`~hiclass_parallel.estimators._defaults.TERM_BUDGET`). The estimates count
multiply-adds, the work of each part's inner loops:

- the network (:func:`network_cost`): every epoch, each row's non-zeros (dense: every column)
  times the hidden width on the way in, and the columns of the softmax groups on the row's
  target path times the hidden width on the way out (a sampled group counts its sample);
- the flat SVM against every row (:func:`flat_svm_cost`): liblinear's one-vs-rest coordinate
  descent passes over every non-zero once per target and pass;
- the SVM of the candidates (:func:`candidates_svm_cost`): each target against the rows whose
  candidates hold it, about ``candidates + 1`` passes over the non-zeros in all;
- the least-squares SVM (:func:`least_squares_cost`): the Gram matrix (of the features, or of
  the rows where they are fewer) and its solve;
- the path-level SVM (:func:`path_term_cost`): one least-squares system for every level, or
  one multi-class SVM per level of the tree over every row, whichever is cheaper;
- the class prototypes (:func:`prototypes_cost`): one pass over the non-zeros.

The liblinear passes are an effective count
(:data:`~hiclass_parallel.estimators._defaults.SVM_PASSES`): it also folds in that one of
liblinear's multiply-adds costs more time than one of the fused training step's, so that the
ratio of two estimates is the ratio of the measured seconds (``docs/performance.md``, "Small
taxonomies"; ``benchmarks/bench_term_costs.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._defaults import DECODE_SHARE, SOLVE_SHARE, SVM_PASSES, SVM_TARGET_COST
from ..answer import is_sparse, least_squares_route, level_labels

__all__ = ["candidates_svm_cost", "decode_cost", "flat_svm_cost", "hidden_width", "input_entries",
           "least_squares_cost", "level_classes", "mean_path_columns", "network_cost", "path_term_cost",
           "prototypes_cost"]


def input_entries(X: Any) -> int:
    """The entries a pass over ``X`` reads: its non-zeros if sparse, every value if dense."""
    return int(X.nnz) if sp.issparse(X) else int(np.prod(X.shape))


def hidden_width(estimator: Any, module: type) -> int:
    """The network's hidden width: ``module__hidden_units`` (the sum of a sequence's), else the
    default of ``module``'s ``hidden_units``, else the input width (a module without one)."""
    import inspect

    width = estimator._skorch_kwargs("module__").get("hidden_units")
    if width is None:
        try:
            parameter = inspect.signature(module).parameters.get("hidden_units")
        except (TypeError, ValueError):
            parameter = None
        width = parameter.default if parameter is not None and parameter.default is not inspect.Parameter.empty \
            else estimator.n_features_in_
    if isinstance(width, (list, tuple)):
        return max(1, int(sum(width)))
    return max(1, int(width))


def mean_path_columns(tree: Any, ids: np.ndarray, stop: bool, sample: int = 0) -> float:
    """The mean number of softmax columns on the sibling groups of the training rows' target
    paths (``ids``; ``-1`` rows skipped): what path-local training scores per row. A group
    wider than ``sample`` (> 0) counts ``sample`` columns, as the sampled softmax trains it.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 0])  # two roots; node 0 has three children
    >>> float(mean_path_columns(tree, np.array([2, 1]), stop=False))  # (2 + 3 and 2) / 2
    3.5
    """
    parents = np.asarray(tree.parents)
    roots = int((parents < 0).sum())
    children = np.bincount(parents[parents >= 0], minlength=parents.size)
    width = np.where(parents < 0, roots, children[np.maximum(parents, 0)]) + int(stop)
    if sample > 0:
        width = np.minimum(width, sample)
    paths = np.asarray(tree.paths)
    per_node = np.where(paths >= 0, width[np.maximum(paths, 0)], 0).sum(axis=1)
    ids = np.asarray(ids)
    labelled = ids[ids >= 0]
    return float(per_node[labelled].mean()) if labelled.size else 0.0


def network_cost(X: Any, columns: float, epochs: int, hidden: int) -> float:
    """The network's fit: ``epochs x hidden x (entries of X + rows x path columns)``
    (``columns``: :func:`mean_path_columns`)."""
    return float(epochs) * hidden * (input_entries(X) + int(X.shape[0]) * columns)


def flat_svm_cost(X: Any, n_targets: int) -> float:
    """The flat SVM against every row: ``targets x (non-zeros x passes + features)`` (it
    writes a dense weight vector per target)."""
    return float(n_targets) * (input_entries(X) * SVM_PASSES + int(X.shape[1]))


def decode_cost(X: Any, candidates: int, columns: float, hidden: int) -> float:
    """Decoding every row's ``candidates`` most probable answers: ``rows x candidates x path
    columns x hidden`` multiply-adds of a forward pass, each counted as
    :data:`~hiclass_parallel.estimators._defaults.DECODE_SHARE` of one of the training step's
    (a batched forward pass runs at a matrix product's speed; a training step updates
    scattered rows of the weights and their moments)."""
    return float(int(X.shape[0])) * candidates * columns * hidden * DECODE_SHARE


def candidates_svm_cost(X: Any, n_targets: int, candidates: int, columns: float, hidden: int) -> float:
    """The SVM of the candidates: decoding every training row's ``candidates`` most probable
    answers (:func:`decode_cost`), then ``(candidates + 1) x non-zeros x passes``, and a fixed
    cost per target (:data:`~hiclass_parallel.estimators._defaults.SVM_TARGET_COST`: one small
    ``LinearSVC`` fit each)."""
    return (decode_cost(X, candidates, columns, hidden) + float(candidates + 1) * input_entries(X) * SVM_PASSES
            + float(n_targets) * SVM_TARGET_COST)


def least_squares_cost(X: Any, n_targets: int) -> float:
    """The least-squares SVM (one system, a right-hand side per target): in the primal
    ``features^2 x (rows + targets) + features^3``; in the dual, on fewer rows than features,
    ``rows x entries`` (the rows' Gram matrix) ``+ rows^2 x targets + rows^3 + entries x
    targets`` (the weights back in feature space); each multiply-add of this dense linear
    algebra counted as :data:`~hiclass_parallel.estimators._defaults.SOLVE_SHARE` of one of the
    training step's."""
    rows, features, entries = int(X.shape[0]), int(X.shape[1]), input_entries(X)
    if rows < features:
        count = float(rows) * entries + float(rows) ** 2 * n_targets + float(rows) ** 3 + float(entries) * n_targets
    else:
        count = float(features) ** 2 * (rows + n_targets) + float(features) ** 3
    return count * SOLVE_SHARE


def level_classes(tree: Any, ids: np.ndarray) -> list[int]:
    """The classes of each level's SVM of the path-level term on the training rows' node ids
    ``ids`` (``-1`` rows skipped): the level's nodes on their paths, and one more ("none") where
    some paths end above the level; levels of fewer than two classes fit nothing
    (:func:`~..answer.level_labels`, the labels the term's fit reads).

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1])
    >>> level_classes(tree, np.array([2, 3, 1, -1]))  # level 0: nodes 0, 1; level 1: 2, 3 and none
    [2, 3]
    """
    levels, _ = level_labels(np.asarray(tree.paths), np.asarray(ids))
    return [int(np.unique(labels[labels >= 0]).size) for labels in levels]


def path_term_cost(X: Any, classes: list[int]) -> tuple[float, str]:
    """``(cost, solver)`` of the path-level SVM, of ``classes`` (per level: :func:`level_classes`)
    one-vs-rest problems, by the cheaper of its routes: one least-squares system for every level
    (:func:`least_squares_cost` of all the levels' classes), where the least squares are its
    SVMs (:func:`~..answer.least_squares_route`), or one multi-class ``LinearSVC`` per level over
    every row (:func:`flat_svm_cost` of each level's classes; ``solver`` ``"svm"``). On a few
    hundred rows the system is far cheaper; on tens of thousands its ``(rows, rows)`` matrix is
    not, and the estimate never builds it."""
    svm = float(sum(flat_svm_cost(X, n) for n in classes))
    if not least_squares_route(X, int(X.shape[0])):
        return svm, "svm"
    least_squares = least_squares_cost(X, int(sum(classes)))
    return (least_squares, "least_squares") if least_squares <= svm or not is_sparse(X) else (svm, "svm")


def prototypes_cost(X: Any) -> float:
    """The class prototypes: one pass over the entries of ``X``."""
    return float(input_entries(X))
