"""Growing a fitted classifier's tree: the larger tree checked, the weights carried over, new
classes learnt from a few rows without forgetting the old ones, every fitted part moved."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from support import sparse_rows

from hiclass_parallel import Tree, TreeError
from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.estimators.fitting._grow import grown_ids

OLD = [("A", None), ("B", None), ("C", None), ("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B")]
NEW = [("a3", "A"), ("c1", "C"), ("c2", "C"), ("D", None), ("d1", "D")]
VOCABULARY = 60


def _tree(edges, seed=None) -> Tree:
    """A tree of ``edges``, its node ids shuffled when ``seed`` is given."""
    edges = list(edges)
    if seed is not None:
        edges = [edges[i] for i in np.random.default_rng(seed).permutation(len(edges))]
    return Tree.from_edges(edges)


def _rows(labels, n_per, rng):
    """Sparse rows: three words of the row's class, two of its parent's, two at random;
    unit length, as a vectorizer gives them."""
    names = [c for c, _ in OLD + NEW]
    parent = dict(OLD + NEW)
    rows, y = [], []
    for label in labels:
        k = names.index(label)
        up = names.index(parent[label]) if parent[label] else k
        for _ in range(n_per):
            words = [3 * k, 3 * k + 1, 3 * k + 2, 3 * up, 3 * up + 1, *rng.integers(0, VOCABULARY, 2)]
            row = np.zeros(VOCABULARY, dtype=np.float32)
            np.add.at(row, np.minimum(words, VOCABULARY - 1), rng.uniform(0.5, 1.0, len(words)))
            rows.append(row / np.linalg.norm(row))
            y.append(label)
    return sp.csr_matrix(np.array(rows)), np.array(y, dtype=object)


OLD_LEAVES = ["a1", "a2", "b1", "b2", "C"]
NEW_LEAVES = ["a3", "c1", "c2", "d1"]


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X, y = _rows(OLD_LEAVES, 30, rng)
    clf = HierarchicalClassifier(_tree(OLD), semantics="terminal", max_epochs=15, random_state=0,
                                 calibration="beta", calibration_size=0.3).fit(X, y)
    return clf


def test_the_larger_tree_is_checked_and_the_first_difference_named():
    old = _tree(OLD)
    ids = grown_ids(old, _tree(OLD + NEW, seed=3))
    new = _tree(OLD + NEW, seed=3)
    assert new.labels[ids].tolist() == old.labels.tolist()
    with pytest.raises(TreeError, match="lacks 'b2'"):
        grown_ids(old, _tree([e for e in OLD + NEW if e[0] != "b2"]))
    with pytest.raises(TreeError, match="moves 'a2': its parent is 'A' in the fitted tree, 'B' in the new one"):
        grown_ids(old, _tree([("a2", "B") if c == "a2" else (c, p) for c, p in OLD + NEW]))
    with pytest.raises(TreeError, match="moves 'B': its parent is the top level in the fitted tree, 'A'"):
        grown_ids(old, _tree([("B", "A") if c == "B" else (c, p) for c, p in OLD + NEW]))
    with pytest.raises(TreeError, match="holds no new class"):
        grown_ids(old, _tree(OLD, seed=1))
    renamed = Tree.from_paths([["x", "y"], ["x", "z"]])
    with pytest.raises(TreeError, match="kind"):
        grown_ids(old, Tree.from_parents([-1, 0]))
    with pytest.raises(TreeError, match="renames"):
        grown_ids(renamed, Tree(renamed.parents.tolist() + [0], labels=list(renamed.labels) + [("x", "w")],
                                names=["x", "yy", "z", "w"]))
    with pytest.raises(TypeError, match="must be a Tree"):
        grown_ids(old, "not a tree")


@pytest.mark.parametrize("partition", ["sibling", "level"])
@pytest.mark.parametrize("stop", [False, True])
def test_the_old_columns_score_as_before_when_nothing_is_trained(partition, stop):
    rng = np.random.default_rng(1)
    X, y = _rows(OLD_LEAVES, 8, rng)
    clf = HierarchicalClassifier(_tree(OLD, seed=2), partition=partition, stop=stop, max_epochs=2, random_state=0,
                                 calibration=None, flat_term=None).fit(X, y)
    before = clf.decision_function(X)
    old_tree = clf.tree_
    new_tree = _tree(OLD + NEW, seed=5)  # other ids
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no calibrator to drop: no warning
        clf.grow(new_tree)
    assert clf.tree_ is new_tree and clf.tree is new_tree and clf.classes_.tolist() == new_tree.labels.tolist()
    after = clf.decision_function(X)
    ids = new_tree.to_ids(old_tree.labels)
    assert np.allclose(after[:, ids], before[:, : old_tree.n_classes], atol=1e-5)
    if stop and partition == "sibling":  # the stop of an old internal node moved with it
        from hiclass_parallel.ops.groups import stop_columns

        old_stop, new_stop = stop_columns(old_tree, partition), stop_columns(new_tree, partition)
        a_old, a_new = old_tree.to_ids(["A"])[0], new_tree.to_ids(["A"])[0]
        assert np.allclose(after[:, new_stop[a_new]], before[:, old_stop[a_old]], atol=1e-5)
    assert clf.grown_["epochs"] == 0 and clf.grown_["initialised_from"]["parent"] == len(NEW)
    assert sorted(clf.grown_["new_classes"].tolist()) == sorted(c for c, _ in NEW)


def test_new_classes_are_learnt_from_their_rows_and_the_old_ones_kept(fitted):
    rng = np.random.default_rng(7)
    X_old, y_old = _rows(OLD_LEAVES, 10, rng)
    X_new, y_new = _rows(NEW_LEAVES, 6, rng)
    X_test, y_test = _rows(NEW_LEAVES, 10, rng)
    old_before = (fitted.predict_node(X_old) == fitted.tree_.to_ids(y_old)).mean()
    clf = copy.deepcopy(fitted)
    with pytest.warns(UserWarning, match="grow drops the answer model's calibrator"):
        clf.grow(_tree(OLD + NEW, seed=11), X_new, y_new)
    assert clf.grown_["replayed"] > 0 and clf.grown_["epochs"] > 0
    assert clf.answer_.calibrator is None
    new_right = (clf.predict_node(X_test) == clf.tree_.to_ids(y_test)).mean()
    old_right = (clf.predict_node(X_old) == clf.tree_.to_ids(y_old)).mean()
    assert new_right >= 0.9
    assert old_right >= old_before - 0.05
    # old scores are the fitted ones: only the new rows trained
    ids = clf.tree_.to_ids(fitted.tree_.labels)
    assert np.allclose(clf.decision_function(X_old)[:, ids], fitted.decision_function(X_old)[:, :len(OLD)], atol=1e-5)
    # later training continues on the grown model (the tree parameter is the larger tree)
    clf.partial_fit(X_new, y_new)
    # the whole network can train too (old rows given beside the new ones)
    everything = copy.deepcopy(fitted)
    with pytest.warns(UserWarning, match="answer model's calibrator"):
        everything.grow(_tree(OLD + NEW), sp.vstack([X_new, X_old]), np.r_[y_new, y_old], train="all")
    assert not np.allclose(everything.decision_function(X_old)[:, everything.tree_.to_ids(fitted.tree_.labels)],
                           fitted.decision_function(X_old)[:, :len(OLD)], atol=1e-3)
    assert (everything.predict_node(X_test) == everything.tree_.to_ids(y_test)).mean() >= 0.9


def test_prototypes_follow_the_new_ids_and_the_linear_terms_are_dropped():
    rng = np.random.default_rng(2)
    X, y = _rows(OLD_LEAVES, 10, rng)
    clf = HierarchicalClassifier(_tree(OLD), max_epochs=3, random_state=0, calibration=None, prototypes=8.0,
                                 flat_term=4.0, path_term=2.0).fit(X, y)
    old_tree, sums = clf.tree_, clf.answer_.terms["prototypes"].sums.toarray()
    assert clf.answer_.term("flat_term") is not None and clf.answer_.term("path_term") is not None
    X_new, y_new = _rows(["a3"], 4, rng)
    new_tree = _tree(OLD + NEW, seed=4)
    with pytest.warns(UserWarning, match="grow drops the answer model's flat term: .* knows none of the new classes"), \
            pytest.warns(UserWarning, match="grow drops the answer model's path term: .* know none of the new classes"):
        clf.grow(new_tree, X_new, y_new, replay=None, max_epochs=1)
    ids = new_tree.to_ids(old_tree.labels)
    grown = clf.answer_.terms["prototypes"].sums.toarray()
    assert np.allclose(grown[ids], sums)
    a3 = new_tree.to_ids(["a3"])[0]
    assert np.allclose(grown[a3], X_new.toarray().sum(axis=0))
    assert clf.answer_.weights["prototypes"] == 8.0
    assert clf.answer_.term("flat_term") is None and "grew" in clf.config_.flat_term_reason
    assert clf.answer_.term("path_term") is None and clf.config_.path_term_reason == "dropped when the tree grew"
    assert clf.predict(X).shape == (X.shape[0], new_tree.n_levels)


def test_class_text_starts_a_new_class_without_rows_and_takes_no_old_answer(fitted):
    clf = copy.deepcopy(fitted)
    new_tree = _tree(OLD + NEW)
    names = [c for c, _ in OLD + NEW]
    text = np.zeros((new_tree.n_classes, VOCABULARY), dtype=np.float32)
    for label in NEW_LEAVES:  # the new leaves' own words, as their names would give
        k = names.index(label)
        text[new_tree.to_ids([label])[0], 3 * k: 3 * k + 3] = 1.0
    X_old, y_old = _rows(OLD_LEAVES, 10, np.random.default_rng(3))
    before = fitted.tree_.labels[fitted.predict_node(X_old)]
    with pytest.warns(UserWarning, match="answer model's calibrator"):
        clf.grow(new_tree, class_features=sp.csr_matrix(text))
    assert clf.grown_["initialised_from"]["class text"] == len(NEW_LEAVES)
    assert np.array_equal(clf.tree_.labels[clf.predict_node(X_old)], before)
    # imprinted: at its own text, a new class ties with the best of its group
    a3, groups = new_tree.to_ids(["a3"])[0], new_tree.groups("sibling")
    scores = clf.decision_function(sp.csr_matrix(text[[a3]]))[0]
    peers = np.flatnonzero((groups == groups[a3]) & (np.arange(new_tree.n_classes) != a3))
    assert scores[a3] == pytest.approx(scores[peers].max(), abs=1e-4)
    assert np.allclose(clf.answer_.terms["prototypes"].sums[a3].toarray(), text[a3])  # its text is its prototype
    with pytest.raises(ValueError, match="one row per class of the new tree"):
        copy.deepcopy(fitted).grow(new_tree, class_features=sp.csr_matrix(text[:3]))


def test_a_class_text_model_keeps_its_text_for_the_larger_tree():
    rng = np.random.default_rng(4)
    X, y = _rows(OLD_LEAVES, 8, rng)
    old = _tree(OLD)
    text = sparse_rows(old.n_classes, VOCABULARY, density=0.1, seed=0)
    clf = HierarchicalClassifier(old, semantics="terminal", max_epochs=2, random_state=0, calibration=None,
                                 module__class_features=text).fit(X, y)
    before = clf.decision_function(X)
    new_tree = _tree(OLD + NEW, seed=8)
    clf.grow(new_tree)
    ids = new_tree.to_ids(old.labels)
    assert clf.module__class_features.shape == (new_tree.n_classes, VOCABULARY)
    assert np.allclose(clf.module__class_features[ids].toarray(), text.toarray())
    assert np.allclose(clf.decision_function(X)[:, ids], before[:, : old.n_classes], atol=1e-4)


def test_a_grown_model_saves_and_loads(tmp_path, fitted):
    from hiclass_parallel.estimators import load_classifier, save_classifier

    clf = copy.deepcopy(fitted)
    X_new, y_new = _rows(NEW_LEAVES, 3, np.random.default_rng(5))
    with pytest.warns(UserWarning, match="answer model's calibrator"):
        clf.grow(_tree(OLD + NEW, seed=9), X_new, y_new, max_epochs=2)
    save_classifier(clf, tmp_path / "model")
    loaded = load_classifier(tmp_path / "model")
    assert loaded.tree_ == clf.tree_
    assert np.array_equal(loaded.predict(X_new), clf.predict(X_new))


def test_a_failed_grow_changes_nothing(fitted):
    from hiclass_parallel import UnknownLabelError

    clf = copy.deepcopy(fitted)
    tree, net, prototypes, calibrator = clf.tree, clf.net_, clf.answer_.terms["prototypes"], clf.answer_.calibrator
    X_new, _ = _rows(["a3"], 2, np.random.default_rng(6))
    with pytest.raises(UnknownLabelError, match="zz"):
        clf.grow(_tree(OLD + NEW), X_new, ["a3", "zz"])
    with pytest.raises(ValueError, match="rows X with their labels y, or neither"):
        clf.grow(_tree(OLD + NEW), X_new)
    with pytest.raises(ValueError, match="train must be 'new'"):
        clf.grow(_tree(OLD + NEW), train="some")
    with pytest.raises(ValueError, match="replay must be"):
        clf.grow(_tree(OLD + NEW), replay="all")
    with pytest.raises(TreeError, match="lacks"):
        clf.grow(_tree([e for e in OLD + NEW if e[0] != "a1"]))
    assert clf.tree is tree and clf.net_ is net and clf.answer_.terms["prototypes"] is prototypes and clf.answer_.calibrator is calibrator
    assert clf.tree_.n_classes == len(OLD) and not hasattr(clf, "grown_")


def test_the_input_rows_of_features_the_fit_never_saw_learn_and_nothing_else_moves(monkeypatch):
    import hiclass_parallel.estimators.fitting._grow as grow_module

    names = [c for c, _ in OLD + NEW]
    new_words = np.array([3 * names.index(c) + i for c in NEW_LEAVES for i in range(3)])
    rng = np.random.default_rng(8)
    X, y = _rows(OLD_LEAVES, 20, rng)
    X = X.tolil()
    X[:, new_words] = 0.0  # the fit never sees the new classes' own words
    X = sp.csr_matrix(X)
    X.eliminate_zeros()
    fitted = HierarchicalClassifier(_tree(OLD), semantics="terminal", max_epochs=10, random_state=0,
                                    calibration=None, flat_term=None).fit(X, y)
    X_new, y_new = _rows(NEW_LEAVES, 4, rng)
    X_test, y_test = _rows(NEW_LEAVES, 10, rng)
    new_tree = _tree(OLD + NEW, seed=12)

    def grown(scale):
        monkeypatch.setattr(grow_module, "UNSEEN_INPUT_LR_SCALE", scale)
        clf = copy.deepcopy(fitted)
        clf.grow(new_tree, X_new, y_new)
        return clf

    clf, frozen = grown(30.0), grown(0.0)
    unseen = np.setdiff1d(X_new.indices, X.indices)  # the new classes' words and their new parent's
    assert clf.grown_["unseen_features"] == unseen.size > 0
    before = fitted.net_.module_.input.embedding.weight.detach().numpy()
    after = clf.net_.module_.input.embedding.weight.detach().numpy()
    changed = np.flatnonzero(np.abs(after - before).max(axis=1) > 0)
    assert set(changed.tolist()) <= set(unseen.tolist()) and changed.size > 0
    ids = clf.tree_.to_ids(fitted.tree_.labels)
    # rows made of features the fit saw: the old classes score as before
    assert np.allclose(clf.decision_function(X)[:, ids], fitted.decision_function(X)[:, :len(OLD)], atol=1e-5)
    # a row holding a feature it never saw scores differently
    assert not np.allclose(clf.decision_function(X_test)[:, ids], fitted.decision_function(X_test)[:, :len(OLD)],
                           atol=1e-3)
    # the new classes' own words now carry them: their true paths are likelier than with a frozen input layer
    true = new_tree.to_ids(y_test)

    def true_proba(model):
        return model.predict_proba(X_test)[np.arange(true.size), model.tree_.to_ids(y_test)].mean()
    assert true_proba(clf) > true_proba(frozen) + 0.05
