"""Class prototypes: the similarity, the weight, the re-ranked answer, fitting, persistence."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from support import sparse_rows, text_like

from hiclass_parallel import Tree
from hiclass_parallel.estimators import HierarchicalClassifier, MultiLabelHierarchicalClassifier
from hiclass_parallel.estimators.io._persistence import load_classifier, save_classifier
from hiclass_parallel.estimators.answer._prototypes import (
    DEFAULT_WEIGHT,
    FEATURES,
    ClassPrototypes,
    choose_weight,
    rerank_order,
)


def _dense_prototypes(sums: np.ndarray) -> np.ndarray:
    """The reference: each class's FEATURES largest sums, scaled to unit norm, by brute force."""
    out = np.zeros_like(sums, dtype=np.float64)
    for c, row in enumerate(sums):
        keep = np.argsort(-row, kind="stable")[:FEATURES]
        out[c, keep] = row[keep]
        norm = np.linalg.norm(out[c])
        out[c] /= norm if norm > 0 else 1.0
    return out


def _flat(n_classes: int) -> Tree:
    """A tree of ``n_classes`` top-level classes: the cosine prototypes need only the count."""
    return Tree.from_parents([-1] * n_classes)


# ---------------------------------------------------------------------------- the prototypes
@pytest.mark.parametrize("seed", range(3))
def test_similarity_equals_the_dense_cosine_of_truncated_prototypes(seed):
    rng = np.random.default_rng(seed)
    n_classes, n_features = 30, 400
    X = sparse_rows(900, n_features, density=0.04, seed=seed)
    X = sp.csr_matrix(sp.diags((np.arange(900) != 3).astype(np.float32)) @ X)  # row 3 empty
    ids = rng.integers(-1, n_classes - 5, 900)  # unlabelled rows, and classes without rows
    prototypes = ClassPrototypes.from_rows(X, ids, _flat(n_classes))
    dense = np.zeros((n_classes, n_features))
    np.add.at(dense, ids[ids >= 0], X[np.flatnonzero(ids >= 0)].toarray())
    np.testing.assert_allclose(prototypes.sums.toarray(), dense, rtol=1e-5, atol=1e-6)
    nodes = rng.integers(-1, n_classes, (900, 6))
    reference = X.toarray() @ _dense_prototypes(dense).T
    reference = np.where(nodes >= 0, np.take_along_axis(reference, np.maximum(nodes, 0), axis=1), 0.0)
    np.testing.assert_allclose(prototypes.score(X, nodes), reference, rtol=1e-5, atol=1e-6)
    assert (dense.astype(bool).sum(axis=1) > FEATURES).any()  # the truncation is exercised


def test_similarity_keeps_the_largest_sums_with_negative_values_and_ties():
    """Signed rows rounded to one decimal (many equal sums): the kept features are the largest
    values, equal ones by feature id, as the dense reference's stable sort keeps them."""
    rng = np.random.default_rng(5)
    X = sp.csr_matrix(np.round(rng.normal(size=(400, 80)) * (rng.random((400, 80)) < 0.3), 1).astype(np.float32))
    prototypes = ClassPrototypes.from_rows(X, rng.integers(0, 12, 400), _flat(12))
    nodes = rng.integers(0, 12, (400, 5))
    reference = X.toarray() @ _dense_prototypes(prototypes.sums.toarray()).T
    np.testing.assert_allclose(prototypes.score(X, nodes), np.take_along_axis(reference, nodes, axis=1),
                               rtol=1e-5, atol=1e-5)


def test_similarity_sums_duplicate_entries_and_leaves_the_rows_as_given():
    prototypes = ClassPrototypes.from_rows(sp.csr_matrix(np.eye(3, dtype=np.float32)), np.arange(3), _flat(3))
    X = sp.csr_matrix((np.array([0.5, 0.25, 1.0], dtype=np.float32), np.array([1, 1, 0]), np.array([0, 2, 3])),
                      shape=(2, 3))  # row 0 holds feature 1 twice, not summed
    before = (X.data.copy(), X.indices.copy())
    np.testing.assert_allclose(prototypes.score(X, np.array([[1, 0], [0, 2]])), [[0.75, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(X.data, before[0])
    np.testing.assert_array_equal(X.indices, before[1])


def test_added_rows_give_the_prototypes_of_all_rows():
    rng = np.random.default_rng(0)
    X = sparse_rows(200, 50, density=0.1, seed=0)
    ids = rng.integers(0, 10, 200)
    some = ClassPrototypes.from_rows(X[:120], ids[:120], _flat(10))
    nodes = rng.integers(0, 10, (200, 4))
    some.score(X, nodes)  # fills the cache, which the new rows must replace
    some.add_sums(ClassPrototypes.from_rows(X[120:], ids[120:], _flat(10)).sums)
    whole = ClassPrototypes.from_rows(X, ids, _flat(10))
    np.testing.assert_allclose(some.sums.toarray(), whole.sums.toarray(), rtol=1e-6)
    np.testing.assert_allclose(some.score(X, nodes), whole.score(X, nodes), rtol=1e-6)


def test_pickle_leaves_the_cache_out_and_rebuilds_it():
    import pickle

    X = sparse_rows(50, 40, density=0.2, seed=0)
    prototypes = ClassPrototypes.from_rows(X, np.arange(50) % 5, _flat(5))
    nodes = np.tile(np.arange(5), (50, 1))
    before = prototypes.score(X, nodes)
    copy = pickle.loads(pickle.dumps(prototypes))
    assert "_unit" in vars(prototypes) and "_unit" not in vars(copy)
    np.testing.assert_array_equal(copy.score(X, nodes), before)


def test_rerank_order_puts_missing_paths_last_and_keeps_undecidable_rows():
    lp = np.array([[-1.0, -2.0, -np.inf], [-1.0, -1.5, -3.0], [np.nan, -1.0, -2.0]], dtype=np.float32)
    sim = np.array([[0.0, 0.2, 1.0], [0.0, 0.0, 0.5], [0.0, 1.0, 0.0]], dtype=np.float32)
    np.testing.assert_array_equal(rerank_order(lp, sim, 10.0), [[1, 0, 2], [2, 0, 1], [0, 1, 2]])
    np.testing.assert_array_equal(rerank_order(lp, sim, 0.0), [[0, 1, 2], [0, 1, 2], [0, 1, 2]])


def test_weight_is_fitted_where_rows_allow_and_defaults_otherwise():
    rng = np.random.default_rng(1)
    lp = np.log(rng.dirichlet(np.ones(8), size=2000)).astype(np.float32)
    sim = rng.random((2000, 8)).astype(np.float32)
    for true_weight in (0.0, 2.0, 6.0):
        right = np.argmax(lp + true_weight * sim + rng.gumbel(size=lp.shape), axis=1)
        fitted = choose_weight(lp, sim, np.arange(8) == right[:, None])
        assert abs(fitted - true_weight) < 0.6, (true_weight, fitted)
    nobody = np.zeros((2000, 8), dtype=bool)  # no right answer among the candidates
    assert choose_weight(lp, sim, nobody) == DEFAULT_WEIGHT


def test_saved_prototypes_are_checked_against_the_model():
    X = sparse_rows(20, 9, density=0.3, seed=0)
    arrays = ClassPrototypes.from_rows(X, np.arange(20) % 4, _flat(4)).to_arrays()
    with pytest.raises(ValueError, match="different models"):
        ClassPrototypes.from_arrays(arrays, _flat(5), 9)
    bad = dict(arrays, indices=arrays["indices"] + 100)
    with pytest.raises(ValueError, match="not a valid sparse matrix"):
        ClassPrototypes.from_arrays(bad, _flat(4), 9)


# ---------------------------------------------------------------------------- the classifier
@pytest.fixture(scope="module")
def text():
    return text_like(n_samples=2500, n_features=80, keep=0.3, terminal_fraction=0.0)


@pytest.fixture(scope="module")
def fitted(text):
    X, y, tree = text
    return HierarchicalClassifier(tree, semantics="terminal", max_epochs=3, random_state=0).fit(X, y)


def test_auto_fits_prototypes_of_every_training_row_and_a_weight(text, fitted):
    X, y, tree = text
    assert fitted.answer_.weights["prototypes"] >= 0 and fitted.answer_.calibrator is not None
    whole = ClassPrototypes.from_rows(X, tree.to_ids(y), tree)
    np.testing.assert_allclose(fitted.answer_.terms["prototypes"].sums.toarray(), whole.sums.toarray(), rtol=1e-6)


@pytest.mark.parametrize("semantics", ["partial", "terminal"])
def test_reranked_answer_equals_the_brute_force_argmax_over_every_candidate(random_tree, semantics):
    """With every candidate re-ranked, the answer is the argmax over all answers of
    log p(answer) + weight * cos, computed from predict_answer_proba and dense prototypes,
    on a random tree with shuffled ids."""
    rng = np.random.default_rng(4)
    tree = random_tree(rng, 40)
    n_candidates = tree.n_classes if semantics == "terminal" else int(tree.is_leaf.sum())
    targets = np.arange(tree.n_classes) if semantics == "terminal" else np.flatnonzero(tree.is_leaf)
    y_ids = rng.choice(targets, 900)
    centers = rng.random((tree.n_classes, 50)) < 0.15
    X = sp.csr_matrix((centers[y_ids] * rng.random((900, 50)) + (rng.random((900, 50)) < 0.05)).astype(np.float32))
    y = tree.labels[y_ids]
    clf = HierarchicalClassifier(tree, semantics=semantics, max_epochs=4, random_state=0, prototypes=5.0,
                                 prototype_candidates=n_candidates, flat_term=None).fit(X, y)
    proto = _dense_prototypes(clf.answer_.terms["prototypes"].sums.toarray())
    with np.errstate(divide="ignore"):
        score = np.log(clf.predict_answer_proba(X).astype(np.float64)) + 5.0 * (X.toarray() @ proto.T)
    if semantics == "partial":
        score[:, ~tree.is_leaf] = -np.inf
    expected = np.argmax(score, axis=1)
    got = clf.predict_node(X)
    close = np.sort(score, axis=1)[:, -1] - np.sort(score, axis=1)[:, -2] < 1e-4  # float ties
    assert (got == expected)[~close].all() and (~close).mean() > 0.9
    assert (got != clf.set_params(prototypes=None).predict_node(X)).any()  # the re-ranking changed answers


def test_predict_is_the_first_of_predict_top_k_and_confidence_maps_its_probability(text, fitted):
    X, _, _ = text
    paths, log_prob = fitted.predict_top_k(X[:300], 3, return_log_prob=True)
    np.testing.assert_array_equal(fitted.predict(X[:300]), paths[:, 0])
    np.testing.assert_allclose(fitted.predict_confidence(X[:300]),
                               fitted.answer_.calibrator(np.exp(log_prob[:, 0].astype(np.float64))))


def test_prototypes_none_or_zero_gives_the_models_own_answer(text, fitted):
    X, y, tree = text
    own = HierarchicalClassifier(tree, semantics="terminal", max_epochs=3, random_state=0, prototypes=None,
                                 flat_term=None).fit(X, y)
    assert own.answer_.term("prototypes") is None
    clf = fitted.set_params(prototypes=0.0, flat_term=None)  # the flat term re-ranks too: off
    try:
        np.testing.assert_array_equal(clf.predict(X[:400]), own.predict(X[:400]))
        _, lp = clf.predict_top_k(X[:400], 4, return_log_prob=True)
        assert (np.diff(lp, axis=1) <= 0).all()  # the model's order, most probable first
    finally:
        fitted.set_params(prototypes="auto", flat_term="auto")


def test_without_held_out_rows_auto_builds_none_a_weight_is_kept_and_partial_fit_adds_rows(text):
    X, y, tree = text
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=2, random_state=0, calibration=None).fit(X, y)
    assert clf.answer_.term("prototypes") is None and "prototypes" in clf.config_.term_weights_reason
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=2, random_state=0, calibration=None,
                                 prototypes=DEFAULT_WEIGHT).fit(X, y)
    assert clf.answer_.weights["prototypes"] == DEFAULT_WEIGHT
    first = HierarchicalClassifier(tree, semantics="terminal", random_state=0, prototypes=DEFAULT_WEIGHT)
    first.partial_fit(X[:1000], y[:1000])
    first.partial_fit(X[1000:], y[1000:])
    whole = ClassPrototypes.from_rows(X, tree.to_ids(y), tree)
    np.testing.assert_allclose(first.answer_.terms["prototypes"].sums.toarray(), whole.sums.toarray(), rtol=1e-5)


def test_class_text_is_one_more_row_of_its_class(text):
    X, y, tree = text
    names = sparse_rows(tree.n_classes, X.shape[1], density=0.05, seed=1)
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=1, random_state=0, calibration=None,
                                 prototypes=16.0, module__hidden_units=8, module__class_features=names).fit(X, y)
    rows = ClassPrototypes.from_rows(X, tree.to_ids(y), tree)
    np.testing.assert_allclose(clf.answer_.terms["prototypes"].sums.toarray(), (rows.sums + names).toarray(), rtol=1e-5, atol=1e-6)


def test_label_sets_have_no_prototypes(text):
    X, y, tree = text
    multi = MultiLabelHierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(X, [[v] for v in y])
    assert multi.answer_.term("prototypes") is None


@pytest.mark.parametrize("bad", [-1.0, "yes", np.nan])
def test_bad_prototypes_parameter_is_named(text, bad):
    X, y, tree = text
    with pytest.raises(ValueError, match="prototypes"):
        HierarchicalClassifier(tree, prototypes=bad, max_epochs=1).fit(X, y)
    with pytest.raises(ValueError, match="prototype_candidates"):
        HierarchicalClassifier(tree, prototype_candidates=0, max_epochs=1).fit(X, y)


# ---------------------------------------------------------------------------- persistence
def test_saved_prototypes_load_and_a_mismatch_is_named(tmp_path, text, fitted):
    pytest.importorskip("safetensors")
    X, _, _ = text
    folder = save_classifier(fitted, tmp_path / "model")
    assert (folder / "prototypes.npz").exists()
    loaded = load_classifier(folder)
    assert loaded.answer_.weights["prototypes"] == fitted.answer_.weights["prototypes"]
    assert loaded.answer_.scale == fitted.answer_.scale
    np.testing.assert_array_equal(loaded.predict(X[:300]), fitted.predict(X[:300]))

    other = tmp_path / "other"
    np.savez(other.with_suffix(".npz"), **ClassPrototypes.from_rows(X[:10], np.zeros(10, int),
                                                                     fitted.tree_).to_arrays())
    (folder / "prototypes.npz").write_bytes(other.with_suffix(".npz").read_bytes())
    with pytest.raises(ValueError, match="prototypes.npz is not the file saved"):
        load_classifier(folder)
    (folder / "prototypes.npz").unlink()
    with pytest.raises(ValueError, match="prototypes.npz is missing"):
        load_classifier(folder)



@pytest.mark.gpu
def test_reranking_of_a_model_on_cuda_equals_the_reranking_on_the_host(text):
    """A model on a GPU decodes its candidates exhaustively there; the prototypes re-rank them
    on the host: the answer is the host-side re-ranking of the model's own top candidates."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (none on this machine)")
    X, y, tree = text
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=3, random_state=0, device="cuda").fit(X, y)
    weight = clf.answer_.weights["prototypes"]
    got = clf.predict_node(X[:500])
    assert clf.net_.device == "cuda"
    from hiclass_parallel.estimators.answer._prototypes import last_nodes

    paths, lp = clf._decode_model(X[:500], clf.prototype_candidates)  # the model's own, on the GPU
    nodes = last_nodes(paths)
    order = rerank_order(lp, clf.answer_.terms["prototypes"].score(X[:500], nodes), weight)
    np.testing.assert_array_equal(got, nodes[np.arange(500), order[:, 0]])
    assert (got != clf.set_params(prototypes=None).predict_node(X[:500])).any()


def test_hf1_decoding_weighs_the_candidates_by_the_fitted_conditional_logit(text, fitted):
    """decoding="hf1" with prototypes: the expected-hF1 path among the model's most probable
    candidates, weighed by softmax(scale * (log p + weight * cos + flat weight * margin));
    candidates, their log p, the cosines and the flat term's margins computed here from
    predict_answer_proba, dense prototypes and the flat term's weight vectors."""
    from hiclass_parallel.ops.decode import expected_hf1_paths

    X, y, tree = text
    assert fitted.answer_.scale > 0 and fitted.answer_.scale != 1.0  # fitted with the weight
    clf = fitted.set_params(decoding="hf1")
    try:
        got = clf._predict_ids(X[:300])
        proba = clf.predict_answer_proba(X[:300]).astype(np.float64)
        k = max(clf.top_k, clf.prototype_candidates)
        top = np.argsort(-proba, axis=1, kind="stable")[:, :k]
        with np.errstate(divide="ignore"):
            log_p = np.log(np.take_along_axis(proba, top, axis=1))
        cos = np.take_along_axis(X[:300].toarray() @ _dense_prototypes(clf.answer_.terms["prototypes"].sums.toarray()).T, top, axis=1)
        margin = 0.0  # the flat term, where the fit tried it within the budget and kept it
        if clf.answer_.term("flat_term") is not None:
            rows = np.searchsorted(clf.answer_.terms["flat_term"].classes, top)
            seen = clf.answer_.terms["flat_term"].classes[np.minimum(rows, len(clf.answer_.terms["flat_term"].classes) - 1)] == top
            decision = X[:300].toarray() @ clf.answer_.terms["flat_term"].coef.T.astype(np.float64) + clf.answer_.terms["flat_term"].intercept
            margin = clf.answer_.weight("flat_term") * np.where(seen, np.take_along_axis(decision, np.where(seen, rows, 0), axis=1), -1.0)
        combined = clf.answer_.scale * (log_p + clf.answer_.weights["prototypes"] * cos + margin)
        expected, _ = expected_hf1_paths(tree.paths[top], combined.astype(np.float32))
        assert (got == expected).all(axis=1).mean() > 0.98  # near-ties of float32 aside
        own = clf.set_params(prototypes=None, flat_term=None, path_term=None)._predict_ids(X[:300])
        assert (got != own).any(axis=1).any()  # the re-ranking terms change hf1's answers too
    finally:
        fitted.set_params(decoding="best", prototypes="auto", flat_term="auto")


def test_a_prototypes_file_without_its_kind_is_refused(tmp_path, fitted):
    """Every saved prototypes.npz names its kind: one without is named, never guessed."""
    import json

    pytest.importorskip("safetensors")
    from hiclass_parallel.estimators.io._persistence import _config_digest, _file_digest
    from hiclass_parallel.exceptions import ModelFileError

    folder = save_classifier(fitted, tmp_path / "model")
    with np.load(folder / "prototypes.npz", allow_pickle=False) as arrays:
        kindless = {k: arrays[k] for k in arrays.files if k != "kind"}
    np.savez(folder / "prototypes.npz", **kindless)
    config = json.loads((folder / "config.json").read_text())
    config["digests"]["prototypes.npz"] = _file_digest(folder / "prototypes.npz")
    config["digests"]["config.json"] = _config_digest(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFileError, match=r"prototypes\.npz: lacks kind"):
        load_classifier(folder)


def test_both_kinds_follow_the_prototypes_protocol():
    """The cosine and the Gaussian kinds have every member of the written protocol, the methods
    with the protocol's parameters, and fitted ones pass ``isinstance``."""
    import inspect

    from hiclass_parallel.estimators.answer._dense_prototypes import GaussianPrototypes
    from hiclass_parallel.estimators.answer._prototypes import Prototypes, prototypes_kind

    members = [name for name in vars(Prototypes) if not name.startswith("_")]
    members += list(Prototypes.__annotations__)
    tree = _flat(3)
    X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    for kind, rows in ((ClassPrototypes, sp.csr_matrix(X)), (GaussianPrototypes, X)):
        assert prototypes_kind(rows) is kind
        fitted = kind.from_rows(rows, np.arange(3), tree)
        assert isinstance(fitted, Prototypes)
        for name in members:
            assert hasattr(fitted, name), f"{kind.__name__} lacks {name}"
            spec = inspect.getattr_static(Prototypes, name, None)
            if callable(spec) or isinstance(spec, classmethod):
                assert list(inspect.signature(getattr(kind, name)).parameters) == \
                    list(inspect.signature(getattr(Prototypes, name)).parameters), f"{kind.__name__}.{name}"
    assert not isinstance(object(), Prototypes)
