"""The flat linear term of the re-ranking: its margins against scikit-learn's LinearSVC, when a fit
keeps it and why, the re-ranked answer against brute force, export, persistence, continuing."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.linear_model import Ridge
from sklearn.svm import LinearSVC
from support import text_like

from hiclass_parallel.estimators import HierarchicalClassifier, MultiLabelHierarchicalClassifier, serving_module
from hiclass_parallel.estimators.fitting import _config, _costs
from hiclass_parallel.estimators.io._persistence import FLAT_TERM, load_classifier, save_classifier
from hiclass_parallel.estimators.answer._flat_margins import NO_TARGET_MARGIN, FlatMargins
from hiclass_parallel.estimators.answer._prototypes import last_nodes
from hiclass_parallel.exceptions import ModelFileError


@pytest.fixture(autouse=True)
def _every_svm_within_the_budget(monkeypatch):
    """These tests fit a network of a few epochs, beside which an SVM's estimated cost is over
    the budget; each test that is about the budget sets the estimates itself."""
    _costs_of(monkeypatch)


def _fit(X, y, tree, **params):
    """A fit with a flat term of a fixed weight unless ``flat_term`` is given ("auto" tries it
    within the budget, and may drop it where it does not gain), and no path-level term unless
    ``path_term`` is given (tests/estimators/answer/test_path_term.py is about that one)."""
    params.setdefault("semantics", "terminal")
    params.setdefault("flat_term", 8.0)
    params.setdefault("path_term", None)
    return HierarchicalClassifier(tree, max_epochs=3, random_state=0, **params).fit(X, y)


# ---------------------------------------------------------------------------- the margins
@pytest.mark.parametrize("n_targets", [2, 3, 7])
def test_sparse_margins_equal_linear_svc_decision_values(n_targets):
    rng = np.random.default_rng(n_targets)
    X = sp.csr_matrix(rng.uniform(size=(60, 9)).astype(np.float32))
    n_classes = 12
    targets = rng.choice(n_classes, n_targets, replace=False)
    ids = targets[np.arange(60) % n_targets]
    flat = FlatMargins.fit(X, ids, n_classes, random_state=0)
    reference = LinearSVC(random_state=0).fit(X, ids)
    decision = reference.decision_function(X)
    if n_targets == 2:
        decision = np.stack([-decision, decision], axis=1)
    _check_margins(flat, X, decision, reference.classes_, n_classes, rng)


@pytest.mark.parametrize("n_features", [9, 90], ids=["primal", "dual"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_targets", [2, 3, 7])
def test_dense_margins_equal_ridge_on_plus_minus_one_targets(n_targets, weighted, n_features):
    """On dense rows the term is the least-squares SVM: scikit-learn's Ridge of the +-1 targets
    with LinearSVC's regularisation (alpha 0.5 for C=1), one class against the rest; solved in
    the primal, or in the dual on fewer rows than features."""
    rng = np.random.default_rng(n_targets)
    X = rng.normal(size=(60, n_features)).astype(np.float32)
    n_classes = 12
    targets = rng.choice(n_classes, n_targets, replace=False)
    ids = targets[rng.integers(0, n_targets, size=60)]
    weight = rng.uniform(0.2, 3.0, size=60) if weighted else None
    flat = FlatMargins.fit(X, ids, n_classes, sample_weight=weight)
    classes = np.unique(ids)
    signs = np.where(ids[:, None] == classes[None, :], 1.0, -1.0)
    reference = Ridge(alpha=0.5).fit(X.astype(np.float64), signs, sample_weight=weight)
    _check_margins(flat, X, reference.predict(X.astype(np.float64)), classes, n_classes, rng)


def _check_margins(flat, X, decision, classes, n_classes, rng):
    """``flat.margins`` of random candidates (some no training target, some -1) against the
    reference's decision values ``(rows, classes)``."""
    nodes = rng.integers(-1, n_classes, size=(X.shape[0], 5))
    got = flat.score(X, nodes)
    column = {c: j for j, c in enumerate(classes)}
    want = np.array([[decision[i, column[c]] if c in column else NO_TARGET_MARGIN for c in row]
                     for i, row in enumerate(nodes)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["dense", "sparse_coo", "sparse_csr"])
def test_torch_rows_fit_the_term_their_numpy_or_scipy_rows_fit(layout):
    rng = np.random.default_rng(1)
    X = np.where(rng.uniform(size=(40, 6)) < 0.5, rng.uniform(size=(40, 6)), 0.0).astype(np.float32)
    ids = np.arange(40) % 4 + 1
    tensor = torch.from_numpy(X)
    tensor = {"dense": tensor, "sparse_coo": tensor.to_sparse(), "sparse_csr": tensor.to_sparse_csr()}[layout]
    host = X if layout == "dense" else sp.csr_matrix(X)
    got, want = FlatMargins.fit(tensor, ids, 6, random_state=0), FlatMargins.fit(host, ids, 6, random_state=0)
    np.testing.assert_array_equal(got.coef, want.coef)
    np.testing.assert_array_equal(got.intercept, want.intercept)


def test_unlabelled_rows_are_skipped_and_one_target_is_refused():
    X = np.eye(4, dtype=np.float32)
    flat = FlatMargins.fit(X, np.array([1, -1, 3, 3]), 5)
    assert flat.classes.tolist() == [1, 3]
    with pytest.raises(ValueError, match="at least two training targets, got 1"):
        FlatMargins.fit(X, np.array([2, 2, -1, 2]), 5)


def test_zero_sample_weight_is_the_row_left_out():
    X, y, tree = text_like(shuffle_ids=True)
    ids = tree.to_ids(y)
    weight = np.ones(len(ids))
    weight[::3] = 0.0
    kept = FlatMargins.fit(X, ids, tree.n_classes, sample_weight=weight, random_state=0)
    without = FlatMargins.fit(X[weight > 0], ids[weight > 0], tree.n_classes, random_state=0)
    np.testing.assert_array_equal(kept.classes, without.classes)
    np.testing.assert_allclose(kept.coef, without.coef, atol=1e-3)


# ---------------------------------------------------------------------------- the SVM of the candidates
def _candidates_problem(seed):
    """Sparse rows, target ids at random among shuffled node ids, some rows unlabelled, and
    random candidates per row (some -1, some no target, a target's own rows not always)."""
    rng = np.random.default_rng(seed)
    n, n_classes = 80, 15
    X = sp.csr_matrix(np.where(rng.uniform(size=(n, 12)) < 0.3, rng.uniform(size=(n, 12)), 0.0).astype(np.float32))
    targets = rng.choice(n_classes, 5, replace=False)
    ids = targets[rng.integers(0, 5, size=n)]
    ids[rng.uniform(size=n) < 0.1] = -1
    candidates = rng.integers(-1, n_classes, size=(n, 4))
    return X, ids, candidates, n_classes


def _candidates_reference(X, ids, candidates, weight=None):
    """Brute force, a target at a time: LinearSVC of its rows against every labelled row that
    names it a candidate, over the features its rows hold, written into a full-width row."""
    classes = np.unique(ids[ids >= 0])
    coef, intercept = np.zeros((classes.size, X.shape[1])), np.ones(classes.size)
    for i, target in enumerate(classes):
        rows = [r for r in range(len(ids)) if ids[r] >= 0 and (ids[r] == target or target in candidates[r])]
        positive = ids[rows] == target
        features = sorted({int(f) for r in np.flatnonzero(ids == target) for f in X[r].indices})
        if positive.all() or not features:
            intercept[i] = 1.0 if positive.all() else NO_TARGET_MARGIN
            continue
        svm = LinearSVC(random_state=0).fit(X[rows][:, features], positive.astype(int),
                                            sample_weight=None if weight is None else weight[rows])
        coef[i, features], intercept[i] = svm.coef_[0], svm.intercept_[0]
    return classes, coef, intercept


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_the_svm_of_the_candidates_is_each_targets_svm_of_its_candidate_rows(seed, weighted):
    X, ids, candidates, n_classes = _candidates_problem(seed)
    weight = np.random.default_rng(seed).uniform(0.2, 3.0, size=len(ids)) if weighted else None
    flat = FlatMargins.fit_on_candidates(X, ids, candidates, n_classes, sample_weight=weight, random_state=0)
    classes, coef, intercept = _candidates_reference(X, ids, candidates, weight)
    np.testing.assert_array_equal(flat.classes, classes)
    assert sp.issparse(flat.coef) and flat.coef.nnz <= X.nnz
    np.testing.assert_allclose(flat.coef.toarray(), coef, atol=1e-5)
    np.testing.assert_allclose(flat.intercept, intercept, atol=1e-5)


def test_a_target_no_row_competes_with_gets_the_positive_margin_and_one_without_features_the_negative():
    X = sp.csr_matrix(np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 1], [0, 0, 0]], dtype=np.float32))
    ids = np.array([1, 1, 2, 3, 4])
    candidates = np.array([[2, -1], [2, -1], [3, 1], [2, -1], [2, -1]])  # nobody names 4 a candidate
    flat = FlatMargins.fit_on_candidates(X, ids, candidates, 6, random_state=0)
    margins = flat.score(X, np.array([[4, 1, 2, 5]] * 5))
    np.testing.assert_array_equal(margins[:, 0], 1.0)  # 4: nothing to tell it from
    np.testing.assert_array_equal(margins[:, 3], NO_TARGET_MARGIN)  # 5: no target
    assert margins[0, 1] > 0 > margins[2, 1]
    ids[4] = 5  # an empty row, now a candidate's rival: nothing to tell it by
    flat = FlatMargins.fit_on_candidates(X, ids, np.array([[2], [2], [3], [5], [1]]), 6, random_state=0)
    np.testing.assert_array_equal(flat.score(X, np.full((5, 1), 5)), NO_TARGET_MARGIN)


@pytest.mark.parametrize("dense_rows", [False, True])
def test_sparse_weights_give_the_margins_of_the_same_weights_dense(monkeypatch, dense_rows):
    from hiclass_parallel.estimators.answer import _flat_margins

    monkeypatch.setattr(_flat_margins, "_CHUNK_ENTRIES", 7)  # chunks of one or two rows
    X, ids, candidates, n_classes = _candidates_problem(4)
    flat = FlatMargins.fit_on_candidates(X, ids, candidates, n_classes, random_state=0)
    dense = FlatMargins(classes=flat.classes, coef=flat.coef.toarray(), intercept=flat.intercept, n_classes=n_classes)
    nodes = np.random.default_rng(0).integers(-1, n_classes, size=(X.shape[0], 6))
    rows = X.toarray() if dense_rows else X
    np.testing.assert_allclose(flat.score(rows, nodes), dense.score(X, nodes), rtol=1e-6, atol=1e-6)


def test_the_svm_of_the_candidates_refuses_dense_rows_and_misshapen_candidates():
    X, ids, candidates, n_classes = _candidates_problem(0)
    with pytest.raises(TypeError, match="sparse rows"):
        FlatMargins.fit_on_candidates(X.toarray(), ids, candidates, n_classes)
    with pytest.raises(ValueError, match=r"candidates must be of shape \(80, k\)"):
        FlatMargins.fit_on_candidates(X, ids, candidates[:-1], n_classes)


def _costs_of(monkeypatch, every=0.0, candidates=0.0, dense=0.0):
    """The estimated costs of the SVM against every row, the SVM of the candidates and the
    least-squares SVM (against the budget, a share of the network's estimated fit)."""
    monkeypatch.setattr(_costs, "flat_svm_cost", lambda *args: every)
    monkeypatch.setattr(_costs, "candidates_svm_cost", lambda *args: candidates)
    monkeypatch.setattr(_costs, "least_squares_cost", lambda *args: dense)


def _candidates_only(monkeypatch):
    """The SVM against every row over the budget, the SVM of the candidates within it."""
    _costs_of(monkeypatch, every=float("inf"))


def test_where_only_the_svm_of_the_candidates_is_within_the_budget_it_is_the_one(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True, n_samples=400)
    ids = tree.to_ids(y)
    _candidates_only(monkeypatch)
    assert "flat_term: the SVM against every row infx, the SVM of the candidates 0x: the SVM of the candidates tried" \
        in _fit(X, y, tree, calibration=None, flat_term="auto").config_.terms_tried_reason
    clf = _fit(X, y, tree, calibration=None, flat_term=4.0)  # (a fixed weight keeps it, whatever it gains)
    reason = clf.config_.flat_term_reason
    assert clf.answer_.weight("flat_term") == 4.0
    assert "the SVM against every row infx" in reason and "the SVM of the candidates" in reason
    # trained on the candidates the fitted network gives its training rows, as predict will re-rank them
    decoder = clf._decoder()
    paths, _, _ = decoder.model_paths(decoder.rows(X), clf.prototype_candidates)
    want = FlatMargins.fit_on_candidates(X, ids, last_nodes(paths), tree.n_classes, random_state=clf.random_state)
    assert sp.issparse(clf.answer_.terms["flat_term"].coef)
    np.testing.assert_array_equal(clf.answer_.terms["flat_term"].coef.toarray(), want.coef.toarray())
    np.testing.assert_array_equal(clf.answer_.terms["flat_term"].intercept, want.intercept)


def test_over_the_budget_auto_keeps_none_and_a_weight_the_cheaper_svm(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True, n_samples=400)
    _costs_of(monkeypatch, every=float("inf"), candidates=float("inf"))
    clf = _fit(X, y, tree, flat_term="auto")
    assert clf.config_.flat_term == 0 and clf.answer_.term("flat_term") is None
    assert clf.config_.flat_term_reason.endswith("over the budget")
    assert sp.issparse(_fit(X, y, tree, flat_term=4.0).answer_.terms["flat_term"].coef)  # a weight set by hand: the candidates'


def test_a_calibrating_fit_trains_the_svm_of_the_candidates_on_the_rows_it_trained_on(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True, n_samples=400)
    _candidates_only(monkeypatch)
    seen = {}

    def recording(cls, X, ids, candidates, *args, **kwargs):
        seen["labelled"] = int((ids >= 0).sum())
        return original(X, ids, candidates, *args, **kwargs)

    original = FlatMargins.fit_on_candidates
    monkeypatch.setattr(FlatMargins, "fit_on_candidates", classmethod(recording))
    clf = _fit(X, y, tree, calibration="beta", calibration_size=40, flat_term=4.0)
    assert clf.answer_.calibrator is not None and sp.issparse(clf.answer_.terms["flat_term"].coef)
    assert seen["labelled"] == len(y) - 40


def test_the_svm_of_the_candidates_exports_saves_and_loads(monkeypatch, tmp_path):
    X, y, tree = text_like(shuffle_ids=True, n_samples=400, seed=1)
    _candidates_only(monkeypatch)
    clf = _fit(X, y, tree, flat_term=4.0)
    assert sp.issparse(clf.answer_.terms["flat_term"].coef)
    want = np.asarray(clf.tree_.paths)[clf.predict_node(X)]
    np.testing.assert_array_equal(serving_module(clf)(torch.from_numpy(X.toarray()))[0].numpy(), want)
    folder = save_classifier(clf, tmp_path / "m")
    loaded = load_classifier(folder)
    np.testing.assert_array_equal(loaded.predict_node(X), clf.predict_node(X))
    assert (loaded.answer_.terms["flat_term"].coef != clf.answer_.terms["flat_term"].coef).nnz == 0
    arrays = clf.answer_.terms["flat_term"].to_arrays()
    for damage, message in ((("coef_indices", arrays["coef_indices"] + X.shape[1]), "feature ids below"),
                            (("coef_indptr", arrays["coef_indptr"][::-1].copy()), "rise from 0"),
                            (("coef_data", arrays["coef_data"].astype(np.float64)), "coef_data must be 1-D float32")):
        np.savez(folder / FLAT_TERM, **{**arrays, damage[0]: damage[1]})
        _redigest(folder)
        with pytest.raises(ModelFileError, match=message):
            load_classifier(folder)


# ---------------------------------------------------------------------------- when a fit keeps it
def test_a_fit_within_the_budget_tries_the_term_and_says_why(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True)
    _costs_of(monkeypatch)
    clf = _fit(X, y, tree, flat_term="auto")
    assert "a flat linear SVM against every row" in clf.config_.flat_term_reason
    assert "within the budget" in clf.config_.flat_term_reason or "flat_term: weight" in clf.config_.flat_term_reason
    assert "against every row tried" in clf.config_.terms_tried_reason
    clf = _fit(X, y, tree, flat_term=4.0)
    assert isinstance(clf.answer_.terms["flat_term"], FlatMargins)
    assert set(clf.answer_.terms["flat_term"].classes) == set(np.unique(tree.to_ids(y)))


def test_over_the_budget_auto_keeps_none(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True)
    monkeypatch.setattr(_config, "TERM_BUDGET", 0.0)
    _costs_of(monkeypatch, every=1.0, candidates=1.0, dense=1.0)
    clf = _fit(X, y, tree, flat_term="auto")
    assert clf.config_.flat_term == 0 and clf.answer_.term("flat_term") is None
    assert clf.config_.flat_term_reason.endswith("over the budget")
    # a weight set by hand is kept whatever the cost
    assert _fit(X, y, tree, flat_term=4.0).config_.flat_term == 4.0


def test_a_calibrating_fit_decodes_its_held_out_rows_with_a_term_of_the_other_rows(monkeypatch):
    """The calibrator and the prototypes' weight are fitted on the answers predict gives: the
    term is fitted once, on the rows the net trains on before it calibrates, and the held-out
    rows are re-ranked with that very term."""
    X, y, tree = text_like(shuffle_ids=True, n_samples=2400)
    assert _fit(X, y, tree, flat_term=None).answer_.term("flat_term") is None
    fitted_rows = []
    real_fit = FlatMargins.fit.__func__

    def recording_fit(cls, X, ids, *args, **kwargs):
        fitted_rows.append(int((np.asarray(ids) >= 0).sum()))  # the rows it fits: labelled ones
        return real_fit(cls, X, ids, *args, **kwargs)

    monkeypatch.setattr(FlatMargins, "fit", classmethod(recording_fit))
    clf = _fit(X, y, tree)  # 5% of 2,400 rows are held out for calibration
    assert clf.answer_.calibrator is not None and clf.answer_.term("flat_term") is not None
    assert fitted_rows == [2400 - 120]
    # a weight set by hand calibrates the same way
    assert _fit(X, y, tree, flat_term=8.0, calibration="beta").answer_.calibrator is not None


def test_dense_rows_keep_the_term_where_they_are_normalised_embeddings(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True)
    dense = X.toarray()
    unit = dense / np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-6)
    unit[np.linalg.norm(unit, axis=1) < 0.5, 0] = 1.0  # an empty row becomes a unit one
    clf = _fit(unit, y, tree, flat_term="auto")
    assert clf.config_.flat_term and "least-squares" in clf.config_.flat_term_reason
    assert isinstance(_fit(unit, y, tree, flat_term=4.0).answer_.terms["flat_term"], FlatMargins)
    assert _fit(torch.from_numpy(unit), y, tree, flat_term="auto").config_.flat_term
    other = _fit(dense, y, tree, flat_term="auto")  # numeric features: classes need not be linear in X
    assert other.answer_.term("flat_term") is None and "not all of length 1" in other.config_.flat_term_reason
    assert _fit(dense, y, tree, flat_term=4.0).config_.flat_term == 4.0
    coo = _fit(torch.from_numpy(X.toarray()).to_sparse(), y, tree, flat_term="auto")  # sparse as a scipy matrix is
    assert coo.config_.flat_term and "linear SVM" in coo.config_.flat_term_reason


def test_over_the_dense_work_limit_auto_keeps_none(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True)
    unit = np.eye(X.shape[1], dtype=np.float32)[np.arange(X.shape[0]) % X.shape[1]]
    _costs_of(monkeypatch, dense=float("inf"))
    clf = _fit(unit, y, tree, flat_term="auto")
    assert clf.answer_.term("flat_term") is None and clf.config_.flat_term_reason.endswith("over the budget")


# (where a linear term cannot be fitted: test_path_term.py, for both)


def test_label_sets_keep_no_flat_term():
    X, y, tree = text_like(shuffle_ids=True, n_samples=120)
    clf = MultiLabelHierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, [[v] for v in y])
    assert getattr(clf, "flat_term_", None) is None
    assert clf.config_.flat_term == 0 and "label sets" in clf.config_.flat_term_reason


# ---------------------------------------------------------------------------- the answer
# (bad values and the brute-force answer of every term, this one included: test_path_term.py)
def test_the_weight_may_be_changed_after_fit():
    X, y, tree = text_like(shuffle_ids=True)
    clf = _fit(X, y, tree)
    heavy = clf.set_params(flat_term=1e4).predict_node(X)
    ids = np.asarray(clf.tree_.paths)[heavy]
    decoder = clf._decoder()
    paths, log_prob, _ = decoder.candidates(decoder.rows(X))
    margins = clf.answer_.terms["flat_term"].score(X, last_nodes(paths))
    # with an overwhelming weight the answer is the candidate of the largest margin
    best = last_nodes(paths)[np.arange(len(paths)), np.argmax(np.where(np.isfinite(log_prob), margins, -np.inf), 1)]
    np.testing.assert_array_equal(last_nodes(ids[:, None, :])[:, 0], best)


# ---------------------------------------------------------------------------- export and persistence
def test_the_exported_module_answers_as_predict():
    X, y, tree = text_like(shuffle_ids=True, seed=1)
    clf = _fit(X, y, tree)
    paths, _ = serving_module(clf)(torch.from_numpy(X.toarray()))
    np.testing.assert_array_equal(paths.numpy(), np.asarray(clf.tree_.paths)[clf.predict_node(X)])
    module = serving_module(clf.set_params(prototypes=None))  # the flat term alone
    assert list(module.reranker.terms) == ["flat_term"]
    np.testing.assert_array_equal(module(torch.from_numpy(X.toarray()))[0].numpy(),
                                  np.asarray(clf.tree_.paths)[clf.predict_node(X)])


def test_save_and_load_keep_the_answers(tmp_path):
    X, y, tree = text_like(shuffle_ids=True, seed=2)
    clf = _fit(X, y, tree)
    save_classifier(clf, tmp_path / "m")
    assert (tmp_path / "m" / FLAT_TERM).exists()
    loaded = load_classifier(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict_node(X), clf.predict_node(X))
    np.testing.assert_array_equal(loaded.answer_.terms["flat_term"].coef, clf.answer_.terms["flat_term"].coef)
    assert loaded.config_.flat_term == clf.config_.flat_term


def _redigest(folder):
    from hiclass_parallel.estimators.io._persistence import CONFIG, _config_digest, _file_digest

    config = json.loads((folder / CONFIG).read_text())
    for name in config["digests"]:
        if name != CONFIG and (folder / name).exists():
            config["digests"][name] = _file_digest(folder / name)
    config["digests"][CONFIG] = _config_digest(config)
    (folder / CONFIG).write_text(json.dumps(config))


def test_a_damaged_or_missing_flat_term_file_is_a_named_error(tmp_path):
    X, y, tree = text_like(shuffle_ids=True, seed=3)
    clf = _fit(X, y, tree)
    folder = save_classifier(clf, tmp_path / "m")
    arrays = clf.answer_.terms["flat_term"].to_arrays()
    np.savez(folder / FLAT_TERM, **{**arrays, "coef": arrays["coef"][:, :-1]})
    _redigest(folder)
    with pytest.raises(ModelFileError, match="coef must be float32 of shape"):
        load_classifier(folder)
    np.savez(folder / FLAT_TERM, **{**arrays, "classes": arrays["classes"][::-1].copy()})
    _redigest(folder)
    with pytest.raises(ModelFileError, match="ascending distinct node ids"):
        load_classifier(folder)
    (folder / FLAT_TERM).unlink()
    with pytest.raises(ModelFileError, match="flat_term.npz is missing"):
        load_classifier(folder)


# ---------------------------------------------------------------------------- continuing
def test_continuing_drops_the_term_with_a_warning_and_saves(tmp_path):
    X, y, tree = text_like(shuffle_ids=True)
    clf = _fit(X, y, tree, warm_start=True)
    with pytest.warns(UserWarning, match="drops the answer model's flat term"):
        clf.fit(X, y)
    assert clf.answer_.term("flat_term") is None
    assert "continued" in clf.config_.flat_term_reason
    save_classifier(clf, tmp_path / "m")
    np.testing.assert_array_equal(load_classifier(tmp_path / "m").predict_node(X), clf.predict_node(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: nothing to drop the next time
        clf.partial_fit(X, y)


def test_an_interrupt_while_the_svm_fits_leaves_the_previous_model(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True, seed=4)
    clf = _fit(X, y, tree)
    before = (clf.net_, clf.answer_.terms["flat_term"], clf.config_, clf.predict_node(X))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(FlatMargins, "fit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        clf.fit(X[::-1], y[::-1])
    assert (clf.net_, clf.answer_.terms["flat_term"], clf.config_) == before[:3]
    np.testing.assert_array_equal(clf.predict_node(X), before[3])
