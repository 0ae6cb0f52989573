"""The multi-label reader: several labels per sample, as label lists or indicator matrices.

One reading for the multi-label classifier and the DAG metrics. A multi-label ``y`` comes in
one of scikit-learn's forms, and every form becomes a boolean CSR *indicator* ``(n_samples,
n_nodes)`` over the hierarchy's node ids:

- ``"labels"``: 1-D, one label per sample (``None`` is an empty set);
- ``"sets"``: 1-D (or a list) whose items are lists, tuples, sets or arrays of labels, a
  set of labels per sample (scalars among them count as one-label sets; empty is allowed);
- ``"indicator"``: a dense 2-D 0/1 array with one column per node (``MultiLabelBinarizer``'s
  output with ``classes=`` the hierarchy's labels);
- ``"sparse"``: the same as a scipy sparse matrix.

:func:`write_label_sets` turns an indicator back into the form a reader saw, so an
estimator's ``predict`` answers in the form ``fit`` was given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["FORMS", "read_label_sets", "write_label_sets", "is_label_set"]

FORMS = ("labels", "sets", "indicator", "sparse")

_SET_TYPES = (list, tuple, set, frozenset, np.ndarray)


def is_label_set(value: Any) -> bool:
    """Whether one item of ``y`` is a collection of labels rather than a single label."""
    return isinstance(value, _SET_TYPES)


def _indicator_from_matrix(y: Any, n_nodes: int, name: str) -> tuple[sp.csr_matrix, str]:
    if sp.issparse(y):
        # A copy: the duplicates summed and zeros dropped below must not change the caller's y.
        form, matrix = "sparse", sp.csr_matrix(y, copy=True)
    else:
        arr = np.asarray(y)
        if arr.dtype.kind not in "biuf":
            raise ValueError(
                f"{name} is a 2-D array of {arr.dtype} values: a multi-label y is a list of label lists per "
                "sample, or a 0/1 indicator matrix with one column per class (MultiLabelBinarizer's output)"
            )
        form, matrix = "indicator", sp.csr_matrix(arr)
    if matrix.shape[1] != n_nodes:
        raise ValueError(
            f"{name} is an indicator matrix of shape {matrix.shape}, but the hierarchy has {n_nodes} classes: "
            "it needs one column per class, in the order of classes_"
        )
    matrix.sum_duplicates()
    bad = (matrix.data != 0) & (matrix.data != 1)
    if bad.any():
        raise ValueError(f"{name} is an indicator matrix but holds values other than 0 and 1: {np.unique(matrix.data[bad])[:5].tolist()}")
    matrix.eliminate_zeros()
    return sp.csr_matrix((np.ones(matrix.nnz, dtype=bool), matrix.indices, matrix.indptr), shape=matrix.shape), form


def read_label_sets(y: Any, n_nodes: int, to_ids: Callable[[list], np.ndarray], name: str = "y") -> tuple[sp.csr_matrix, str]:
    """A multi-label ``y`` as a boolean CSR indicator ``(n_samples, n_nodes)`` and its form.

    Parameters
    ----------
    y : array-like, list of label collections, or (sparse) indicator matrix
        One of the forms of :data:`FORMS` (see the module docstring).
    n_nodes : int
        Number of classes of the hierarchy (the indicator's width).
    to_ids : callable
        Maps a list of labels to node ids, raising ``UnknownLabelError`` for unknown ones.
    name : str, default="y"
        How errors name ``y``.

    Returns
    -------
    indicator : scipy.sparse.csr_matrix of bool of shape (n_samples, n_nodes)
        Sorted column indices, no duplicates.
    form : {"labels", "sets", "indicator", "sparse"}

    Examples
    --------
    >>> ids = {"a": 0, "b": 1, "c": 2}
    >>> to_ids = lambda labels: np.array([ids[v] for v in labels], dtype=np.int64)
    >>> indicator, form = read_label_sets([["a", "c"], ("b",), []], 3, to_ids)
    >>> form, indicator.toarray().astype(int).tolist()
    ('sets', [[1, 0, 1], [0, 1, 0], [0, 0, 0]])
    """
    if sp.issparse(y) or (hasattr(y, "ndim") and getattr(y, "ndim", 1) == 2 and not isinstance(y, list)):
        if hasattr(y, "detach"):  # a torch tensor
            y = y.detach().cpu().numpy()
        return _indicator_from_matrix(y, n_nodes, name)
    if isinstance(y, (str, bytes)) or not hasattr(y, "__len__"):
        raise ValueError(f"{name} must hold one label or one collection of labels per sample, got {type(y).__name__}")
    items = list(y.tolist() if isinstance(y, np.ndarray) and y.dtype != object else y)
    is_set = [is_label_set(v) for v in items]
    form = "sets" if any(is_set) else "labels"
    members: list = []
    counts = np.zeros(len(items), dtype=np.int64)
    for i, (value, collection) in enumerate(zip(items, is_set)):
        if collection:
            value = value.tolist() if isinstance(value, np.ndarray) else list(value)
            bad = [v for v in value if is_label_set(v)]
            if bad:
                raise ValueError(f"{name}[{i}] holds a nested collection {bad[0]!r}: each sample's labels must be a flat list")
        else:
            value = [] if value is None else [value]
        members.extend(value)
        counts[i] = len(value)
    ids = np.asarray(to_ids(members), dtype=np.int64).reshape(-1) if members else np.zeros(0, dtype=np.int64)
    rows = np.repeat(np.arange(len(items)), counts)
    indicator = sp.csr_matrix((np.ones(ids.size, dtype=bool), (rows, ids)), shape=(len(items), n_nodes))
    indicator.sum_duplicates()  # a label named twice counts once
    indicator.sort_indices()
    return indicator, form


def write_label_sets(indicator: sp.csr_matrix, form: str, labels: np.ndarray) -> Any:
    """An indicator in a reader's form: ``"indicator"`` a dense int array, ``"sparse"`` an int
    CSR matrix, ``"labels"``/``"sets"`` an object array of label tuples (one per sample, in
    column order).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> write_label_sets(sp.csr_matrix([[True, False, True]]), "sets", np.array(["a", "b", "c"])).tolist()
    [('a', 'c')]
    """
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    indicator = sp.csr_matrix(indicator)
    if form == "sparse":
        return indicator.astype(np.int64)
    if form == "indicator":
        return indicator.toarray().astype(np.int64)
    if not indicator.has_sorted_indices:
        indicator = indicator.sorted_indices()  # a copy: the given indicator stays as it is
    names = labels[indicator.indices].tolist()
    bounds = indicator.indptr.tolist()
    out = np.empty(indicator.shape[0], dtype=object)
    out[:] = [tuple(names[bounds[i]:bounds[i + 1]]) for i in range(indicator.shape[0])]
    return out
