"""HierarchicalClassifier: learning, decoding, scikit-learn plumbing, devices, bad input.

Trees are tiny and fits take a few epochs, so the module runs in well under a minute on two
cores. The fitted models that several tests read are module-scoped fixtures.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from skorch.callbacks import ProgressBar
from skorch.dataset import ValidSplit
from torch import nn

from hiclass_parallel import Tree, UnknownLabelError
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import MLP, HierarchicalClassifier, PathEncoder

FAST = {"max_epochs": 6, "batch_size": 64, "module__hidden_units": 32, "random_state": 0}


# Tiny models: thread hand-offs cost more than the work (see conftest.one_torch_thread).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    """A 3-level tree of 39 classes with 30% of labels cut to an ancestor."""
    X, y, tree, truth = make_hierarchical_classification(
        n_samples=1500, n_features=20, branching=3, depth=3, truncate_fraction=0.3, return_truth=True, random_state=0
    )
    return X[:1000], y[:1000], X[1000:], truth[1000:], tree


@pytest.fixture(scope="module")
def fitted(data):
    X, y, _, _, tree = data
    torch.set_num_threads(1)
    return HierarchicalClassifier(tree, max_epochs=10, module__hidden_units=64, random_state=0).fit(X, y)


@pytest.fixture(scope="module")
def small():
    X, y, tree = make_hierarchical_classification(n_samples=200, n_features=6, branching=2, depth=3, random_state=1)
    return X, y, tree


def assert_valid_paths(paths: np.ndarray, tree: Tree, pad) -> None:
    """Every row is exactly the ancestral path of its last label."""
    lookup = np.append(tree.labels.astype(object), np.array([pad], dtype=object))
    ids = PathEncoder(tree, pad_label=pad).fit(tree.labels[:1]).transform(paths.astype(object))
    np.testing.assert_array_equal(lookup[ids].astype(paths.dtype), paths)


# ---------------------------------------------------------------------------- learning
def test_beats_chance_widely_at_every_level(fitted, data):
    _, _, X_test, truth, tree = data
    pred = tree.to_ids(fitted.predict_labels(X_test))
    true = tree.to_ids(truth)
    for level in range(tree.n_levels):
        accuracy = np.mean(tree.paths[pred, level] == tree.paths[true, level])
        # Chance: always guessing the most frequent class of the level.
        chance = np.unique(tree.paths[true, level], return_counts=True)[1].max() / len(true)
        assert accuracy > chance + 0.3, (level, accuracy, chance)


def test_terminal_labels_predict_internal_nodes_where_truth_is_internal():
    X, y, tree = make_hierarchical_classification(
        n_samples=1500, n_features=20, branching=3, depth=3, terminal_fraction=0.35, class_sep=2.0, drift=0.6,
        random_state=2
    )
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=15, module__hidden_units=64, random_state=0)
    clf.fit(X[:1000], y[:1000])
    assert clf.stop_ and clf.n_scores_ > tree.n_classes
    truth, pred = tree.to_ids(y[1000:]), clf.predict_node(X[1000:])
    truth_internal, pred_internal = ~tree.is_leaf[truth], ~tree.is_leaf[pred]
    # Internal truths mostly get internal predictions (often the very node), leaves seldom do.
    assert pred_internal[truth_internal].mean() > 0.6
    assert pred_internal[truth_internal].mean() > pred_internal[~truth_internal].mean() + 0.25
    assert (pred == truth)[truth_internal].mean() > 0.4
    # The same model decoded with partial semantics always ends at leaves.
    clf.set_params(semantics="partial")
    assert tree.is_leaf[clf.predict_node(X[1000:])].all()


@pytest.mark.parametrize("partition", ["level", "sibling"])
def test_predict_gives_valid_label_paths(partition, small):
    X, y, tree = small
    clf = HierarchicalClassifier(tree, partition=partition, **FAST).fit(X, y)
    paths = clf.predict(X)
    assert paths.shape == (len(X), tree.n_levels) and paths.dtype == object
    assert_valid_paths(paths, tree, "")
    np.testing.assert_array_equal(clf.predict_labels(X), tree.labels[clf.predict_node(X)])
    np.testing.assert_array_equal(paths[:, -1], clf.predict_labels(X))  # partial semantics: leaves


def test_int_labels_pad_with_minus_one_and_custom_pad():
    X, y, tree = make_hierarchical_classification(n_samples=150, n_features=5, branching=2, depth=2, labels="int",
                                                  truncate_fraction=0.5, random_state=0)
    clf = HierarchicalClassifier(tree, semantics="terminal", **FAST).fit(X, y)
    paths = clf.predict(X)
    assert paths.dtype == np.int64 and clf.pad_label_ == -1
    assert_valid_paths(paths, tree, -1)
    clf = HierarchicalClassifier(tree, pad_label="none", **FAST).fit(X, y)
    assert clf.predict(X).dtype == object and clf.pad_label_ == "none"
    with pytest.raises(ValueError, match="pad_label 0 is a label of the tree"):
        HierarchicalClassifier(tree, pad_label=0, **FAST).fit(X, y)


def test_label_paths_ragged_lists_and_learnt_tree(small):
    X, y, tree = small
    ids = tree.to_ids(y)
    paths = np.where(tree.paths[ids] >= 0, tree.labels[np.maximum(tree.paths[ids], 0)], "").astype(object)
    by_labels = HierarchicalClassifier(tree, **FAST).fit(X, y).predict_proba(X)
    by_paths = HierarchicalClassifier(tree, **FAST).fit(X, paths).predict_proba(X)
    np.testing.assert_allclose(by_labels, by_paths, atol=1e-6)
    ragged = [[v for v in row if v] for row in paths.tolist()]
    HierarchicalClassifier(tree, **FAST).fit(X, ragged)
    learnt = HierarchicalClassifier(**FAST).fit(X, paths)  # tree=None: learnt from the paths
    assert learnt.tree_.n_classes == len(set(paths.ravel()) - {""})
    assert_valid_paths(learnt.predict(X), learnt.tree_, "")
    flat = HierarchicalClassifier(**FAST).fit(X, y)  # tree=None and 1-D labels: a flat tree
    assert flat.tree_.n_levels == 1 and flat.classes_.tolist() == sorted(set(y))


# ---------------------------------------------------------------------------- probabilities
@pytest.mark.parametrize("partition", ["level", "sibling"])
@pytest.mark.parametrize("stop", [False, True])
def test_predict_proba_groups_sum_to_one(partition, stop, small):
    X, y, tree = small
    clf = HierarchicalClassifier(tree, partition=partition, stop=stop, **FAST).fit(X, y)
    proba = clf.predict_proba(X)
    assert proba.shape == (len(X), tree.n_classes)
    groups = tree.groups(partition)
    sums = np.stack([proba[:, groups == g].sum(axis=1) for g in np.unique(groups)], axis=1)
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X)), proba, rtol=1e-5)
    scores = clf.decision_function(X)
    assert scores.shape == (len(X), clf.n_scores_)
    if stop:
        stop_proba = clf.predict_stop_proba(X)
        assert stop_proba.shape == (len(X), clf.n_scores_ - tree.n_classes)
        assert ((stop_proba >= 0) & (stop_proba <= 1)).all()
    else:
        assert clf.n_scores_ == tree.n_classes
        with pytest.raises(ValueError, match="no stop scores"):
            clf.predict_stop_proba(X)


def test_outputs_are_batch_invariant(fitted, data):
    _, _, X_test, _, _ = data
    X = X_test[:50]
    proba = fitted.predict_proba(X)
    paths = fitted.predict(X)
    one_by_one = np.concatenate([fitted.predict_proba(X[i:i + 1]) for i in range(len(X))])
    np.testing.assert_allclose(one_by_one, proba, rtol=1e-5, atol=1e-7)
    # A sample's output does not depend on its neighbours or the batch size.
    model = pickle.loads(pickle.dumps(fitted)).set_params(batch_size=7)
    order = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_allclose(model.predict_proba(X[order]), proba[order], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(model.predict(X[order]), paths[order])


def test_batch_size_after_fit_sizes_prediction_without_changing_the_fitted_net(fitted, data):
    X = data[2][:50]
    model = pickle.loads(pickle.dumps(fitted)).set_params(batch_size=7)
    sizes = []
    model._per_batch(X, lambda scores: sizes.append(scores.shape[0]) or scores)
    assert sizes == [7] * 7 + [1]
    assert model.net_.batch_size == fitted.net_.batch_size == fitted.config_.batch_size != 7


def test_decoding_options_after_fit(fitted, data):
    _, _, X_test, _, tree = data
    X = X_test[:40]
    best = fitted.predict(X)
    top, log_prob = fitted.predict_top_k(X, k=4, return_log_prob=True)
    assert top.shape == (40, 4, tree.n_levels) and log_prob.shape == (40, 4)
    np.testing.assert_array_equal(top[:, 0], best)
    own = pickle.loads(pickle.dumps(fitted)).set_params(prototypes=None)  # the prototypes re-rank the top k
    _, own_log_prob = own.predict_top_k(X, k=4, return_log_prob=True)
    assert (np.diff(own_log_prob, axis=1) <= 1e-6).all()  # the model's own order: most probable first
    assert fitted.predict_top_k(X).shape[1] == fitted.top_k
    with pytest.raises(ValueError, match="k=999"):
        fitted.predict_top_k(X, k=999)
    model = pickle.loads(pickle.dumps(fitted))
    model.set_params(decoding="threshold", threshold=0.5)
    assert_valid_paths(model.predict(X), tree, "")
    with pytest.raises(ValueError, match="stop"):
        model.set_params(semantics="terminal").predict(X)


# ---------------------------------------------------------------------------- scikit-learn plumbing
def test_attributes(fitted, data):
    X, _, _, _, tree = data
    assert fitted.tree_ is tree and fitted.classes_ is tree.labels
    assert fitted.n_features_in_ == X.shape[1] and fitted.n_levels_ == 3
    # dense X: MLP, which scores columns on demand, so the sibling partition trained path-locally
    assert fitted.partition_ == "sibling" and fitted.path_local_ and fitted.stop_ is False and fitted.pad_label_ == ""
    assert isinstance(fitted.net_.module_, MLP)
    assert not hasattr(fitted, "feature_names_in_")


def test_feature_names_in():
    pd = pytest.importorskip("pandas")
    X, y, tree = make_hierarchical_classification(n_samples=60, n_features=3, branching=2, depth=2, random_state=0)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    clf = HierarchicalClassifier(tree, **FAST).fit(frame, y)
    assert clf.feature_names_in_.tolist() == ["a", "b", "c"]


def test_pipeline_with_standard_scaler(small):
    X, y, tree = small
    pipe = Pipeline([("scale", StandardScaler()), ("clf", HierarchicalClassifier(tree, **FAST))])
    pipe.fit(X * 100 + 5, y)
    assert pipe.predict(X[:3] * 100 + 5).shape == (3, tree.n_levels)
    # the pipeline's score is the hierarchical F1 of its own predictions (scaling applied once)
    from hiclass_parallel.metrics import hierarchical_f1_score

    expected = hierarchical_f1_score(y, pipe.predict(X * 100 + 5), tree)
    assert pipe.score(X * 100 + 5, y) == pytest.approx(expected)


def test_pipeline_with_tfidf_on_text():
    tree = Tree.from_dict({"animal": {"dog": None, "cat": None}, "plant": {"tree": None, "flower": None}})
    texts = [
        "a loyal dog barks at the mailman", "the puppy dog wags its tail", "dog fetches the stick",
        "a cat purrs on the sofa", "the kitten cat chases a mouse", "cat sleeps all day",
        "an oak tree with deep roots", "the pine tree keeps its needles", "tree bark and leaves",
        "a red rose flower blooms", "the tulip flower in spring", "flower petals and pollen",
        "some animal in the zoo", "a green plant in a pot",
    ]
    y = ["dog"] * 3 + ["cat"] * 3 + ["tree"] * 3 + ["flower"] * 3 + ["animal", "plant"]
    pipe = Pipeline([
        ("tfidf", TfidfVectorizer()),
        ("clf", HierarchicalClassifier(tree, max_epochs=40, lr=0.02, module__hidden_units=16, random_state=0)),
    ])
    pipe.fit(texts, y)
    assert sp.issparse(pipe[:-1].transform(texts))
    pred = pipe.predict(["a dog and a puppy", "a rose flower"])
    assert pred.tolist() == [["animal", "dog"], ["plant", "flower"]]


def test_sparse_input_is_made_dense_one_batch_at_a_time_for_dense_modules(small, monkeypatch):
    # A module without accepts_sparse (here MLP, given explicitly) gets dense batches.
    X, y, tree = small
    X_sparse = sp.csr_matrix(np.where(np.abs(X) > 1, X, 0.0))
    shapes = []
    original = sp.csr_matrix.toarray

    def spy(self, *args, **kwargs):
        shapes.append(self.shape)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(sp.csr_matrix, "toarray", spy)
    clf = HierarchicalClassifier(tree, module=MLP, **{**FAST, "batch_size": 32}).fit(X_sparse, y)
    proba = clf.predict_proba(X_sparse)
    assert clf.partition_ == "sibling" and clf.path_local_  # MLP's route, whatever the input's layout
    # the fit's batches of 32; its cross-fitting's folds train in equal batches of at most 1.5 times that
    assert shapes and max(rows for rows, _ in shapes) <= 48
    monkeypatch.setattr(sp.csr_matrix, "toarray", original)
    dense = HierarchicalClassifier(tree, **{**FAST, "batch_size": 32}).fit(X_sparse.toarray(), y)
    np.testing.assert_allclose(dense.predict_proba(X_sparse.toarray()), proba, rtol=1e-4, atol=1e-6)


def test_torch_input(small):
    X, y, tree = small
    by_numpy = HierarchicalClassifier(tree, **FAST).fit(X.astype(np.float32), y)
    by_torch = HierarchicalClassifier(tree, **FAST).fit(torch.as_tensor(X, dtype=torch.float32), y)
    expected = by_numpy.predict_proba(X)
    np.testing.assert_allclose(by_torch.predict_proba(torch.as_tensor(X)), expected, rtol=1e-5, atol=1e-6)
    assert by_torch.n_features_in_ == X.shape[1]


def test_torch_sparse_input_is_read_as_a_scipy_csr_matrix(small):
    """A torch sparse COO tensor as X gave torch's NotImplementedError. Sparse
    torch layouts are read as the scipy CSR matrix of the same values: same model, same answers."""
    X, y, tree = small
    X = np.where(X > 0.5, X, 0.0).astype(np.float32)
    by_scipy = HierarchicalClassifier(tree, **FAST).fit(sp.csr_matrix(X), y)
    expected = by_scipy.predict_proba(sp.csr_matrix(X))
    coo = torch.as_tensor(X).to_sparse()  # COO, uncoalesced handled too
    for Xt in (coo, torch.as_tensor(X).to_sparse_csr(), torch.as_tensor(X, dtype=torch.float64).to_sparse_coo()):
        clf = HierarchicalClassifier(tree, **FAST).fit(Xt, y)
        assert clf.path_local_ == by_scipy.path_local_ and clf.n_features_in_ == X.shape[1]
        np.testing.assert_allclose(clf.predict_proba(Xt), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(clf.predict(Xt), by_scipy.predict(sp.csr_matrix(X)))
    bad = torch.sparse_coo_tensor(torch.tensor([[1], [2]]), torch.tensor([float("nan")]), X.shape,
                                  check_invariants=True)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        by_scipy.predict(bad)
    hybrid = torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1, 3), (2, 6, 3), check_invariants=True)
    with pytest.raises(ValueError, match=r"torch sparse X must be 2-D .*shape \(2, 6, 3\)"):
        by_scipy.predict(hybrid)


def test_grid_search_over_lr_and_hidden_units_with_default_score(small):
    X, y, tree = small
    search = GridSearchCV(
        HierarchicalClassifier(tree, max_epochs=3, batch_size=64, random_state=0),
        {"lr": [0.003, 0.03], "module__hidden_units": [8, 32]},
        cv=KFold(2, shuffle=True, random_state=0),
    )
    search.fit(X, y)
    assert set(search.best_params_) == {"lr", "module__hidden_units"}
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_estimator_.net_.module_.layers[0].out_features == search.best_params_["module__hidden_units"]
    assert search.score(X, y) == search.best_estimator_.score(X, y)


def test_cross_validate(small):
    X, y, tree = small
    result = cross_validate(HierarchicalClassifier(tree, **FAST), X, y, cv=3, return_train_score=True)
    assert len(result["test_score"]) == 3 and (result["test_score"] > 0.3).all()


def test_score_is_the_hierarchical_f1_of_predict(fitted, data):
    from hiclass_parallel.metrics import hierarchical_f1_score

    _, _, X_test, truth, tree = data
    paths = fitted.predict(X_test)
    assert fitted.score(X_test, truth) == pytest.approx(hierarchical_f1_score(truth, paths, tree))
    weight = np.linspace(0, 1, len(truth))
    expected = hierarchical_f1_score(truth, paths, tree, sample_weight=weight)
    assert fitted.score(X_test, truth, sample_weight=weight) == pytest.approx(expected)


def test_get_params_clone_and_set_params_after_fit(small):
    X, y, tree = small
    clf = HierarchicalClassifier(tree, optimizer__weight_decay=1e-4, iterator_train__drop_last=False, **FAST)
    params = clf.get_params()
    assert params["module__hidden_units"] == 32 and params["optimizer__weight_decay"] == 1e-4
    assert params["tree"] is tree and params["lr"] is None  # resolved per module at fit
    copy = clone(clf)
    assert copy.get_params()["module__hidden_units"] == 32 and copy.tree == tree
    clf.fit(X, y)
    assert clf.net_.optimizer_.param_groups[0]["weight_decay"] == 1e-4
    clf.set_params(module__hidden_units=5, lr=0.01, module__dropout=0.1)
    assert clf.net_.module_.layers[0].out_features == 32  # takes effect at the next fit
    clf.fit(X, y)
    assert clf.net_.module_.layers[0].out_features == 5 and clf.net_.optimizer_.param_groups[0]["lr"] == 0.01
    assert not hasattr(clone(clf), "net_")


def test_shared_parameters_are_read_from_the_signatures_and_reach_the_net(small):
    from hiclass_parallel.estimators.fitting._params import net_param_names

    # Derived from HierarchicalClassifier's and skorch NeuralNet's signatures, not listed by hand.
    assert net_param_names(HierarchicalClassifier) == ("lr", "max_epochs", "batch_size", "verbose", "device")
    X, y, tree = small
    clf = HierarchicalClassifier(tree, iterator_train__shuffle=False, **{**FAST, "max_epochs": 1, "batch_size": 16})
    clf.fit(X, y)
    net = clf.net_.get_params(deep=False)
    assert {k: net[k] for k in net_param_names(HierarchicalClassifier)} == {
        "lr": 3e-3, "max_epochs": 1, "batch_size": 16, "verbose": 0, "device": "cpu"
    }
    assert net["iterator_train__shuffle"] is False  # a user's prefixed parameter wins over the default


def test_pickle_round_trip(fitted, data):
    _, _, X_test, _, _ = data
    again = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(again.predict(X_test), fitted.predict(X_test))
    np.testing.assert_allclose(again.predict_proba(X_test), fitted.predict_proba(X_test))


def test_random_state_makes_fits_identical_and_leaves_the_global_rng_alone(small):
    X, y, tree = small
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = HierarchicalClassifier(tree, **{**FAST, "module__dropout": 0.2}).fit(X, y)
    assert torch.equal(torch.get_rng_state(), before)
    b = HierarchicalClassifier(tree, **{**FAST, "module__dropout": 0.2}).fit(X, y)
    for pa, pb in zip(a.net_.module_.parameters(), b.net_.module_.parameters()):
        assert torch.equal(pa, pb)
    c = HierarchicalClassifier(tree, **{**FAST, "random_state": 1}).fit(X, y)
    assert not torch.equal(a.net_.module_.layers[0].weight, c.net_.module_.layers[0].weight)


def test_partial_fit_and_warm_start(small):
    X, y, tree = small
    clf = HierarchicalClassifier(tree, **FAST)
    for _ in range(3):
        clf.partial_fit(X, y)
    assert len(clf.net_.history) == 3
    losses = clf.net_.history[:, "train_loss"]
    assert losses[-1] < losses[0]
    # Three partial fits of one epoch equal one fit of three epochs (same seed, same stream).
    one = HierarchicalClassifier(tree, **{**FAST, "max_epochs": 3}).fit(X, y)
    np.testing.assert_allclose(one.net_.history[:, "train_loss"], losses, rtol=1e-5)

    warm = HierarchicalClassifier(tree, warm_start=True, **{**FAST, "max_epochs": 2}).fit(X, y)
    first = warm.net_.module_.layers[0].weight.detach().clone()
    warm.set_params(lr=0.001).fit(X, y)
    assert len(warm.net_.history) == 4 and warm.net_.optimizer_.param_groups[0]["lr"] == 0.001
    assert not torch.equal(first, warm.net_.module_.layers[0].weight)
    with pytest.raises(ValueError, match="partition changed"):
        warm.set_params(partition="level").fit(X, y)  # the default for dense X is "sibling"
    cold = HierarchicalClassifier(tree, **{**FAST, "max_epochs": 2}).fit(X, y).fit(X, y)
    assert len(cold.net_.history) == 2

    learnt = HierarchicalClassifier(**FAST).partial_fit(X[:10], y[:10], classes=np.unique(y))
    assert learnt.tree_.n_classes == len(np.unique(y))


def test_early_stopping_with_label_paths_and_labels_at_any_depth():
    X, y, tree = make_hierarchical_classification(n_samples=400, n_features=8, branching=2, depth=3,
                                                  truncate_fraction=0.5, noise=3.0, random_state=0)
    clf = HierarchicalClassifier(tree, early_stopping=True, n_iter_no_change=2, max_epochs=60, lr=0.05,
                                 module__hidden_units=64, random_state=0).fit(X, y)
    history = clf.net_.history
    assert len(history) < 60 and "valid_loss" in history[-1]
    best = int(np.argmin(history[:, "valid_loss"]))
    assert len(history) - 1 - best >= 2  # stopped after the patience ran out
    # A user split that is not stratified works with label paths (2-D y) too.
    ids = tree.to_ids(y)
    paths = np.where(tree.paths[ids] >= 0, tree.labels[np.maximum(tree.paths[ids], 0)], "").astype(object)
    clf = HierarchicalClassifier(tree, train_split=ValidSplit(0.2, random_state=0), **FAST).fit(X, paths)
    assert np.isfinite(clf.net_.history[-1, "valid_loss"])


def test_verbose_shows_progress_bar_and_log(small, capsys):
    X, y, tree = small
    clf = HierarchicalClassifier(tree, verbose=1, **{**FAST, "max_epochs": 2}).fit(X, y)
    assert any(isinstance(cb, ProgressBar) for _, cb in clf.net_.callbacks_)
    assert "train_loss" in capsys.readouterr().out
    HierarchicalClassifier(tree, **{**FAST, "max_epochs": 2}).fit(X, y)
    assert capsys.readouterr().out == ""


class FixedWidth(nn.Module):
    """A user module that ignores the tree's size."""

    def __init__(self, width: int = 5):
        super().__init__()
        self.linear = nn.LazyLinear(width)

    def forward(self, X):
        return self.linear(X)


class Flexible(nn.Module):
    """A user module that takes the sizes through **kwargs."""

    def __init__(self, scale: float = 1.0, **sizes):
        super().__init__()
        self.linear = nn.Linear(sizes["n_features"], sizes["n_outputs"])
        self.scale = scale

    def forward(self, X):
        return self.scale * self.linear(X)


def test_user_modules(small):
    X, y, tree = small
    clf = HierarchicalClassifier(tree, module=Flexible, module__scale=2.0, max_epochs=2, random_state=0).fit(X, y)
    assert clf.predict(X).shape == (len(X), tree.n_levels)
    clf = HierarchicalClassifier(tree, module=FixedWidth, module__width=tree.n_classes, max_epochs=2).fit(X, y)
    assert clf.predict_proba(X).shape == (len(X), tree.n_classes)


# ---------------------------------------------------------------------------- bad input
def test_unknown_label_in_y(small):
    X, y, tree = small
    y = y.copy()
    y[[3, 7]] = ["unicorn", "griffin"]
    with pytest.raises(UnknownLabelError, match="'unicorn', 'griffin'"):
        HierarchicalClassifier(tree, **FAST).fit(X, y)


def test_wrong_number_of_features_at_predict(fitted, data):
    _, _, X_test, _, _ = data
    with pytest.raises(ValueError, match="X has 3 features, but HierarchicalClassifier is expecting 20"):
        fitted.predict(X_test[:, :3])
    with pytest.raises(ValueError, match="X has 3 features"):
        fitted.predict_proba(torch.as_tensor(X_test[:, :3]))


@pytest.mark.parametrize("as_tensor", [False, True])
def test_nan_in_X(small, fitted, data, as_tensor):
    X, y, tree = small
    X = X.copy()
    X[4, 2] = np.nan
    wrap = torch.as_tensor if as_tensor else np.asarray
    with pytest.raises(ValueError, match="Input X contains NaN"):
        HierarchicalClassifier(tree, **FAST).fit(wrap(X), y)
    X_test = data[2][:5].copy()
    X_test[1, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        fitted.predict(wrap(X_test))


def test_y_of_wrong_length(small):
    X, y, tree = small
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        HierarchicalClassifier(tree, **FAST).fit(X, y[:-3])
    with pytest.raises(ValueError, match="requires y"):
        HierarchicalClassifier(tree, **FAST).fit(X, None)


def test_tree_and_module_sizes_disagree(small):
    X, y, tree = small
    with pytest.raises(ValueError, match=r"module__n_outputs=5 disagrees .* 14 scores the tree needs"):
        HierarchicalClassifier(tree, module__n_outputs=5, **FAST).fit(X, y)
    with pytest.raises(ValueError, match=r"returned scores of shape \(64, 5\).*needs 14 scores.*disagree"):
        HierarchicalClassifier(tree, module=FixedWidth, max_epochs=1, batch_size=64).fit(X, y)
    with pytest.raises(ValueError, match="module__n_features=3 disagrees"):
        HierarchicalClassifier(tree, module__n_features=3, **FAST).fit(X, y)


def test_bad_parameters(small):
    X, y, tree = small
    with pytest.raises(TypeError, match="not an instance"):
        HierarchicalClassifier(tree, module=MLP(6, 14)).fit(X, y)
    with pytest.raises(ValueError, match="did you mean module__hidden_units"):
        HierarchicalClassifier(tree, hidden_units=8).fit(X, y)
    with pytest.raises(ValueError, match="did you mean module__hidden_units"):
        HierarchicalClassifier(tree).set_params(hidden_units=8)
    with pytest.raises(ValueError, match="needs stop=True"):
        HierarchicalClassifier(tree, semantics="terminal", stop=False).fit(X, y)
    with pytest.raises(ValueError, match="partition"):
        HierarchicalClassifier(tree, partition="depth").fit(X, y)


def test_not_fitted():
    clf = HierarchicalClassifier()
    for method in ("predict", "predict_proba", "predict_labels", "decision_function", "predict_top_k"):
        with pytest.raises(NotFittedError):
            getattr(clf, method)(np.zeros((2, 3)))


# ---------------------------------------------------------------------------- devices
def test_model_marked_cuda_unpickles_onto_cpu(fitted, data):
    """The logic of loading a GPU-trained model without a GPU, exercised on CPU.

    skorch pickles the module through torch and maps it to ``net.device`` on load, falling
    back to the CPU with a DeviceWarning when CUDA is unavailable.
    """
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; test_cuda_fit_loads_on_cpu covers the real case")
    _, _, X_test, _, _ = data
    model = pickle.loads(pickle.dumps(fitted))
    model.net_.device = "cuda"
    blob = pickle.dumps(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = pickle.loads(blob)
    assert any("cpu" in str(w.message).lower() for w in caught)
    assert torch.device(loaded.net_.device).type == "cpu"
    np.testing.assert_array_equal(loaded.predict(X_test), fitted.predict(X_test))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")
def test_cuda_fit_loads_on_cpu(small, monkeypatch):
    X, y, tree = small
    clf = HierarchicalClassifier(tree, device="cuda", **FAST).fit(X, y)
    assert next(clf.net_.module_.parameters()).device.type == "cuda"
    expected = clf.predict_proba(torch.as_tensor(X, device="cuda"))
    blob = pickle.dumps(clf)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = pickle.loads(blob)
    assert next(loaded.net_.module_.parameters()).device.type == "cpu"
    np.testing.assert_allclose(loaded.predict_proba(X), expected, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------- bad and extreme input
# Regression probes: each once gave a wrong result, a bare crash or a misleading error; each
# asserts the correct result or the named error now.
@pytest.fixture(scope="module")
def probe_data():
    from hiclass_parallel.datasets import make_hierarchical_classification

    return make_hierarchical_classification(n_samples=200, n_features=5, branching=2, depth=2, random_state=0)


def _probe_clf(tree, **kw):
    from hiclass_parallel.estimators import HierarchicalClassifier

    kw = {"max_epochs": 2, "random_state": 0, "module__hidden_units": 8, **kw}
    return HierarchicalClassifier(tree, **kw)


def test_diverging_training_raises_named_error(probe_data, one_torch_thread):
    torch = pytest.importorskip("torch")
    from hiclass_parallel.exceptions import NonFiniteLossError

    X, y, tree = probe_data
    # The level route: its scores overflow to a NaN loss here (the path-local sibling loss of
    # the dense default grows past 1e14 but stays finite: the warning below).
    clf = _probe_clf(tree, optimizer=torch.optim.SGD, lr=10.0, batch_size=32, max_epochs=8, module__hidden_units=256,
                     partition="level")
    with pytest.raises(NonFiniteLossError, match=r"loss became nan at epoch \d+, batch \d+ \(lr=10.0\).*Lower lr"):
        clf.fit(X, y)
    assert not hasattr(clf, "net_")  # a failed first fit leaves an unfitted estimator


def test_diverging_continued_training_puts_the_weights_of_before_the_call_back(probe_data, one_torch_thread):
    torch = pytest.importorskip("torch")
    from hiclass_parallel.exceptions import NonFiniteLossError

    X, y, tree = probe_data
    clf = _probe_clf(tree, optimizer=torch.optim.SGD, lr=1e-3, batch_size=32, module__hidden_units=256,
                     partition="level").fit(X, y)  # the route whose loss reaches NaN (above)
    before = {k: v.clone() for k, v in clf.net_.module_.state_dict().items()}
    clf.set_params(lr=10.0, max_epochs=8, warm_start=True)
    with pytest.raises(NonFiniteLossError, match="put back as it was before this call"):
        clf.fit(X, y)
    after = clf.net_.module_.state_dict()
    # restored to the start of the call, not of the diverging epoch: a failed fit changes nothing
    assert set(after) == set(before) and all(torch.equal(after[k], v) for k, v in before.items())


def test_exploding_finite_loss_warns(probe_data, one_torch_thread):
    X, y, tree = probe_data
    with pytest.warns(RuntimeWarning, match="training loss grew from .* training is diverging"):
        _probe_clf(tree, lr=1e3, batch_size=32, max_epochs=8, partition="level").fit(X * 1e3, y)
    with pytest.warns(RuntimeWarning, match="training loss grew from .* training is diverging"):
        _probe_clf(tree, optimizer=torch.optim.SGD, lr=10.0, batch_size=32, max_epochs=8,
                   module__hidden_units=256).fit(X, y)  # the dense default: path-local, sibling


def test_failed_refit_keeps_the_fitted_model(probe_data, one_torch_thread):
    X, y, tree = probe_data
    clf = _probe_clf(tree).fit(X, y)
    before = clf.predict(X[:5])
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        clf.fit(X[:, :3], y[:5])
    assert clf.n_features_in_ == 5 and hasattr(clf, "net_")
    assert np.array_equal(clf.predict(X[:5]), before)


@pytest.mark.parametrize(
    "device, message",
    [("nonsense", "device='nonsense' is not a torch device"), ("cuda:99", "device='cuda:99'")],
)
def test_bad_device_named(probe_data, device, message):
    torch = pytest.importorskip("torch")
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 99:
        pytest.skip("a machine with 100 GPUs")
    X, y, tree = probe_data
    with pytest.raises(ValueError, match=message):
        _probe_clf(tree, device=device).fit(X, y)


@pytest.mark.parametrize("hidden, error", [(-1, ValueError), (1.5, TypeError), ([8, 0], ValueError)])
def test_bad_hidden_units_named(probe_data, hidden, error):
    X, y, tree = probe_data
    with pytest.raises(error, match="module__hidden_units"):
        _probe_clf(tree, module__hidden_units=hidden).fit(X, y)


def test_warm_start_warns_about_ignored_changes(probe_data, one_torch_thread):
    X, y, tree = probe_data
    clf = _probe_clf(tree, warm_start=True).fit(X, y)
    clf.set_params(module__hidden_units=16)
    with pytest.warns(UserWarning, match="module__hidden_units changed .* ignored"):
        clf.fit(X, y)
    from skorch.callbacks import EpochTimer

    clf.set_params(module__hidden_units=8, callbacks=[EpochTimer()])
    with pytest.warns(UserWarning, match="^callbacks changed"):
        clf.fit(X, y)
    clf.set_params(callbacks=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.fit(X, y)  # back to the settings the network was built with: no warning


def test_empty_path_is_the_pad_label(probe_data, one_torch_thread):
    X, y, tree = probe_data
    clf = _probe_clf(tree, decoding="threshold", threshold=1.0).fit(X, y)
    assert clf.predict_node(X[:3]).tolist() == [-1, -1, -1]
    assert clf.predict_labels(X[:3]).tolist() == ["", "", ""]  # not classes_[-1]


def test_nan_weights_are_a_named_error_not_empty_paths(probe_data, one_torch_thread):
    from hiclass_parallel.exceptions import DivergedError

    torch = pytest.importorskip("torch")
    X, y, tree = probe_data
    clf = _probe_clf(tree).fit(X, y)
    with torch.no_grad():
        next(clf.net_.module_.parameters()).fill_(float("nan"))
    for call in (lambda: clf.predict_labels(X[:3]), lambda: clf.predict(X[:3]), lambda: clf.predict_top_k(X[:3], k=2)):
        with pytest.raises(DivergedError, match=r"3 of 3 sample\(s\) of finite input got NaN or infinite scores"):
            call()


def test_predict_top_k_refuses_non_integer_k(probe_data, one_torch_thread):
    X, y, tree = probe_data
    clf = _probe_clf(tree).fit(X, y)
    with pytest.raises(TypeError, match="k must be an integer"):
        clf.predict_top_k(X[:2], k=1.5)


@pytest.mark.parametrize("partition, semantics", [("level", "partial"), ("sibling", "partial"), ("sibling", "terminal")])
def test_predict_answer_proba_sums_to_one(probe_data, one_torch_thread, partition, semantics):
    X, y, tree = probe_data
    clf = _probe_clf(tree, partition=partition, semantics=semantics).fit(X, y)
    proba = clf.predict_answer_proba(X[:20])
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    if semantics == "partial":
        assert (proba[:, ~tree.is_leaf] == 0).all()
        # the model's own answer (the class prototypes re-rank it: their test shows it)
        assert np.array_equal(proba.argmax(1), clf.set_params(prototypes=None).predict_node(X[:20]))
    # predict_proba's convention: a row sums to the number of groups, not 1
    assert np.allclose(clf.predict_proba(X[:3]).sum(1), tree.n_groups(partition), rtol=1e-4)


def test_internal_labels_suggest_terminal(probe_data, one_torch_thread):
    X, y, tree = probe_data
    internal = tree.labels[~tree.is_leaf]
    y_internal = internal[np.arange(len(X)) % internal.size]
    with pytest.warns(UserWarning, match="every label in y is an internal node.*semantics='terminal'"):
        _probe_clf(tree, max_epochs=1).fit(X, y_internal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _probe_clf(tree, max_epochs=1, semantics="terminal").fit(X, y_internal)
