"""No public entry point changes its inputs in place.

Every call below is given dense NumPy ``X``, a CSR ``X`` with unsorted indices and duplicate
entries, labels as NumPy arrays and as (ragged) lists of lists, and sparse indicator ``y``
with explicit zeros and unsorted indices; each input is snapshot before the call (values,
dtypes, shapes, and for sparse matrices their ``data``, ``indices``, ``indptr`` and the
sorted / canonical flags) and compared after it. The multi-label classifier used to sum the
duplicates of the caller's sparse ``y`` and drop its zeros.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from hiclass_parallel import Tree, metrics
from hiclass_parallel.dag import Dag, unroll_dag
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import (
    ClassTextClassifier,
    HierarchicalClassifier,
    MultiLabelHierarchicalClassifier,
    PathEncoder,
)


# ---------------------------------------------------------------------------- snapshots
def _snapshot(value: Any) -> Any:
    """Everything about ``value`` an in-place change could alter, copied."""
    if sp.issparse(value):
        parts = {"format": value.format, "dtype": value.dtype, "shape": value.shape}
        if value.format in ("csr", "csc"):
            parts.update(data=value.data.copy(), indices=value.indices.copy(), indptr=value.indptr.copy(),
                         sorted=bool(value.has_sorted_indices), canonical=bool(value.has_canonical_format))
        else:
            parts["dense"] = value.toarray()
        return ("sparse", parts)
    if isinstance(value, np.ndarray):
        items = copy.deepcopy(value.tolist()) if value.dtype == object else value.copy()
        return ("array", value.dtype, value.shape, value.flags.writeable, items)
    if isinstance(value, (list, tuple)):
        return (type(value), [_snapshot(item) for item in value])
    if isinstance(value, dict):
        return (dict, {key: _snapshot(item) for key, item in value.items()})
    if value is None or isinstance(value, (str, bytes, int, float, np.generic)):
        return ("value", value)
    return ("object", None)  # a tree, a DAG, an estimator: not data the call could edit


def _assert_same(before: Any, after: Any, where: str) -> None:
    kind = before[0]
    assert kind == after[0], where
    if kind == "sparse":
        b, a = before[1], after[1]
        assert b.keys() == a.keys(), where
        for key in b:
            if isinstance(b[key], np.ndarray):
                assert b[key].dtype == a[key].dtype, f"{where}: {key} dtype"
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{where}: {key}")
            else:
                assert a[key] == b[key], f"{where}: {key} was {b[key]!r}, now {a[key]!r}"
    elif kind == "array":
        assert before[1:4] == after[1:4], f"{where}: dtype, shape or writeable flag changed"
        if before[1] == object:
            assert before[4] == after[4], where
        else:
            np.testing.assert_array_equal(after[4], before[4], err_msg=where)
    elif kind in (list, tuple):
        assert len(before[1]) == len(after[1]), where
        for i, (b, a) in enumerate(zip(before[1], after[1])):
            _assert_same(b, a, f"{where}[{i}]")
    elif kind is dict:
        assert before[1].keys() == after[1].keys(), where
        for key in before[1]:
            _assert_same(before[1][key], after[1][key], f"{where}[{key!r}]")
    else:
        assert before[1] == after[1], where


def call_unchanged(fn, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)``, asserting afterwards that no argument changed."""
    inputs = {**{f"argument {i}": a for i, a in enumerate(args)}, **kwargs}
    before = {name: _snapshot(value) for name, value in inputs.items()}
    result = fn(*args, **kwargs)
    for name, value in inputs.items():
        _assert_same(before[name], _snapshot(value), f"{getattr(fn, '__qualname__', fn)}: {name}")
    return result


# ---------------------------------------------------------------------------- inputs
def _messy_csr(X: np.ndarray, rng: np.random.Generator) -> sp.csr_matrix:
    """``X`` as CSR whose every value is stored as two duplicates, in shuffled column order."""
    rows, cols = np.nonzero(X)
    values = X[rows, cols]
    rows, cols, values = np.repeat(rows, 2), np.repeat(cols, 2), np.repeat(values / 2, 2)
    order = np.lexsort((rng.random(rows.size), rows))  # rows in order, columns shuffled within
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=X.shape[0]))])
    out = sp.csr_matrix((values[order], cols[order], indptr), shape=X.shape)
    assert not out.has_sorted_indices and not out.has_canonical_format
    return out


def _messy_indicator(dense: np.ndarray, rng: np.random.Generator) -> sp.csr_matrix:
    """A 0/1 indicator as CSR with unsorted indices and an explicit zero in every row."""
    rows, cols, values = [], [], []
    for i, row in enumerate(dense):
        on = list(rng.permutation(np.flatnonzero(row)))
        off = int(np.flatnonzero(row == 0)[0])
        cols += on + [off]
        values += [1] * len(on) + [0]
        rows.append(len(on) + 1)
    indptr = np.concatenate([[0], np.cumsum(rows)])
    out = sp.csr_matrix((np.asarray(values, dtype=np.int64), np.asarray(cols), indptr), shape=dense.shape)
    assert not out.has_canonical_format
    return out


@pytest.fixture(scope="module")
def _data():
    rng = np.random.default_rng(0)
    X, y, tree = make_hierarchical_classification(n_samples=120, n_features=6, branching=2, depth=2, random_state=0)
    X_sparse = _messy_csr(np.where(np.abs(X) > 0.5, X, 0.0), rng)
    paths = np.array([tree.path_labels(label) for label in y], dtype=object)
    ragged = [list(p) if i % 3 else list(p[:1]) for i, p in enumerate(paths.tolist())]  # some coarse labels
    return {"tree": tree, "X": X, "X_sparse": X_sparse, "labels": np.asarray(y), "paths": paths,
            "ragged": ragged}


@pytest.fixture
def data(_data):
    """Fresh copies for each test: one call that edited its input would not hide another's."""
    return copy.deepcopy(_data)


X_KINDS = ["X", "X_sparse"]
Y_KINDS = ["labels", "paths", "ragged"]


# ---------------------------------------------------------------------------- the classifier
@pytest.fixture(scope="module")
def fitted(_data):
    """One fit per kind of X (each checked): a tiny tree, two epochs."""
    models, data = {}, copy.deepcopy(_data)
    for x_kind in X_KINDS:
        clf = HierarchicalClassifier(data["tree"], max_epochs=2, random_state=0, prototypes=1.0,
                                     module__hidden_units=8)
        models[x_kind] = call_unchanged(clf.fit, data[x_kind], data["labels"])
    return models


@pytest.mark.parametrize("x_kind", X_KINDS)
@pytest.mark.parametrize("y_kind", Y_KINDS)
def test_fit_and_partial_fit_leave_x_and_y_unchanged(data, x_kind, y_kind):
    X, y = data[x_kind], data[y_kind]
    clf = HierarchicalClassifier(data["tree"], max_epochs=1, random_state=0, module__hidden_units=8)
    call_unchanged(clf.fit, X, y)
    call_unchanged(clf.partial_fit, X, y)
    learned = HierarchicalClassifier(max_epochs=1, random_state=0, module__hidden_units=8)
    call_unchanged(learned.partial_fit, X, y, classes=data["paths"])


@pytest.mark.parametrize("x_kind", X_KINDS)
def test_prediction_leaves_x_and_y_unchanged(data, fitted, x_kind):
    clf, X = fitted[x_kind], data[x_kind]
    for method in ("predict", "predict_proba", "predict_log_proba", "predict_answer_proba", "predict_confidence",
                   "predict_labels", "predict_node", "decision_function"):
        call_unchanged(getattr(clf, method), X)
    call_unchanged(clf.predict_top_k, X, k=2, return_log_prob=True)
    for y_kind in Y_KINDS:
        call_unchanged(clf.score, X, data[y_kind])
    for name in ("hierarchical_f1", "neg_tree_distance"):
        call_unchanged(metrics.get_scorer(name), clf, X, data["labels"])
    with_hf1 = clf.set_params(decoding="hf1")
    try:
        call_unchanged(with_hf1.predict, X)
    finally:
        clf.set_params(decoding="best")


def test_class_text_pipeline_leaves_documents_and_labels_unchanged(data):
    from sklearn.feature_extraction.text import TfidfVectorizer

    tree = data["tree"]
    docs = [f"word{i % 7} thing{i % 3} {label}" for i, label in enumerate(data["labels"])]
    texts = {label: f"about {label}" for label in tree.labels}
    clf = ClassTextClassifier(TfidfVectorizer(), HierarchicalClassifier(tree, max_epochs=1, random_state=0),
                              class_text=texts)
    call_unchanged(clf.fit, docs, data["ragged"])
    call_unchanged(clf.predict, docs)
    call_unchanged(clf.score, docs, data["labels"])


# ---------------------------------------------------------------------------- the encoder
@pytest.mark.parametrize("y_kind", Y_KINDS)
def test_path_encoder_leaves_labels_and_paths_unchanged(data, y_kind):
    y = data[y_kind]
    encoder = PathEncoder(data["tree"])
    paths = call_unchanged(encoder.fit_transform, y)
    call_unchanged(encoder.fit, y)
    call_unchanged(encoder.transform, y)
    call_unchanged(encoder.inverse_transform, paths)
    call_unchanged(PathEncoder().fit, data["paths"])


# ---------------------------------------------------------------------------- metrics
def test_metrics_leave_their_inputs_unchanged(data):
    tree, labels, paths, ragged = data["tree"], data["labels"], data["paths"], data["ragged"]
    pred = np.roll(labels, 1)
    pred_paths = [list(p) for p in np.roll(paths, 1).tolist()]
    weight = np.linspace(0.5, 1.5, labels.size)
    for fn in (metrics.hierarchical_precision_score, metrics.hierarchical_recall_score,
               metrics.hierarchical_f1_score, metrics.exact_path_accuracy_score, metrics.level_accuracy_score,
               metrics.mistake_severity):
        call_unchanged(fn, labels, pred, tree, sample_weight=weight)
        call_unchanged(fn, ragged, pred_paths)
        call_unchanged(fn, paths, np.roll(paths, 1, axis=0))
    call_unchanged(metrics.hierarchical_fbeta_score, labels, pred, tree, beta=2.0)
    call_unchanged(metrics.tree_distance, labels, pred, tree)
    call_unchanged(metrics.mean_tree_distance, ragged, pred_paths)
    call_unchanged(metrics.check_paths, labels, pred, tree, sample_weight=weight)
    call_unchanged(metrics.hierarchical_classification_report, ragged, pred_paths, output_dict=True)
    ids = tree.to_ids(labels)
    call_unchanged(metrics.hierarchical_f1_score, ids, np.roll(ids, 1), tree, input_type="ids")
    correct = (labels == pred).astype(np.float64)
    call_unchanged(metrics.expected_calibration_error, correct, np.linspace(0, 1, labels.size))


# ---------------------------------------------------------------------------- trees and DAGs
def test_tree_and_dag_builders_leave_their_inputs_unchanged(data):
    tree = data["tree"]
    parents, names = tree.parents.tolist(), tree.labels.tolist()
    call_unchanged(Tree.from_parents, parents, names)
    call_unchanged(Tree.from_parents, np.array(parents), np.array(names))
    edges = [(label, None if p < 0 else names[p]) for label, p in zip(names, parents)]
    call_unchanged(Tree.from_edges, edges)
    call_unchanged(Tree.from_paths, data["ragged"])
    call_unchanged(Tree.from_paths, data["paths"])
    nested = {"a": {"b": {}, "c": {"d": {}}}, "e": {}}
    call_unchanged(Tree.from_dict, nested)
    call_unchanged(tree.to_ids, data["labels"])
    call_unchanged(tree.to_ids, data["ragged"][0])
    ids = tree.to_ids(data["labels"])
    call_unchanged(tree.to_labels, ids)
    dag_edges = [("dog", "pet"), ("dog", "canine"), ("cat", "pet"), ("wolf", "canine")]
    dag = call_unchanged(Dag.from_edges, dag_edges)
    call_unchanged(Dag.from_tree, tree)
    call_unchanged(unroll_dag, dag)


# ---------------------------------------------------------------------------- label sets and DAGs
@pytest.fixture
def multi():
    rng = np.random.default_rng(1)
    dag = Dag.from_edges([("dog", "pet"), ("dog", "canine"), ("cat", "pet"), ("wolf", "canine")])
    X = np.repeat(np.eye(3), 8, axis=0) + 0.1 * rng.standard_normal((24, 3))
    sets = [["dog"]] * 8 + [["cat", "wolf"]] * 8 + [["pet"]] * 8
    dense = np.zeros((24, dag.n_nodes), dtype=np.int64)
    for i, labels in enumerate(sets):
        dense[i, [int(np.flatnonzero(dag.labels == label)[0]) for label in labels]] = 1
    return {"dag": dag, "X": X, "X_sparse": _messy_csr(X, rng), "sets": sets,
            "dense": dense, "sparse": _messy_indicator(dense, rng)}


@pytest.mark.parametrize("x_kind", X_KINDS)
@pytest.mark.parametrize("y_kind", ["sets", "dense", "sparse"])
def test_multi_label_classifier_leaves_x_and_label_sets_unchanged(multi, x_kind, y_kind):
    X, y = multi[x_kind], multi[y_kind]
    clf = MultiLabelHierarchicalClassifier(multi["dag"], semantics="terminal", max_epochs=1, random_state=0,
                                           module__hidden_units=8)
    call_unchanged(clf.fit, X, y)
    call_unchanged(clf.partial_fit, X, y)
    for method in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        call_unchanged(getattr(clf, method), X)
    call_unchanged(clf.predict_top_k, X, k=2)
    call_unchanged(clf.score, X, y)


def test_dag_metrics_leave_label_sets_unchanged(multi):
    dag, sets, sparse = multi["dag"], multi["sets"], multi["sparse"]
    pred = _messy_indicator(np.roll(multi["dense"], 1, axis=0), np.random.default_rng(2))
    for fn in (metrics.hierarchical_precision_score_dag, metrics.hierarchical_recall_score_dag,
               metrics.hierarchical_f1_score_dag):
        call_unchanged(fn, sets, pred, dag)
        call_unchanged(fn, sparse, pred, dag)
        call_unchanged(fn, multi["dense"], sets, dag)
    call_unchanged(metrics.hierarchical_fbeta_score_dag, sparse, sets, dag, beta=0.5)
    call_unchanged(metrics.dag_node_set_counts, sets, sparse, dag)
