"""Class prototypes of dense rows: the Gaussian similarity against a brute-force reference,
adding rows, persistence checks, and the classifier's re-ranked answer on dense ``X``."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.estimators.io._persistence import load_classifier, save_classifier
from hiclass_parallel.estimators.answer._dense_prototypes import SHRINKAGE, GaussianPrototypes
from hiclass_parallel.estimators.answer._prototypes import prototypes_from_arrays


def _reference_log_likelihood(X, ids, tree, nodes):
    """Brute force: each class's mean shrunk towards its parent's (recursively, the top level
    towards the mean of all rows), the residuals' variance pooled over classes, and the full
    Gaussian log-likelihood of each row under each candidate."""
    X = np.asarray(X, dtype=np.float64)
    labelled = ids >= 0
    grand = X[labelled].mean(axis=0)

    def mean(c):
        prior = grand if tree.parents[c] < 0 else mean(tree.parents[c])
        rows = X[ids == c]
        return (rows.sum(axis=0) + SHRINKAGE * prior) / (len(rows) + SHRINKAGE)

    means = np.array([mean(c) for c in range(tree.n_classes)])
    own = np.zeros_like(X)
    for c in np.unique(ids[labelled]):
        own[ids == c] = X[ids == c].mean(axis=0)
    var = np.square(X[labelled] - own[labelled]).sum(axis=0) / (labelled.sum() - np.unique(ids[labelled]).size)
    var = np.maximum(var, var.mean() * 1e-6)  # a constant feature's floor, as the prototypes have it
    diff = X[:, None, :] - means[np.maximum(nodes, 0)]
    return -0.5 * (np.square(diff) / var).sum(axis=2)


@pytest.mark.parametrize("seed", range(3))
def test_similarity_is_the_shrunk_gaussian_log_likelihood_up_to_a_row_constant(random_tree, seed):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 30)  # shuffled node ids
    X = rng.normal(size=(400, 12)) * rng.uniform(0.2, 3.0, 12) + rng.normal(size=12)
    ids = rng.integers(-1, tree.n_classes, 400)
    ids[np.isin(ids, rng.choice(tree.n_classes, 6, replace=False))] = -1  # classes without rows, unlabelled rows
    prototypes = GaussianPrototypes.from_rows(X.astype(np.float32), ids, tree)
    nodes = rng.integers(0, tree.n_classes, (400, 7))
    got = prototypes.score(X.astype(np.float32), nodes).astype(np.float64)
    reference = _reference_log_likelihood(X, ids, tree, nodes)
    # The row's constant (-x.x / 2var) is dropped: differences between candidates are equal.
    np.testing.assert_allclose(got - got[:, :1], reference - reference[:, :1], rtol=1e-4, atol=2e-3)
    nodes[:, 3] = -1
    assert (prototypes.score(X, nodes)[:, 3] == 0).all()


def test_added_rows_and_ranks_give_the_statistics_of_all_rows(random_tree):
    rng = np.random.default_rng(1)
    tree = random_tree(rng, 15)
    X, ids = rng.normal(size=(300, 5)).astype(np.float32), rng.integers(0, tree.n_classes, 300)
    some = GaussianPrototypes.from_rows(X[:200], ids[:200], tree)
    nodes = rng.integers(0, tree.n_classes, (300, 4))
    some.score(X, nodes)  # fills the cache, which the new rows must replace
    some.add(GaussianPrototypes.from_rows(X[200:], ids[200:], tree))
    whole = GaussianPrototypes.from_rows(X, ids, tree)
    np.testing.assert_allclose(some.sums, whole.sums, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(some.counts, whole.counts)
    np.testing.assert_allclose(some.score(X, nodes), whole.score(X, nodes), rtol=1e-5, atol=1e-4)
    copy = pickle.loads(pickle.dumps(some))
    assert "_scaled" in vars(some) and "_scaled" not in vars(copy)
    np.testing.assert_array_equal(copy.score(X, nodes), some.score(X, nodes))


def test_a_constant_feature_does_not_divide_by_zero():
    from hiclass_parallel import Tree

    tree = Tree.from_parents([-1, -1, 0, 0])
    X = np.column_stack([np.random.default_rng(0).normal(size=40), np.full(40, 3.0)]).astype(np.float32)
    prototypes = GaussianPrototypes.from_rows(X, np.arange(40) % 4, tree)
    assert (prototypes.variance() > 0).all()
    sim = prototypes.score(np.array([[0.0, 5.0]], dtype=np.float32), np.array([[0, 1, 2, 3]]))
    assert np.isfinite(sim).all()


def _far_from_zero(rng, tree, n):
    """Rows whose classes differ in four features, with a constant column of 1000 and a year,
    2020 +- 0.5, beside them: values large next to their within-class spread."""
    ids = rng.integers(0, tree.n_classes, n)
    centers = rng.normal(size=(tree.n_classes, 4))
    X = np.column_stack([centers[ids] + rng.normal(size=(n, 4)), np.full(n, 1000.0),
                         2020 + rng.uniform(-0.5, 0.5, n)])
    return X, ids


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_similarity_holds_in_float32_for_features_far_from_zero(dtype):
    """Uncentred, the float32 products cancelled: errors of thousands of nats, the argmax
    wrong on most rows. Rows and means are centred first: the float64 reference's values."""
    from hiclass_parallel import Tree

    rng = np.random.default_rng(0)
    tree = Tree.from_parents([-1] * 4 + [0, 0, 1, 1, 2, 2, 3, 3])
    X, ids = _far_from_zero(rng, tree, 600)
    X = X.astype(dtype).astype(np.float64)  # the reference sees the values the prototypes see
    nodes = rng.integers(0, tree.n_classes, (600, 6))
    prototypes = GaussianPrototypes.from_rows(X.astype(dtype), ids, tree)
    got = prototypes.score(X.astype(dtype), nodes).astype(np.float64)
    reference = _reference_log_likelihood(X, ids, tree, nodes)
    np.testing.assert_allclose(got - got[:, :1], reference - reference[:, :1], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got.argmax(axis=1), reference.argmax(axis=1))


def test_the_exported_similarity_centres_as_the_prototypes_do():
    import torch

    from hiclass_parallel import Tree

    rng = np.random.default_rng(2)
    tree = Tree.from_parents([-1] * 4 + [0, 0, 1, 1, 2, 2, 3, 3])
    X, ids = _far_from_zero(rng, tree, 300)
    X = X.astype(np.float32)
    nodes = rng.integers(0, tree.n_classes, (300, 5))
    prototypes = GaussianPrototypes.from_rows(X, ids, tree)
    exported = prototypes.export_module()(torch.from_numpy(X), torch.from_numpy(nodes))
    got = exported.numpy().astype(np.float64)
    reference = _reference_log_likelihood(X, ids, tree, nodes)
    np.testing.assert_allclose(got - got[:, :1], reference - reference[:, :1], rtol=1e-4, atol=1e-3)


def test_reranked_answers_of_features_far_from_zero_equal_the_float64_reranking():
    from hiclass_parallel import Tree
    from hiclass_parallel.estimators.answer._prototypes import last_nodes

    rng = np.random.default_rng(1)
    tree = Tree.from_parents([-1] * 4 + [0, 0, 1, 1, 2, 2, 3, 3])
    X, ids = _far_from_zero(rng, tree, 800)
    ids = np.where(tree.is_leaf[ids], ids, rng.integers(4, tree.n_classes, 800))  # leaves
    clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0, calibration=None, prototypes=1.0,
                                 prototype_candidates=8).fit(X, tree.labels[ids])
    paths, log_prob = clf._decode_model(X, 8)
    nodes = last_nodes(paths)
    score = log_prob.astype(np.float64) + _reference_log_likelihood(X, ids, tree, nodes)
    top2 = np.sort(score, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-3  # float ties
    expected = nodes[np.arange(800), score.argmax(axis=1)]
    got = clf.predict_node(X)
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(got[clear], expected[clear])


def test_saved_statistics_are_checked_against_the_model(random_tree):
    rng = np.random.default_rng(2)
    tree = random_tree(rng, 10)
    arrays = GaussianPrototypes.from_rows(rng.normal(size=(50, 4)), rng.integers(0, 10, 50), tree).to_arrays()
    assert str(arrays["kind"]) == "gaussian"
    assert isinstance(prototypes_from_arrays(arrays, tree, 4), GaussianPrototypes)
    with pytest.raises(ValueError, match="different models"):
        prototypes_from_arrays(arrays, tree, 5)
    with pytest.raises(ValueError, match="unknown kind of class prototypes 'pickle'"):
        prototypes_from_arrays(dict(arrays, kind=np.asarray("pickle")), tree, 4)
    with pytest.raises(ValueError, match="counts must be finite floats"):
        prototypes_from_arrays(dict(arrays, counts=np.full(10, np.nan)), tree, 4)
    with pytest.raises(ValueError, match="lacks squares"):
        prototypes_from_arrays({k: v for k, v in arrays.items() if k != "squares"}, tree, 4)


# ---------------------------------------------------------------------------- the classifier
@pytest.fixture(scope="module")
def gaussian():
    from hiclass_parallel.datasets import make_hierarchical_classification

    return make_hierarchical_classification(n_samples=3000, n_features=16, branching=4, depth=3, random_state=0)


@pytest.fixture(scope="module")
def fitted(gaussian):
    X, y, tree = gaussian
    return HierarchicalClassifier(tree, max_epochs=3, random_state=0).fit(X, y)


def test_dense_rows_get_gaussian_prototypes_of_every_row_and_a_fitted_weight(gaussian, fitted):
    X, y, tree = gaussian
    assert isinstance(fitted.answer_.terms["prototypes"], GaussianPrototypes)
    assert 0 <= fitted.answer_.weights["prototypes"] <= GaussianPrototypes.MAX_WEIGHT
    whole = GaussianPrototypes.from_rows(X, tree.to_ids(y), tree)
    np.testing.assert_allclose(fitted.answer_.terms["prototypes"].sums, whole.sums, rtol=1e-9)
    np.testing.assert_array_equal(fitted.answer_.terms["prototypes"].counts, whole.counts)


@pytest.mark.parametrize("semantics", ["partial", "terminal"])
def test_reranked_answer_equals_the_brute_force_argmax_over_every_candidate(random_tree, semantics):
    """With every candidate re-ranked, the answer is the argmax over all answers of
    log p(answer) + weight * log-likelihood, on a random tree with shuffled ids."""
    rng = np.random.default_rng(3)
    tree = random_tree(rng, 40)
    targets = np.arange(tree.n_classes) if semantics == "terminal" else np.flatnonzero(tree.is_leaf)
    y_ids = rng.choice(targets, 900)
    centers = rng.normal(size=(tree.n_classes, 6))
    X = (centers[y_ids] + rng.normal(size=(900, 6))).astype(np.float32)
    n_candidates = targets.size
    clf = HierarchicalClassifier(tree, semantics=semantics, stop=semantics == "terminal", max_epochs=3,
                                 random_state=0, prototypes=0.5, prototype_candidates=n_candidates)
    clf.fit(X, tree.labels[y_ids])
    ll = _reference_log_likelihood(X, tree.to_ids(tree.labels[y_ids]), tree,
                                   np.tile(np.arange(tree.n_classes), (900, 1)))
    with np.errstate(divide="ignore"):
        score = np.log(clf.predict_answer_proba(X).astype(np.float64)) + 0.5 * ll
    if semantics == "partial":
        score[:, ~tree.is_leaf] = -np.inf
    expected = np.argmax(score, axis=1)
    got = clf.predict_node(X)
    top2 = np.sort(score, axis=1)[:, -2:]
    close = top2[:, 1] - top2[:, 0] < 1e-3  # float ties
    assert (got == expected)[~close].all() and (~close).mean() > 0.9
    assert (got != clf.set_params(prototypes=None).predict_node(X)).any()  # the re-ranking changed answers


def test_without_held_out_rows_auto_builds_none_a_weight_is_kept_and_partial_fit_adds_rows(gaussian):
    import torch

    X, y, tree = gaussian
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0, calibration=None).fit(X, y)
    assert clf.answer_.term("prototypes") is None and "prototypes" in clf.config_.term_weights_reason
    weight = GaussianPrototypes.DEFAULT_WEIGHT
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0, calibration=None, prototypes=weight).fit(X, y)
    assert clf.answer_.weights["prototypes"] == weight
    first = HierarchicalClassifier(tree, random_state=0, prototypes=weight)
    first.partial_fit(torch.from_numpy(X[:1000]), y[:1000])
    first.partial_fit(X[1000:], y[1000:])
    whole = GaussianPrototypes.from_rows(X, tree.to_ids(y), tree)
    np.testing.assert_allclose(first.answer_.terms["prototypes"].sums, whole.sums, rtol=1e-6)
    np.testing.assert_allclose(first.answer_.terms["prototypes"].squares, whole.squares, rtol=1e-6)


def test_torch_rows_predict_as_numpy_rows(gaussian, fitted):
    import torch

    X, _, _ = gaussian
    np.testing.assert_array_equal(fitted.predict(torch.from_numpy(X[:300])), fitted.predict(X[:300]))


def test_saved_gaussian_prototypes_load_and_answer_alike(tmp_path, gaussian, fitted):
    pytest.importorskip("safetensors")
    X, _, _ = gaussian
    folder = save_classifier(fitted, tmp_path / "model")
    loaded = load_classifier(folder)
    assert isinstance(loaded.answer_.terms["prototypes"], GaussianPrototypes) and loaded.answer_.weights["prototypes"] == fitted.answer_.weights["prototypes"]
    np.testing.assert_array_equal(loaded.predict(X[:500]), fitted.predict(X[:500]))


@pytest.mark.gpu
def test_dense_reranking_of_a_model_on_cuda_equals_the_reranking_on_the_host(gaussian):
    """A model on a GPU decodes its candidates there; the Gaussian prototypes re-rank them on
    the host: the answer is the host-side re-ranking of the model's own top candidates."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (none on this machine)")
    from hiclass_parallel.estimators.answer._prototypes import last_nodes, rerank_order

    X, y, tree = gaussian
    clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0, device="cuda", prototypes=2.0).fit(X, y)
    got = clf.predict_node(torch.from_numpy(X[:500]).cuda())
    paths, lp = clf._decode_model(X[:500], clf.prototype_candidates)
    nodes = last_nodes(paths)
    order = rerank_order(lp, clf.answer_.terms["prototypes"].score(X[:500], nodes), 2.0)
    np.testing.assert_array_equal(got, nodes[np.arange(500), order[:, 0]])
