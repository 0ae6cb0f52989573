"""The answer calibrator: the map, the held-out rows, the fit scheme, persistence and the API."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.special import expit
from skorch.dataset import ValidSplit
from support import sparsify

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier, MultiLabelHierarchicalClassifier
from hiclass_parallel.estimators.answer._calibration import (
    BetaCalibrator,
    answer_correct,
    held_out_size,
    held_out_view,
    plan_calibration,
)
from hiclass_parallel.estimators.io._persistence import load_classifier, save_classifier
from hiclass_parallel.estimators.prediction._decode import chosen_log_prob as _chosen_log_prob


@pytest.fixture(scope="module")
def data():
    return make_hierarchical_classification(n_samples=2500, n_features=8, branching=3, depth=2, random_state=0)


# ---------------------------------------------------------------------------- the map
def test_beta_map_recovers_the_map_that_drew_the_outcomes():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 0.99, size=200_000)
    a, b, c = 1.8, 0.6, -0.4
    truth = expit(a * np.log(p) - b * np.log1p(-p) + c)
    cal = BetaCalibrator.fit(p, rng.uniform(size=p.size) < truth)
    np.testing.assert_allclose([cal.a, cal.b, cal.c], [a, b, c], atol=0.05)
    assert cal.n_rows == p.size
    grid = np.linspace(0, 1, 101)
    assert (np.diff(cal(grid)) >= 0).all()  # monotone, also at the clipped ends


def test_beta_map_of_calibrated_outcomes_is_near_the_identity():
    rng = np.random.default_rng(1)
    p = rng.uniform(size=100_000)
    cal = BetaCalibrator.fit(p, rng.uniform(size=p.size) < p)
    np.testing.assert_allclose(cal(np.array([0.1, 0.5, 0.9])), [0.1, 0.5, 0.9], atol=0.02)


def test_beta_map_keeps_nan_and_ignores_it_when_fitting():
    p = np.array([0.9, 0.9, 0.2, 0.2, np.nan])
    cal = BetaCalibrator.fit(p, np.array([True, False, False, False, True]))
    assert cal.n_rows == 4
    out = cal(p)
    assert np.isnan(out[-1]) and np.isfinite(out[:-1]).all()


@pytest.mark.parametrize(
    "values, message",
    [
        ({"kind": "beta", "a": -1.0, "b": 1.0, "c": 0.0, "n_rows": 5}, "a, b >= 0"),
        ({"kind": "beta", "a": 1.0, "b": 1.0, "c": float("nan"), "n_rows": 5}, "non-finite"),
        ({"kind": "beta", "a": True, "b": 1.0, "c": 0.0, "n_rows": 5}, "non-numeric"),
        ({"kind": "beta", "a": 1.0, "b": 1.0, "n_rows": 5}, "expected kind 'beta'"),
        ({"kind": "isotonic", "a": 1.0, "b": 1.0, "c": 0.0, "n_rows": 5}, "expected kind 'beta'"),
        ([1.0, 1.0, 0.0], "not a saved answer calibrator"),
    ],
)
def test_saved_maps_are_checked(values, message):
    with pytest.raises(ValueError, match=message):
        BetaCalibrator.from_dict(values)


def test_saved_map_round_trips():
    cal = BetaCalibrator(a=1.5, b=0.25, c=-0.5, n_rows=300)
    assert BetaCalibrator.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


# ---------------------------------------------------------------------------- held-out rows
def test_held_out_rows_lose_unseen_features_and_keep_unit_norm():
    X = sp.csr_matrix(np.array([
        [0.6, 0.8, 0.0, 0.0],   # fit row
        [0.0, 0.6, 0.8, 0.0],   # held: feature 2 is in no fit row
        [0.0, 0.0, 0.0, 1.0],   # held: only unseen features -> empty
        [0.0, 0.0, 0.0, 1.0],   # fit row? no: held (feature 3 seen by no fit row)
    ], dtype=np.float32))
    view = held_out_view(X, np.array([0]), np.array([1, 2]))
    np.testing.assert_allclose(view.toarray(), [[0, 1, 0, 0], [0, 0, 0, 0]])
    # The caller's matrix is unchanged.
    assert X[1, 2] == pytest.approx(0.8)


def test_held_out_rows_are_rescaled_only_when_every_row_has_unit_norm():
    X = sp.csr_matrix(np.array([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32))
    view = held_out_view(X, np.array([0]), np.array([1]))
    np.testing.assert_allclose(view.toarray(), [[1.0, 1.0, 0.0]])  # unseen column 2 dropped, no rescale
    X1 = sp.csr_matrix(np.array([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]], dtype=np.float32))  # l1 rows
    np.testing.assert_allclose(held_out_view(X1, np.array([0]), np.array([1])).toarray(), [[0.5, 0.5, 0.0]])


def test_dense_held_out_rows_are_the_rows():
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(held_out_view(X, np.array([0, 1]), np.array([3, 2])), X[[3, 2]])
    Xt = torch.as_tensor(X)
    torch.testing.assert_close(held_out_view(Xt, np.array([0, 1]), np.array([2])), Xt[[2]])


def test_right_answers_under_both_semantics():
    paths = np.array([[0, 3, -1], [0, 3, 7], [1, -1, -1]])
    true = np.array([3, 3, 2])
    np.testing.assert_array_equal(answer_correct(paths, true, "terminal"), [True, False, False])
    np.testing.assert_array_equal(answer_correct(paths, true, "partial"), [True, True, False])


def test_chosen_path_log_prob_is_that_of_the_path_it_came_from():
    paths = np.array([[[0, 3], [1, 4], [0, 5]], [[1, 4], [1, 6], [0, 3]]])  # (n, k, L)
    log_prob = np.log(np.array([[0.4, 0.35, 0.25], [0.5, 0.3, 0.2]]))
    chosen = np.array([[0, 5], [1, -1]])  # a lower-ranked path, and an ancestor of the best
    np.testing.assert_allclose(_chosen_log_prob(paths, log_prob, chosen), np.log([0.25, 0.5]))


# ---------------------------------------------------------------------------- when a fit calibrates
class _Est:
    _calibrates = True

    def __init__(self, calibration="auto", size="auto", train_split=None, early_stopping=False):
        self.calibration, self.calibration_size = calibration, size
        self.train_split, self.early_stopping = train_split, early_stopping


@pytest.mark.parametrize(
    "kwargs, plan_args, reason",
    [
        ({}, dict(epochs=1), "partial_fit"),
        ({}, dict(streaming=True), "streamed"),
        ({"train_split": ValidSplit(5)}, {}, "validation split"),
        ({"early_stopping": True}, {}, "validation split"),
        ({"size": 0.1}, dict(n_rows=150), "holds out 15 of 150 rows, fewer than"),
        ({"size": 150}, dict(n_rows=150), "holds out all 150 rows"),
    ],
)
def test_auto_calibrates_only_where_it_can_and_beta_says_why_not(kwargs, plan_args, reason):
    args = dict(n_rows=5000, max_epochs=3, epochs=None, streaming=False, seed=0, sparse_module=True) | plan_args
    assert plan_calibration(_Est("auto", **kwargs), **args) is None
    with pytest.raises(ValueError, match=reason):
        plan_calibration(_Est("beta", **kwargs), **args)
    assert plan_calibration(_Est(None, **kwargs), **args) is None


@pytest.mark.parametrize("size, n_rows, held", [("auto", 2000, 100), ("auto", 65_691, 1000), (0.2, 1000, 200),
                                                (300, 1000, 300), ("auto", 1999, 99)])
def test_held_out_size(size, n_rows, held):
    assert held_out_size(size, n_rows) == held


def test_plan_holds_out_the_size_disjointly_and_reproducibly():
    plan = plan_calibration(_Est("beta", size=0.2), 1000, 4, None, False, seed=7, sparse_module=True)
    assert plan.held_rows.size == 200 and plan.fit_rows.size == 800 and not plan.rejoin
    assert plan_calibration(_Est("beta", size=0.2), 1000, 5, None, False, seed=7, sparse_module=True).rejoin
    # A dense module's held-out rows never rejoin (every weight moves at every step).
    assert not plan_calibration(_Est("beta", size=0.2), 1000, 10, None, False, seed=7, sparse_module=False).rejoin
    assert np.union1d(plan.held_rows, plan.fit_rows).size == 1000
    again = plan_calibration(_Est("beta", size=0.2), 1000, 4, None, False, seed=7, sparse_module=True)
    np.testing.assert_array_equal(again.held_rows, plan.held_rows)
    # "auto" needs 100 held-out rows (2,000 rows); an explicit request works from 20.
    assert plan_calibration(_Est("auto"), 1999, 3, None, False, seed=0, sparse_module=True) is None
    assert plan_calibration(_Est("beta", size=0.1), 200, 3, None, False, seed=0, sparse_module=True).held_rows.size == 20


# ---------------------------------------------------------------------------- weights held out
def test_the_minimum_counts_what_the_held_out_weights_are_worth():
    args = dict(n_rows=2400, max_epochs=3, epochs=None, streaming=False, seed=0, sparse_module=True)
    plain = plan_calibration(_Est("auto"), **args)
    assert plain.held_rows.size == 120
    # equal weights are worth their rows: the same plan as without weights
    same = plan_calibration(_Est("auto"), **args, sample_weight=np.full(2400, 3.0))
    np.testing.assert_array_equal(same.held_rows, plain.held_rows)
    # weight 0 but on 40 rows of 2,400: the ~2 held-out rows with weight cannot calibrate
    weight = np.zeros(2400)
    weight[np.random.default_rng(0).choice(2400, 40, replace=False)] = 1.0
    with pytest.warns(UserWarning, match=r"120 held-out rows' sample_weight is worth \d\.\d rows.*fewer than 100"):
        assert plan_calibration(_Est("auto"), **args, sample_weight=weight) is None
    with pytest.raises(ValueError, match="sample_weight is worth .* fewer than 20"):
        plan_calibration(_Est("beta"), **args, sample_weight=weight)
    # 120 rows with weight, one of them heavy: about one row's worth
    heavy = np.ones(2400)
    heavy[plain.held_rows[0]] = 1e4
    with pytest.warns(UserWarning, match="worth 1.0 rows"):
        assert plan_calibration(_Est("auto"), **args, sample_weight=heavy) is None


def test_a_fit_whose_held_out_rows_carry_no_weight_does_not_calibrate(data):
    # The scenario of a fit that once calibrated on one row: predict_confidence said 1.0 for
    # every row while half the answers were wrong.
    X, y, tree = data
    weight = np.zeros(2400)
    weight[np.random.default_rng(0).choice(2400, 40, replace=False)] = 1.0
    clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0)
    with pytest.warns(UserWarning, match="does not calibrate this fit") as record:
        clf.fit(X[:2400], y[:2400], sample_weight=weight)
    assert [w.filename for w in record if "does not calibrate" in str(w.message)] == [__file__]  # the user's line
    assert clf.answer_.calibrator is None
    _, log_prob = clf.predict_top_k(X[2400:], 1, return_log_prob=True)
    np.testing.assert_allclose(clf.predict_confidence(X[2400:]), np.exp(log_prob[:, 0].astype(np.float64)))
    with pytest.raises(ValueError, match="sample_weight is worth"):
        HierarchicalClassifier(tree, max_epochs=2, calibration="beta").fit(X[:2400], y[:2400], sample_weight=weight)
    weighted = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X[:2400], y[:2400],
                                                                              sample_weight=np.full(2400, 2.0))
    assert weighted.answer_.calibrator.n_rows == 120


def test_the_prototypes_weight_needs_rows_worth_the_minimum():
    from hiclass_parallel.estimators.answer._prototypes import DEFAULT_WEIGHT, MIN_ROWS, choose_weight_and_scale

    rng = np.random.default_rng(0)
    lp = np.log(rng.dirichlet(np.ones(5), size=60)).astype(np.float32)
    sim = rng.random((60, 5)).astype(np.float32)
    correct = np.arange(5) == np.argmax(lp + 3.0 * sim + rng.gumbel(size=(60, 5)), axis=1)[:, None]
    assert choose_weight_and_scale(lp, sim, correct)[0] != DEFAULT_WEIGHT  # 60 rows: fitted
    weight = np.ones(60)
    weight[0] = 1e4  # 60 rows of positive weight, worth about one
    assert choose_weight_and_scale(lp, sim, correct, sample_weight=weight) == (DEFAULT_WEIGHT, 1.0)
    weight = np.zeros(60)
    weight[:MIN_ROWS - 1] = 1.0
    assert choose_weight_and_scale(lp, sim, correct, sample_weight=weight) == (DEFAULT_WEIGHT, 1.0)


def test_the_linear_terms_count_targets_and_rows_of_positive_weight():
    from hiclass_parallel.estimators.fitting._config import resolve_linear_terms

    X, y, tree = make_hierarchical_classification(n_samples=400, n_features=6, branching=2, depth=2, random_state=0)
    X = sp.csr_matrix(np.abs(X).astype(np.float32))
    ids = tree.to_ids(y)
    keep = ids == ids[0]
    weight = keep.astype(float)  # only one target's rows carry weight
    config = HierarchicalClassifier(tree, flat_term=None, prototypes=None, max_epochs=1).fit(X, y).config_
    args = dict(partial=False, data_parallel=False, config=config)
    for name in ("flat_term", "path_term"):
        fixed = HierarchicalClassifier(tree, **{name: 1.0})
        assert getattr(resolve_linear_terms(fixed, tree, ids, X, **args), name) == 1.0
        with pytest.raises(ValueError, match=f"{name}=1.0 cannot be fitted here: 1 distinct training target"):
            resolve_linear_terms(fixed, tree, ids, X, **args, sample_weight=weight)
        off = resolve_linear_terms(HierarchicalClassifier(tree, flat_term="auto", path_term="auto"), tree, ids, X,
                                   **args, sample_weight=weight)
        assert getattr(off, name) == 0.0 and "1 distinct training target" in getattr(off, f"{name}_reason")
        # a fit with such weights has no linear term rather than an SVM of one class
        with pytest.raises(ValueError, match="1 distinct training target"):
            HierarchicalClassifier(tree, max_epochs=1, **{name: 1.0}).fit(X, y, sample_weight=weight)


# ---------------------------------------------------------------------------- the fit scheme
@pytest.mark.parametrize("epochs", [3, 5])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_fit_is_the_documented_scheme(data, epochs, sparse):
    """The calibrated fit equals, weight for weight and map for map, the scheme run by hand
    through the public API (same seed: same draws, same shuffles): under 5 epochs, and on dense
    input, every epoch without the held-out rows and the map on the final model; a text model
    from 5 epochs: all epochs but the last without them, the map, then the last epoch on every
    row."""
    X, y, tree = data
    if sparse:  # non-negative, like TF-IDF: the text module (SparseMLP)
        X = sp.csr_matrix(np.abs(X).astype(np.float32))
    # prototypes=None: the calibrator of the model's own answers (test_prototypes checks the
    # re-ranked ones)
    clf = HierarchicalClassifier(tree, max_epochs=epochs, random_state=0, prototypes=None, flat_term=None,
                                 path_term=None).fit(X, y)
    assert len(clf.net_.history) == epochs and clf.answer_.calibrator.n_rows == 125

    seed = int(np.random.RandomState(0).randint(np.iinfo(np.int32).max))  # the fit's seed draw
    plan = plan_calibration(clf, X.shape[0], epochs, None, False, seed, sparse_module=sparse)
    assert plan.rejoin == (sparse and epochs >= 5)
    by_hand = HierarchicalClassifier(tree, max_epochs=epochs - plan.rejoin, random_state=0, calibration=None,
                                     prototypes=None, flat_term=None, path_term=None)
    by_hand.fit(X[plan.fit_rows], y[plan.fit_rows])
    _, log_prob = by_hand.predict_top_k(X[plan.held_rows], 1, return_log_prob=True)
    right = by_hand.predict_node(X[plan.held_rows]) == tree.to_ids(y[plan.held_rows])
    assert clf.answer_.calibrator == BetaCalibrator.fit(np.exp(log_prob[:, 0].astype(np.float64)), right)
    if plan.rejoin:
        by_hand.partial_fit(X, y)  # uncalibrated: nothing to drop
    for mine, theirs in zip(clf.net_.module_.parameters(), by_hand.net_.module_.parameters()):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("decoding, prototypes", [("best", None), ("best", "auto"), ("hf1", "auto"),
                                                  ("threshold", 0.5)])
def test_the_calibrator_is_fitted_on_a_decoder_of_the_trained_net_not_on_a_half_fitted_estimator(
        data, monkeypatch, decoding, prototypes):
    from hiclass_parallel.estimators.fitting import _answer_fit

    X, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0, decoding=decoding, prototypes=prototypes,
                                 module__hidden_units=8, calibration="beta")
    seen = []
    real = _answer_fit.decode

    def spy(decoder, rows, *args, **kwargs):
        out = real(decoder, rows, *args, **kwargs)
        seen.append((out.route, {"net_", "config_", "targets_", "tree_", "answer_"} & set(vars(clf)),
                     decoder.net))
        return out

    monkeypatch.setattr(_answer_fit, "decode", spy)
    clf.fit(X, y)
    (route, fitted_then, net), = seen  # the held-out rows decoded once, by the dispatcher
    assert fitted_then == set() and net is clf.net_  # nothing fitted yet; the net just trained
    # the route predict takes now that the estimator is fitted
    assert route == real(clf._decoder(), X[:3]).route
    assert route.rule == decoding and (route.reranking == "prototypes") is (prototypes is not None and decoding != "threshold")


def test_predict_confidence_maps_the_probability_of_the_predicted_path(data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0).fit(X, y)
    _, log_prob = clf.predict_top_k(X[:200], 1, return_log_prob=True)
    raw = np.exp(log_prob[:, 0].astype(np.float64))
    np.testing.assert_allclose(clf.predict_confidence(X[:200]), clf.answer_.calibrator(raw))
    off = HierarchicalClassifier(tree, max_epochs=3, random_state=0, calibration=None).fit(X, y)
    assert off.answer_.calibrator is None
    np.testing.assert_allclose(off.predict_confidence(X[:200]),
                               np.exp(off.predict_top_k(X[:200], 1, return_log_prob=True)[1][:, 0].astype(np.float64)))


def test_calibration_lowers_the_calibration_error_on_new_rows():
    """A model trained 30 epochs on 2,100 noisy rows is overconfident on new rows; its map,
    fitted on 900 held-out rows, brings the mean confidence to the accuracy."""
    X, y, tree = make_hierarchical_classification(n_samples=6000, n_features=10, branching=4, depth=2,
                                                  noise=1.5, random_state=3)
    train, test = slice(0, 3000), slice(3000, None)
    clf = HierarchicalClassifier(tree, max_epochs=30, calibration="beta", calibration_size=0.3, prototypes=None,
                                 random_state=0, batch_size=64).fit(X[train], y[train])
    _, log_prob = clf.predict_top_k(X[test], 1, return_log_prob=True)
    right = clf.predict_node(X[test]) == tree.to_ids(y[test])
    raw_gap = abs(np.exp(log_prob[:, 0].astype(np.float64)).mean() - right.mean())
    gap = abs(clf.predict_confidence(X[test]).mean() - right.mean())
    assert raw_gap > 0.05, raw_gap  # the setting is overconfident, else the test shows nothing
    assert gap < raw_gap / 2, (gap, raw_gap)


def test_continuing_drops_the_map_with_a_warning(data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)
    assert clf.answer_.calibrator is not None
    with pytest.warns(UserWarning, match="drops the answer model's calibrator"):
        clf.partial_fit(X, y)
    assert clf.answer_.calibrator is None
    warm = HierarchicalClassifier(tree, max_epochs=2, random_state=0, warm_start=True).fit(X, y)
    with pytest.warns(UserWarning, match="drops the answer model's calibrator"):
        warm.fit(X, y)
    first = HierarchicalClassifier(tree, random_state=0).partial_fit(X, y)
    assert first.answer_.calibrator is None


def test_sparse_text_like_fit_calibrates_on_the_new_document_view():
    rng = np.random.default_rng(0)
    X, y, tree = make_hierarchical_classification(n_samples=2400, n_features=30, branching=3, depth=2, random_state=1)
    Xs = sparsify(X, 0.3, rng)
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=2, random_state=0).fit(Xs, y)
    assert clf.answer_.calibrator is not None and clf.answer_.calibrator.n_rows == 120
    conf = clf.predict_confidence(Xs[:50])
    assert conf.shape == (50,) and ((conf >= 0) & (conf <= 1)).all()


def test_multilabel_has_no_answer_to_calibrate(data):
    X, y, tree = data
    labels = [[label] for label in y]
    clf = MultiLabelHierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, labels)
    assert clf.answer_.calibrator is None and not hasattr(clf, "predict_confidence")
    with pytest.raises(ValueError, match="calibration"):
        MultiLabelHierarchicalClassifier(tree, calibration="beta", max_epochs=2).fit(X, labels)


# ---------------------------------------------------------------------------- persistence
def test_saved_map_loads_and_a_tampered_one_is_named(tmp_path, data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)
    folder = save_classifier(clf, tmp_path / "model")
    loaded = load_classifier(folder)
    assert loaded.answer_.calibrator == clf.answer_.calibrator
    np.testing.assert_array_equal(loaded.predict_confidence(X[:100]), clf.predict_confidence(X[:100]))

    from hiclass_parallel.estimators.io._persistence import _config_digest

    config = json.loads((folder / "config.json").read_text())
    config["fitted"]["answer_"]["__dict__"]["calibrator"]["__dict__"]["a"] = -2.0
    config["digests"]["config.json"] = _config_digest(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json: .*a, b >= 0"):
        load_classifier(folder)

    del config["fitted"]["answer_"]  # every file says what its answer model holds
    config["digests"]["config.json"] = _config_digest(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="'fitted' section lacks answer_"):
        load_classifier(folder)
    config["fitted"]["answer_"] = {"__dict__": {"terms": [], "weights": {"__dict__": {}}, "scale": 1.0,
                                                "calibrator": None}}  # an uncalibrated model's, of no term
    for name in ("prototypes.npz", "flat_term.npz"):  # (the terms' files go with them)
        if (folder / name).exists():
            (folder / name).unlink()
            del config["digests"][name]
    config["digests"]["config.json"] = _config_digest(config)
    (folder / "config.json").write_text(json.dumps(config))
    assert load_classifier(folder).answer_.calibrator is None


# ---------------------------------------------------------------------------- model selection
def test_calibration_is_a_parameter_model_selection_clones_and_sets(data):
    from sklearn.model_selection import GridSearchCV, cross_validate

    X, y, tree = data
    base = HierarchicalClassifier(tree, max_epochs=2, random_state=0, calibration="beta")
    folds = cross_validate(base, X, y, cv=2, return_estimator=True)
    for fitted in folds["estimator"]:  # 1,250 rows per fold: 62 held out at the default size
        assert fitted.answer_.calibrator is not None and fitted.answer_.calibrator.n_rows == 62
    search = GridSearchCV(base, {"calibration_size": [0.1, 300], "calibration": ["beta", None]}, cv=2).fit(X, y)
    sizes = {(p["calibration"], p["calibration_size"]) for p in search.cv_results_["params"]}
    assert sizes == {("beta", 0.1), ("beta", 300), (None, 0.1), (None, 300)}
    best = search.best_estimator_
    assert (best.answer_.calibrator is None) == (best.calibration is None)
    if best.calibration is not None:
        assert best.answer_.calibrator.n_rows == (250 if best.calibration_size == 0.1 else 300)
