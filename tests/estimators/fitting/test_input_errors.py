"""Inputs the classifiers read as given, or refuse naming the input: labels that mix strings and
numbers keep their type; an ``X`` that requires grad predicts; a re-ranking weight set after fit
for a term the fit did not build warns; and a tree name holding ``path_sep``, ``y`` mixing labels
and paths, node ids out of range, a CSR matrix with damaged column indices and a multi-label
model given to ``save_classifier`` each get an error that names what is wrong."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from support import sparse_rows

from hiclass_parallel import Tree, hierarchical_f1_score
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import (
    HierarchicalClassifier,
    IgnoredSettingWarning,
    MultiLabelHierarchicalClassifier,
    PathEncoder,
    save_classifier,
)

FAST = {"max_epochs": 2, "random_state": 0}
MIXED_EDGES = [(1, None), ("a", 1), ("b", None), (2, "b")]


@pytest.fixture(scope="module")
def data():
    return make_hierarchical_classification(n_samples=200, n_features=6, branching=2, depth=2, random_state=0)


def _rows(n: int = 120, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 5)).astype(np.float32)


# ------------------------------------------------------------------ labels mixing str and int
def test_mixed_labels_with_their_tree_keep_type_and_identity():
    tree = Tree.from_edges(MIXED_EDGES)
    X = _rows()
    clf = HierarchicalClassifier(tree, **FAST).fit(X, [1, "a", "b", 2] * 30)
    assert clf.classes_.tolist() == [1, "a", "b", 2]
    assert [type(v) for v in clf.classes_] == [int, str, str, int]
    answers = clf.predict_labels(X)
    assert {type(v) for v in answers} <= {int, str}
    assert set(answers.tolist()) <= {1, "a", "b", 2}
    assert "1" not in answers.tolist() and "2" not in answers.tolist()
    # the same tree's label paths, and scoring them, read the ints as ints
    clf.fit(X, [[1, "a"], ["b", 2]] * 60)
    assert 0.0 <= clf.score(X, [[1, "a"], ["b", 2]] * 60) <= 1.0
    assert hierarchical_f1_score([1, "a", 2], [1, "a", "b"], tree) == pytest.approx(8 / 9)


def test_mixed_label_paths_learn_their_tree_as_they_are():
    clf = HierarchicalClassifier(**FAST).fit(_rows(), [["a", 1], ["b", ""], ["b", 2]] * 40)
    assert clf.tree_.labels.tolist() == ["a", 1, "b", 2]  # "" pads, 1 and 2 stay ints
    assert [type(v) for v in clf.tree_.labels] == [str, int, str, int]


@pytest.mark.parametrize("y", [[1, "a", 2] * 40, np.array([1, "a", 2] * 40, dtype=object)])
def test_mixed_labels_without_a_tree_are_refused_by_name(y):
    with pytest.raises(ValueError, match=r"y mixes string and non-string labels \(e\.g\. 'a' and 1\)"):
        HierarchicalClassifier(**FAST).fit(_rows(), y)


# ------------------------------------------------------------------ X that requires grad
def test_every_predict_method_takes_a_tensor_that_requires_grad(data):
    X, y, tree = data
    X = torch.tensor(X, dtype=torch.float32, requires_grad=True)
    # A fixed weight builds the prototypes (a tensor's rows are not held out to learn one), so
    # the re-ranking, which reads X on the host, is on.
    clf = HierarchicalClassifier(tree, prototypes=16.0, **FAST).fit(X, y)
    assert clf.answer_.term("prototypes") is not None
    plain = X.detach()
    for method, args in [("predict", ()), ("predict_labels", ()), ("predict_node", ()), ("predict_top_k", (2,)),
                         ("predict_confidence", ()), ("predict_proba", ()), ("decision_function", ())]:
        got, expected = getattr(clf, method)(X, *args), getattr(clf, method)(plain, *args)
        assert np.array_equal(np.asarray(got), np.asarray(expected)), method
    assert clf.score(X, y) == clf.score(plain, y)
    assert X.grad is None and X.requires_grad  # the caller's tensor is left as it was


# ------------------------------------------------------------------ settings the fit did not prepare
@pytest.mark.parametrize("name, value", [("prototypes", 3.0), ("flat_term", 5.0)])
def test_a_term_weight_set_after_fit_without_the_term_warns(data, name, value):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, prototypes=None, flat_term=None, path_term=None, **FAST).fit(X, y)
    assert clf.answer_.term(name) is None
    before = clf.predict(X)
    clf.set_params(**{name: value})
    with pytest.warns(IgnoredSettingWarning, match=rf"{name}={value!r} asks to re-rank .* fit again with {name}="):
        after = clf.predict(X)
    assert np.array_equal(before, after)  # what the warning says: the setting changed nothing
    with pytest.warns(IgnoredSettingWarning) as record:
        clf.predict_top_k(X, 2)
    assert record[0].filename == __file__  # points at the caller, not inside the package


def test_settings_the_fit_prepared_or_auto_do_not_warn(data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, **FAST).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IgnoredSettingWarning)
        clf.set_params(prototypes=2.0).predict(X)  # prototypes were built: the weight applies
        clf.set_params(prototypes=None, flat_term=0.0).predict(X)  # asks for no term
        HierarchicalClassifier(tree, prototypes=None, **FAST).fit(X, y).set_params(prototypes="auto").predict(X)


# ------------------------------------------------------------------ errors that name the input
def test_a_given_tree_whose_name_holds_path_sep_is_named():
    tree = Tree.from_edges([("a/b", None), ("c", "a/b"), ("d", None)])
    with pytest.raises(ValueError, match=r"path_sep='/' .* the tree's name 'a/b' \(node 0\) holds it"):
        HierarchicalClassifier(tree, path_sep="/", **FAST).fit(_rows(60), ["a/b/c", "d"] * 30)
    with pytest.raises(ValueError, match=r"the tree's name 'a/b' \(node 0\) holds it"):
        PathEncoder(tree, path_sep="/").fit(["d"])


def test_y_mixing_labels_and_paths_names_the_rows():
    message = r"y mixes plain labels and label paths: row 0 is 'a' but row 1 is \['b', 'c'\]"
    with pytest.raises(ValueError, match=message):
        HierarchicalClassifier(**FAST).fit(_rows(60), ["a", ["b", "c"]] * 30)
    with pytest.raises(ValueError, match=r"y_true mixes plain labels and label paths"):
        hierarchical_f1_score(["a", ["a", "b"]], ["a", "a"], Tree.from_paths([["a", "b"]]))


@pytest.mark.parametrize("paths, where", [([[999, -1]], r"row 0, column 0 holds 999"),
                                          ([[0, 1], [0, -5]], r"row 1, column 1 holds -5")])
def test_inverse_transform_names_the_node_id_out_of_range(paths, where):
    encoder = PathEncoder().fit([["a", "b"], ["c", "d"]])
    with pytest.raises(IndexError, match=rf"paths: {where}, which is not a node id of the tree \(node ids are in "
                                         r"\[0, 4\); -1 pads a path\)"):
        encoder.inverse_transform(paths)


@pytest.mark.parametrize("bad", [10**6, -3])
def test_a_csr_matrix_with_a_column_index_out_of_range_is_named(bad):
    X = sparse_rows(60, 20, density=0.3, seed=0)
    y = [["a", "b"], ["c", "d"]] * 30
    clf = HierarchicalClassifier(**FAST).fit(X, y)
    damaged = X.copy()
    damaged.indices[5] = bad  # scipy checks indices it builds, not ones written afterwards
    row = int(np.searchsorted(damaged.indptr, 5, side="right") - 1)
    message = rf"stored entry 5 \(row {row}\) has column index {bad}, outside \[0, 20\)"
    with pytest.raises(ValueError, match=message):
        clf.predict(damaged)
    with pytest.raises(ValueError, match=message):
        HierarchicalClassifier(**FAST).fit(damaged, y)


def test_save_classifier_says_a_multilabel_model_over_a_tree_is_over_a_tree(tmp_path):
    tree = Tree.from_edges([("a", None), ("b", "a"), ("c", None)])
    clf = MultiLabelHierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(_rows(60), [["a", "b"], ["c"]] * 30)
    with pytest.raises(TypeError, match=r"predicts label sets \(fitted over a plain tree, hierarchy_\)") as info:
        save_classifier(clf, tmp_path / "model")
    assert "several parents" not in str(info.value)
