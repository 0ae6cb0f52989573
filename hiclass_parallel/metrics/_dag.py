"""Hierarchical precision, recall and F-score on hierarchies with several parents (DAGs).

In a DAG a node's *node set* is the node and all its ancestors through every parent (the
union over all its ancestral paths, root excluded), so two nodes can share ancestors without
sharing a path prefix and the tree metrics' common-prefix count no longer applies. Here the
sets are rows of the DAG's sparse ancestor matrix (:meth:`~hiclass_parallel.dag.Dag.ancestor_matrix`)
and ``|T_i & P_i|`` is a row-wise product: whole-array SciPy operations, no loop over samples.

Labels are the DAG's original labels (map an unrolled tree's predictions back first with
:meth:`~hiclass_parallel.dag.UnrolledDag.to_original`). On a DAG that is a tree these metrics
equal :func:`~hiclass_parallel.metrics.hierarchical_fbeta_score` and its siblings.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._backend import to_numpy
from ..dag import Dag, UnrolledDag
from ._hierarchical import Average, ZeroDivision, _check_average, _check_zero_division, _prf_from_counts

__all__ = [
    "hierarchical_f1_score_dag",
    "hierarchical_fbeta_score_dag",
    "hierarchical_precision_score_dag",
    "hierarchical_recall_score_dag",
]

DagInputType = Literal["labels", "ids"]


def _node_ids(values: Any, dag: Dag, input_type: str, name: str) -> np.ndarray:
    """1-D int64 DAG node ids; ``-1`` (ids) or ``None`` (labels) is an empty node set."""
    arr = np.asarray(to_numpy(values), dtype=object)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one DAG label per sample), got shape {arr.shape}")
    if input_type == "ids":
        ids = np.asarray(arr.tolist(), dtype=np.int64) if arr.size else np.zeros(0, dtype=np.int64)
        bad = (ids < -1) | (ids >= dag.n_nodes)
        if bad.any():
            raise ValueError(f"{name} holds node ids outside [-1, {dag.n_nodes}): {ids[bad][:5].tolist()}")
        return ids
    if input_type != "labels":
        raise ValueError(f"input_type must be 'labels' or 'ids', got {input_type!r}")
    empty = np.fromiter((v is None for v in arr), dtype=bool, count=arr.size)
    ids = np.full(arr.size, -1, dtype=np.int64)
    if (~empty).any():
        ids[~empty] = dag.to_ids(arr[~empty])
    return ids


def dag_node_set_counts(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *,
                        input_type: DagInputType = "labels") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample ``|T_i|``, ``|P_i|`` and ``|T_i & P_i|`` with node sets through every parent.

    Examples
    --------
    >>> from hiclass_parallel.dag import Dag
    >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
    >>> [x.tolist() for x in dag_node_set_counts(["d", "a"], ["c", "b"], dag)]
    [[4, 1], [3, 1], [3, 0]]
    """
    if isinstance(dag, UnrolledDag):
        dag = dag.dag
    if not isinstance(dag, Dag):
        raise TypeError(f"dag must be a Dag or an UnrolledDag, got {type(dag).__name__}")
    true = _node_ids(y_true, dag, input_type, "y_true")
    pred = _node_ids(y_pred, dag, input_type, "y_pred")
    if true.shape != pred.shape:
        raise ValueError(f"y_true and y_pred have {true.size} and {pred.size} samples")
    import scipy.sparse as sp

    closure = dag.ancestor_matrix()
    # one empty row at index n_nodes stands for an empty node set (-1)
    closure = sp.vstack([closure, sp.csr_matrix((1, dag.n_nodes), dtype=bool)], format="csr")
    rows_true = closure[np.where(true < 0, dag.n_nodes, true)]
    rows_pred = closure[np.where(pred < 0, dag.n_nodes, pred)]
    n_true = np.diff(rows_true.indptr).astype(np.int64)
    n_pred = np.diff(rows_pred.indptr).astype(np.int64)
    n_common = np.asarray(rows_true.multiply(rows_pred).sum(axis=1), dtype=np.int64).reshape(-1)
    return n_true, n_pred, n_common


def _prf_dag(y_true, y_pred, dag, *, beta, average, input_type, sample_weight, zero_division, warn_for):
    _check_average(average)
    _check_zero_division(zero_division)
    if not (isinstance(beta, (int, float, np.number)) and beta >= 0):
        raise ValueError(f"beta must be a non-negative number, got {beta!r}")
    n_true, n_pred, n_common = dag_node_set_counts(y_true, y_pred, dag, input_type=input_type)
    weight = None
    if sample_weight is not None:
        weight = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if weight.shape != n_true.shape:
            raise ValueError(f"sample_weight has {weight.size} entries for {n_true.size} samples")
    return _prf_from_counts(n_true, n_pred, n_common, weight, beta=beta, average=average,
                            zero_division=zero_division, warn_for=warn_for)


_PARAMS = """    y_true : array-like of shape (n_samples,)
        True labels of the DAG's nodes (at any depth); ``None`` is an empty node set.
    y_pred : array-like of shape (n_samples,)
        Predicted labels, as ``y_true``.
    dag : Dag or UnrolledDag
        The hierarchy (an :class:`~hiclass_parallel.dag.UnrolledDag` stands for its ``dag``).
    average : {"micro", "macro"}, default="micro"
        ``"micro"``: ratio of the summed set sizes; ``"macro"``: mean of per-sample ratios.
    input_type : {"labels", "ids"}, default="labels"
        Whether values are the DAG's labels or its node ids (``-1``: empty).
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights.
    zero_division : "warn", 0.0, 1.0 or np.nan, default="warn"
        The value of a ratio with a zero denominator (``"warn"``: 0.0 and a warning).

    Returns
    -------
    float"""


def _doc(func):
    func.__doc__ = func.__doc__.replace("    {params}", _PARAMS)
    return func


@_doc
def hierarchical_precision_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *,
                                     average: Average = "micro", input_type: DagInputType = "labels",
                                     sample_weight: Any = None, zero_division: ZeroDivision = "warn") -> float:
    """Hierarchical precision on a DAG: node sets through every parent.

    ``sum_i |T_i & P_i| / sum_i |P_i|`` (micro), where ``T_i`` and ``P_i`` hold the true and
    predicted node and all their ancestors through every parent.

    Parameters
    ----------
    {params}

    Examples
    --------
    >>> from hiclass_parallel.dag import Dag
    >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
    >>> hierarchical_precision_score_dag(["d"], ["c"], dag)
    1.0
    """
    return _prf_dag(y_true, y_pred, dag, beta=1.0, average=average, input_type=input_type,
                    sample_weight=sample_weight, zero_division=zero_division, warn_for=("precision",))[0]


@_doc
def hierarchical_recall_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *,
                                  average: Average = "micro", input_type: DagInputType = "labels",
                                  sample_weight: Any = None, zero_division: ZeroDivision = "warn") -> float:
    """Hierarchical recall on a DAG: ``sum_i |T_i & P_i| / sum_i |T_i|`` (micro).

    Parameters
    ----------
    {params}

    Examples
    --------
    >>> from hiclass_parallel.dag import Dag
    >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
    >>> hierarchical_recall_score_dag(["d"], ["c"], dag)
    0.75
    """
    return _prf_dag(y_true, y_pred, dag, beta=1.0, average=average, input_type=input_type,
                    sample_weight=sample_weight, zero_division=zero_division, warn_for=("recall",))[1]


@_doc
def hierarchical_fbeta_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *, beta: float = 1.0,
                                 average: Average = "micro", input_type: DagInputType = "labels",
                                 sample_weight: Any = None, zero_division: ZeroDivision = "warn") -> float:
    """Hierarchical F-beta on a DAG, ``(1 + b^2) hP hR / (b^2 hP + hR)`` from the set sizes.

    Parameters
    ----------
    {params}
    beta : float, default=1.0
        Weight of recall against precision.

    Examples
    --------
    >>> from hiclass_parallel.dag import Dag
    >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
    >>> round(hierarchical_fbeta_score_dag(["d"], ["c"], dag, beta=2.0), 4)
    0.7895
    """
    return _prf_dag(y_true, y_pred, dag, beta=beta, average=average, input_type=input_type,
                    sample_weight=sample_weight, zero_division=zero_division, warn_for=("f-score",))[2]


@_doc
def hierarchical_f1_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *,
                              average: Average = "micro", input_type: DagInputType = "labels",
                              sample_weight: Any = None, zero_division: ZeroDivision = "warn") -> float:
    """Hierarchical F1 on a DAG: ancestor sets taken through every parent.

    Parameters
    ----------
    {params}

    Examples
    --------
    A prediction of ``c`` for a true ``d`` (``d``'s parent ``c`` has parents ``a`` and ``b``)
    gets 3 of 4 nodes right and predicts nothing wrong:

    >>> from hiclass_parallel.dag import Dag
    >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
    >>> round(hierarchical_f1_score_dag(["d"], ["c"], dag), 4)
    0.8571
    """
    return _prf_dag(y_true, y_pred, dag, beta=1.0, average=average, input_type=input_type,
                    sample_weight=sample_weight, zero_division=zero_division, warn_for=("f-score",))[2]
