"""Hierarchical precision, recall and F-score on hierarchies with several parents (DAGs).

In a DAG a node's *node set* is the node and all its ancestors through every parent (the
union over all its ancestral paths, root excluded), so two nodes can share ancestors without
sharing a path prefix and the tree metrics' common-prefix count no longer applies. Here the
sets are rows of the DAG's sparse ancestor matrix (:meth:`~hiclass_parallel.dag.Dag.ancestor_matrix`)
and ``|T_i & P_i|`` is a row-wise product: whole-array SciPy operations, no loop over samples.

Labels are the DAG's original labels (map an unrolled tree's predictions back first with
:meth:`~hiclass_parallel.dag.UnrolledDag.to_original`). On a DAG that is a tree these metrics
equal :func:`~hiclass_parallel.metrics.hierarchical_fbeta_score` and its siblings.

Multi-label samples: a sample may have several true and several predicted labels (a list of
labels per sample, or an indicator matrix, as :class:`~hiclass_parallel.estimators.MultiLabelHierarchicalClassifier`
takes and returns them); its node set is then the union of its labels' ancestor sets, one
sparse product ``indicator @ ancestor_matrix``. A :class:`~hiclass_parallel.tree.Tree` is
accepted as the hierarchy (a DAG with one parent per class).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from .._backend import to_numpy
from ..dag import Dag, UnrolledDag
from ..exceptions import UnknownLabelError
from ..labels._sets import is_label_set, read_label_sets
from ..labels._unknown import warn_unknown
from ..tree import Tree
from ._hierarchical import Average, ZeroDivision, _check_average, _check_zero_division, _prf_from_counts
from ._paths import Unknown
from ._weights import check_sample_weight

__all__ = [
    "hierarchical_f1_score_dag",
    "hierarchical_fbeta_score_dag",
    "hierarchical_precision_score_dag",
    "hierarchical_recall_score_dag",
]

DagInputType = Literal["labels", "ids"]


def _as_dag(dag: Any) -> Dag:
    """The :class:`Dag` of a Dag, an UnrolledDag (its ``dag``) or a Tree (one parent each)."""
    if isinstance(dag, UnrolledDag):
        return dag.dag
    if isinstance(dag, Tree):
        return Dag.from_tree(dag)
    if not isinstance(dag, Dag):
        raise TypeError(f"dag must be a Dag, an UnrolledDag or a Tree, got {type(dag).__name__}")
    return dag


def _node_sets(values: Any, dag: Dag, input_type: str, name: str) -> sp.csr_matrix:
    """The labels of each sample as a bool indicator ``(n_samples, n_nodes)``: one label, a
    list of labels or an indicator row per sample (:func:`~hiclass_parallel.labels._sets.read_label_sets`)."""
    if input_type not in ("labels", "ids"):
        raise ValueError(f"input_type must be 'labels' or 'ids', got {input_type!r}")
    if not sp.issparse(values) and not isinstance(values, (list, tuple)):
        values = to_numpy(values)
    if input_type == "labels":
        return read_label_sets(values, dag.n_nodes, dag.to_ids, name)[0]

    def to_ids(ids: list) -> np.ndarray:
        arr = np.asarray(ids, dtype=np.int64)
        bad = (arr < 0) | (arr >= dag.n_nodes)
        if bad.any():
            raise ValueError(f"{name} holds node ids outside [-1, {dag.n_nodes}): {arr[bad][:5].tolist()}")
        return arr

    if not sp.issparse(values) and not (isinstance(values, np.ndarray) and values.ndim == 2):
        items = list(values)
        if not any(is_label_set(v) for v in items):  # one node id per sample; -1 is an empty set
            arr = np.asarray(items, dtype=np.int64).reshape(-1)
            if (arr < -1).any():
                raise ValueError(f"{name} holds node ids outside [-1, {dag.n_nodes}): {arr[arr < -1][:5].tolist()}")
            values = np.where(arr < 0, None, arr.astype(object))
    return read_label_sets(values, dag.n_nodes, to_ids, name)[0]


def _open_node_sets(values: Any, dag: Dag, name: str, extra: dict) -> tuple[sp.csr_matrix, sp.csr_matrix, int]:
    """Label sets that hold labels the DAG lacks: the known labels' indicator ``(n, n_nodes)``,
    the unknown labels' indicator (columns from ``extra``, shared by ``y_true`` and ``y_pred``:
    the same label, the same column) and the number of rows holding one."""
    index = {label: i for i, label in enumerate(dag.labels.tolist())}

    def to_ids(labels: list) -> np.ndarray:
        ids = []
        for v in labels:
            v = v.item() if isinstance(v, np.generic) else v
            found = index.get(v)
            ids.append(found if found is not None else dag.n_nodes + extra.setdefault(v, len(extra)))
        return np.asarray(ids, dtype=np.int64)

    to_ids(_members(values))  # the columns past the DAG's, known once every label is read
    both = read_label_sets(values, dag.n_nodes + len(extra), to_ids, name)[0]
    known, lacking = sp.csr_matrix(both[:, : dag.n_nodes]), sp.csr_matrix(both[:, dag.n_nodes:])
    return known, lacking, int((np.diff(lacking.indptr) > 0).sum())


def _members(values: Any) -> list:
    """Every label of a list of labels or label collections, in order."""
    out: list = []
    for v in (values.tolist() if isinstance(values, np.ndarray) and values.dtype != object else values):
        if is_label_set(v):
            out.extend(v.tolist() if isinstance(v, np.ndarray) else list(v))
        elif v is not None:
            out.append(v)
    return out


def dag_node_set_counts(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag | Tree, *,
                        input_type: DagInputType = "labels",
                        unknown: Unknown = "warn") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample ``|T_i|``, ``|P_i|`` and ``|T_i & P_i|`` with node sets through every parent.

    ``T_i`` is the union of the ancestor sets (through every parent, the node included) of
    the sample's true labels, ``P_i`` the same for its predicted labels: one label per sample,
    or several (multi-label, see :func:`hierarchical_f1_score_dag`). One sparse product with
    the DAG's ancestor matrix per side: no loop over samples. A label the DAG lacks (a class
    no training row had) is a node of its own with no known ancestors: ``unknown="warn"``
    counts it so and says once how many rows held one, ``"ignore"`` counts it silently,
    ``"raise"`` refuses it (:class:`~hiclass_parallel.exceptions.UnknownLabelError`).

    Examples
    --------
    >>> from hiclass_parallel.dag import Dag
    >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
    >>> [x.tolist() for x in dag_node_set_counts(["d", "a"], ["c", "b"], dag)]
    [[4, 1], [3, 1], [3, 0]]
    >>> [x.tolist() for x in dag_node_set_counts([["d"], ["a", "b"]], [["a"], []], dag)]
    [[4, 2], [1, 0], [1, 0]]
    >>> [x.tolist() for x in dag_node_set_counts([["d", "e"]], [["d"]], dag, unknown="ignore")]
    [[5], [4], [4]]
    """
    if unknown not in ("warn", "ignore", "raise"):
        raise ValueError(f"unknown must be one of ('warn', 'ignore', 'raise'), got {unknown!r}")
    dag = _as_dag(dag)
    lacking: list = []
    try:
        true = _node_sets(y_true, dag, input_type, "y_true")
        pred = _node_sets(y_pred, dag, input_type, "y_pred")
    except UnknownLabelError:
        if unknown == "raise" or input_type != "labels":
            raise
        extra: dict = {}
        true, true_extra, true_held = _open_node_sets(y_true, dag, "y_true", extra)
        pred, pred_extra, pred_held = _open_node_sets(y_pred, dag, "y_pred", extra)
        width = len(extra)
        lacking = [sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], width))
                   for m in (true_extra, pred_extra)]
        if unknown == "warn":
            warn_unknown({"y_true": (true_held, true.shape[0], _example(y_true, true_extra)),
                          "y_pred": (pred_held, pred.shape[0], _example(y_pred, pred_extra))})
    if true.shape[0] != pred.shape[0]:
        raise ValueError(f"y_true and y_pred have {true.shape[0]} and {pred.shape[0]} samples")
    closure = dag.ancestor_matrix()
    # union of the ancestor sets of a sample's labels: a boolean sparse product
    rows_true = (true @ closure).astype(bool)
    rows_pred = (pred @ closure).astype(bool)
    n_true = np.diff(rows_true.indptr).astype(np.int64)
    n_pred = np.diff(rows_pred.indptr).astype(np.int64)
    n_common = np.asarray(rows_true.multiply(rows_pred).sum(axis=1), dtype=np.int64).reshape(-1)
    if lacking:  # labels the DAG lacks: nodes of their own, without known ancestors
        n_true += np.diff(lacking[0].indptr)
        n_pred += np.diff(lacking[1].indptr)
        n_common += np.asarray(lacking[0].multiply(lacking[1]).sum(axis=1), dtype=np.int64).reshape(-1)
    return n_true, n_pred, n_common


def _example(values: Any, lacking: sp.csr_matrix) -> Any:
    rows = np.flatnonzero(np.diff(lacking.indptr) > 0)
    if not rows.size:
        return None
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    return items[int(rows[0])]


def _prf_dag(y_true, y_pred, dag, *, beta, average, input_type, sample_weight, zero_division, unknown, warn_for):
    _check_average(average)
    _check_zero_division(zero_division)
    if not (isinstance(beta, (int, float, np.number)) and beta >= 0):
        raise ValueError(f"beta must be a non-negative number, got {beta!r}")
    n_true, n_pred, n_common = dag_node_set_counts(y_true, y_pred, dag, input_type=input_type, unknown=unknown)
    weight = check_sample_weight(sample_weight, n_true.shape[0])
    return _prf_from_counts(n_true, n_pred, n_common, weight, beta=beta, average=average,
                            zero_division=zero_division, warn_for=warn_for)


_PARAMS = """    y_true : array-like of shape (n_samples,), list of label lists, or indicator matrix
        True labels of the DAG's nodes (at any depth): one per sample (``None`` is an empty
        node set), a list of labels per sample (multi-label), or a 0/1 indicator matrix
        (dense or sparse) of shape (n_samples, n_nodes) with columns in node id order.
    y_pred : same forms as ``y_true``
        Predicted labels.
    dag : Dag, UnrolledDag or Tree
        The hierarchy (an :class:`~hiclass_parallel.dag.UnrolledDag` stands for its ``dag``).
    average : {"micro", "macro"}, default="micro"
        ``"micro"``: ratio of the summed set sizes; ``"macro"``: mean of per-sample ratios.
    input_type : {"labels", "ids"}, default="labels"
        Whether values are the DAG's labels or its node ids (``-1``: empty).
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights.
    zero_division : "warn", 0.0, 1.0 or np.nan, default="warn"
        The value of a ratio with a zero denominator (``"warn"``: 0.0 and a warning).
    unknown : {"warn", "ignore", "raise"}, default="warn"
        Labels the DAG lacks (classes no training row had): each is a node of its own, a
        miss, without known ancestors; ``"warn"`` says once how many rows held one,
        ``"raise"`` refuses them (:class:`~hiclass_parallel.exceptions.UnknownLabelError`).

    Returns
    -------
    float"""


def _doc(func):
    func.__doc__ = func.__doc__.replace("    {params}", _PARAMS)
    return func


@_doc
def hierarchical_precision_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *,
                                     average: Average = "micro", input_type: DagInputType = "labels",
                                     sample_weight: Any = None, zero_division: ZeroDivision = "warn",
        unknown: Unknown = "warn") -> float:
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
                    sample_weight=sample_weight, zero_division=zero_division, unknown=unknown,
                    warn_for=("precision",))[0]


@_doc
def hierarchical_recall_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *,
                                  average: Average = "micro", input_type: DagInputType = "labels",
                                  sample_weight: Any = None, zero_division: ZeroDivision = "warn",
        unknown: Unknown = "warn") -> float:
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
                    sample_weight=sample_weight, zero_division=zero_division, unknown=unknown,
                    warn_for=("recall",))[1]


@_doc
def hierarchical_fbeta_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *, beta: float = 1.0,
                                 average: Average = "micro", input_type: DagInputType = "labels",
                                 sample_weight: Any = None, zero_division: ZeroDivision = "warn",
        unknown: Unknown = "warn") -> float:
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
                    sample_weight=sample_weight, zero_division=zero_division, unknown=unknown,
                    warn_for=("f-score",))[2]


@_doc
def hierarchical_f1_score_dag(y_true: Any, y_pred: Any, dag: Dag | UnrolledDag, *,
                              average: Average = "micro", input_type: DagInputType = "labels",
                              sample_weight: Any = None, zero_division: ZeroDivision = "warn",
        unknown: Unknown = "warn") -> float:
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
                    sample_weight=sample_weight, zero_division=zero_division, unknown=unknown,
                    warn_for=("f-score",))[2]
