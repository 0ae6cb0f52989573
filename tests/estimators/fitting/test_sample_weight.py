"""Sample and class weights, the scikit-learn way.

A row's weight multiplies its loss, and each mini-batch's loss is the weighted mean, so an
integer weight must train what that many copies of the row train, and a zero weight what
dropping the row trains: checked on every training route with one full batch and a fixed
seed (the model, not only the loss). Bad weights are a named error; ``class_weight`` is a
weight per class; metadata routing carries ``sample_weight`` through ``Pipeline``,
``GridSearchCV`` and ``cross_validate``, whose hierarchical scorers weigh the test rows.
(The fused step's loss and gradients against the torch route and against repeated rows, per
step: ``tests/estimators/networks/engines/test_fused_step.py``; the criteria's: ``tests/losses/test_weighted_losses.py``.)
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
import torch
from support import sparse_rows

from hiclass_parallel import Tree
from hiclass_parallel.dag import Dag
from hiclass_parallel.estimators import HierarchicalClassifier, MultiLabelHierarchicalClassifier
from hiclass_parallel.estimators.fitting._targets import class_weights

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: One full batch, a fixed seed, no held-out rows: a route that is deterministic up to float
#: rounding, so that weighted and repeated rows must give the same model. SGD, whose step is
#: linear in the gradient: Adam divides each entry by its own size, which turns the rounding
#: noise of a gradient that is nearly zero into a step of about ``lr`` (the same model, but
#: not within a float tolerance). The fused step with LazyAdam's fused update is checked step
#: by step in tests/estimators/networks/engines/test_fused_step.py.
FULL_BATCH = {"max_epochs": 4, "batch_size": -1, "random_state": 0, "calibration": None, "lr": 0.5,
              "optimizer": torch.optim.SGD}


def _tree() -> Tree:
    rng = np.random.default_rng(0)
    return Tree.from_parents(np.r_[-1, -1, rng.integers(0, 2, 6), rng.integers(2, 8, 16)])


def _data(dense: bool, n: int = 48):
    tree = _tree()
    rng = np.random.default_rng(1)
    X = sparse_rows(n, 40, density=0.15, seed=2)
    X = X.toarray() if dense else X
    y = rng.integers(0, tree.n_classes, n)  # labels at any depth (node ids as labels)
    return tree, X, y


def _rows(X, index):
    return X[index] if not sp.issparse(X) else sp.csr_matrix(X)[index]


#: route -> (dense X, estimator parameters, the fused C step on or off)
ROUTES = {
    "fused-path-local": (False, {}, True),
    "torch-path-local-sparse": (False, {}, False),
    "torch-full-sparse": (False, {"training": "full"}, False),
    "torch-path-local-dense": (True, {"module__dropout": 0.0}, False),
    "torch-full-dense": (True, {"module__dropout": 0.0, "training": "full", "partition": "level"}, False),
    "terminal-stops": (False, {"semantics": "terminal"}, True),
}


def _fit(route: str, X, y, sample_weight=None, monkeypatch=None, **extra) -> HierarchicalClassifier:
    dense, params, fused = ROUTES[route]
    with pytest.MonkeyPatch.context() as mp:
        if not fused:  # the torch route, as tests/estimators/networks/engines/test_fused_step.py forces it
            mp.setattr("hiclass_parallel.estimators.networks.engines._fused.native.available", lambda: False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # flat_term=None, path_term=None: the linear terms' SVMs (liblinear) reach the same optimum
            # from weights and from repeated rows only to its tolerance (tests/estimators/answer/
            # test_flat_term.py and test_path_term.py weigh rows)
            clf = HierarchicalClassifier(_tree(), **FULL_BATCH, **params,
                                         **dict(dict(flat_term=None, path_term=None), **extra))
            return clf.fit(X, y, sample_weight=sample_weight)


def _assert_same_model(a: HierarchicalClassifier, b: HierarchicalClassifier, X) -> None:
    # the first epoch's loss is that of the same starting weights: the loss of one full-batch step
    assert a.net_.history[0, "train_loss"] == pytest.approx(b.net_.history[0, "train_loss"], rel=1e-5)
    for (name, p), q in zip(a.net_.module_.state_dict().items(), b.net_.module_.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_integer_weights_train_what_repeated_rows_train(route):
    """Weights 0-3 against each row repeated that many times (0: dropped): the same model,
    prototypes included, on the fused step and on the torch routes, dense and sparse. The
    prototypes' weight is fixed: a learnt one is learnt by cross-fitting, whose folds split
    rows, and a repeated row's copies can fall in both folds (docs/classifier.md, "Sample weights")."""
    tree, X, y = _data(ROUTES[route][0])
    weight = np.random.default_rng(3).integers(0, 4, y.shape[0])
    repeat = np.repeat(np.arange(y.shape[0]), weight)
    weighted = _fit(route, X, y, weight.astype(float), prototypes=8.0)
    repeated = _fit(route, _rows(X, repeat), y[repeat], prototypes=8.0)
    if weighted.path_local_:
        engine = "fused" if ROUTES[route][2] else "torch"
        assert weighted.net_.step_engine_ == repeated.net_.step_engine_ == engine
    _assert_same_model(weighted, repeated, X)
    sums = [clf.answer_.terms["prototypes"].sums for clf in (weighted, repeated)]
    dense_sums = [s.toarray() if sp.issparse(s) else s for s in sums]
    np.testing.assert_allclose(dense_sums[0], dense_sums[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("route", ["fused-path-local", "torch-path-local-sparse", "torch-full-dense"])
def test_a_zero_weight_is_a_dropped_row(route):
    """Zero and one against the rows of weight one alone (the unweighted fit of fewer rows),
    the prototypes' weight learnt by cross-fitting included: its folds are drawn over the rows
    of positive weight only, so both fits' folds hold the same rows."""
    tree, X, y = _data(ROUTES[route][0])
    keep = np.random.default_rng(4).random(y.shape[0]) < 0.7
    weighted = _fit(route, X, y, keep.astype(float))
    dropped = _fit(route, _rows(X, np.flatnonzero(keep)), y[keep])
    assert "cross-fitting" in weighted.config_.term_weights_reason
    assert "cross-fitting" in dropped.config_.term_weights_reason
    assert weighted.answer_.weights == pytest.approx(dropped.answer_.weights, rel=1e-6)
    assert weighted.answer_.scale == pytest.approx(dropped.answer_.scale, rel=1e-6)
    _assert_same_model(weighted, dropped, X)


def test_zero_weights_with_labels_that_only_convert_to_an_array():
    """scikit-learn's ``_NotAnArray`` (``__array__`` only, no indexing) as ``y`` beside rows of
    weight 0: cross-fitting reads it through its array before it drops those rows."""
    from sklearn.utils.estimator_checks import _NotAnArray

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6)).astype(np.float32)
    y = np.array(["a", "b", "c"] * 40)
    weight = np.ones(120)
    weight[:5] = 0.0
    clf = HierarchicalClassifier(max_epochs=3, random_state=0).fit(X, _NotAnArray(y), sample_weight=weight)
    plain = HierarchicalClassifier(max_epochs=3, random_state=0).fit(X, y, sample_weight=weight)
    assert "cross-fitting" in clf.config_.term_weights_reason
    assert clf.answer_.weights == plain.answer_.weights
    assert np.array_equal(clf.predict(X), plain.predict(X))


def test_fractional_weights_scale_free_and_ones_change_nothing():
    """Weights all 1 train bit for bit as no weights (the unweighted route runs); weights
    times a constant train the same model (a weighted mean per batch)."""
    tree, X, y = _data(False)
    plain = _fit("fused-path-local", X, y)
    ones = _fit("fused-path-local", X, y, np.ones(y.shape[0]))
    for p, q in zip(plain.net_.module_.state_dict().values(), ones.net_.module_.state_dict().values()):
        assert torch.equal(p, q)
    weight = np.random.default_rng(5).uniform(0.1, 2.0, y.shape[0])
    a, b = _fit("fused-path-local", X, y, weight), _fit("fused-path-local", X, y, 10.0 * weight)
    _assert_same_model(a, b, X)


def test_the_dag_classifier_weighs_its_label_pairs():
    """Multi-label on a DAG: a row's weight goes to each of its (row, label) pairs; integer
    weights train what repeated rows train, on the full and the path-local route."""
    dag = Dag.from_edges([("dog", "pet"), ("dog", "canine"), ("cat", "pet"), ("wolf", "canine"), ("pup", "dog")])
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 5)).astype(np.float32)
    labels = [["dog"], ["cat", "wolf"], ["pet"], ["pup"], ["canine", "cat"]]
    y = [labels[i] for i in rng.integers(0, len(labels), 30)]
    weight = rng.integers(0, 4, 30)
    repeat = np.repeat(np.arange(30), weight)
    for training in ("full", "path_local"):
        params = dict(FULL_BATCH, training=training, module__dropout=0.0)
        weighted = MultiLabelHierarchicalClassifier(dag, **params).fit(X, y, sample_weight=weight)
        repeated = MultiLabelHierarchicalClassifier(dag, **params).fit(X[repeat], [y[i] for i in repeat])
        _assert_same_model(weighted, repeated, X)


# ---------------------------------------------------------------------------- bad weights
@pytest.mark.parametrize(("weight", "match"), [
    ([1.0, -2.0], r"sample_weight\[1\] is -2\.0: weights must be finite and non-negative"),
    ([1.0, np.nan], r"sample_weight\[1\] is nan"),
    ([np.inf, 1.0], r"sample_weight\[0\] is inf"),
    ([1.0, 1.0, 1.0], r"sample_weight must have shape \(48,\), got \(3,\)"),
    ([[1.0]] * 48, r"sample_weight must have shape \(48,\), got \(48, 1\)"),
    (["a"] * 48, "sample_weight must be numbers"),
    ([0.0] * 48, "zero for every row"),
])
def test_bad_weights_are_a_named_error(weight, match):
    tree, X, y = _data(False)
    if len(weight) == 2:
        weight = list(weight) + [1.0] * (y.shape[0] - 2)
    clf = HierarchicalClassifier(tree, max_epochs=1)
    with pytest.raises(ValueError, match=match):
        clf.fit(X, y, sample_weight=weight)
    assert not hasattr(clf, "net_")


def test_a_streamed_dataset_yields_its_weights():
    """(x, label, weight) triples train what arrays with sample_weight train; fit's own
    sample_weight beside a data set, or a bad weight in it, is a named error."""
    from torch.utils.data import Dataset

    tree, X, y = _data(True)
    weight = np.random.default_rng(6).integers(0, 3, y.shape[0]).astype(float)

    class Triples(Dataset):
        def __init__(self, w):
            self.w = w

        def __len__(self):
            return len(y)

        def __getitem__(self, i):
            return X[i], y[i], self.w[i]

    params = dict(FULL_BATCH, module__dropout=0.0, iterator_train__shuffle=False, prototypes=None)
    streamed = HierarchicalClassifier(tree, **params).fit(Triples(weight))
    arrays = HierarchicalClassifier(tree, **params).fit(X, y, sample_weight=weight)
    _assert_same_model(streamed, arrays, X)
    with pytest.raises(ValueError, match="yields \\(x, label, weight\\) triples"):
        HierarchicalClassifier(tree, **params).fit(Triples(weight), sample_weight=weight)
    bad = weight.copy()
    bad[5] = -1.0
    with pytest.raises(ValueError, match="is -1.0"):
        HierarchicalClassifier(tree, **params).fit(Triples(bad))


# ---------------------------------------------------------------------------- class_weight
def test_balanced_class_weights_by_hand():
    classes = np.array(["a", "b", "c", "d"])
    nodes = np.array([0, 0, 0, 1, 2, 2, -1])
    # 6 labelled rows, 3 labelled nodes: 6 / (3 * 3), 6 / (3 * 1), 6 / (3 * 2); "d" labels none
    np.testing.assert_allclose(class_weights("balanced", classes, nodes), [2 / 3, 2.0, 1.0, 1.0])
    # sample-weighted counts: a: 1+1+2=4, b: 3, c: 0 (both rows of weight 0: not a labelled node)
    w = np.array([1.0, 1.0, 2.0, 3.0, 0.0, 0.0, 5.0])
    np.testing.assert_allclose(class_weights("balanced", classes, nodes, w), [7 / 8, 7 / 6, 1.0, 1.0])
    np.testing.assert_allclose(class_weights({"c": 0.5, "a": 2}, classes, nodes), [2.0, 1.0, 0.5, 1.0])
    assert class_weights(None, classes, nodes) is None


@pytest.mark.parametrize("class_weight", ["balanced", "mapping"])
def test_class_weight_is_the_sample_weight_of_its_rows(class_weight):
    """``class_weight`` trains what the same weights given row by row as ``sample_weight``
    train, multiplied with the rows' own weights: bit for bit."""
    tree, X, y = _data(False)
    rows = np.random.default_rng(7).integers(1, 3, y.shape[0]).astype(float)
    if class_weight == "mapping":
        given = {int(tree.labels[3]): 4.0, int(tree.labels[10]): 0.5}
        per_class = np.ones(tree.n_classes)
        per_class[[3, 10]] = [4.0, 0.5]
    else:
        given = "balanced"
        counts = np.bincount(y, weights=rows, minlength=tree.n_classes)
        per_class = np.where(counts > 0, counts.sum() / ((counts > 0).sum() * np.maximum(counts, 1e-300)), 1.0)
    by_class = _fit("fused-path-local", X, y, rows, class_weight=given)
    by_row = _fit("fused-path-local", X, y, rows * per_class[y])
    for p, q in zip(by_class.net_.module_.state_dict().values(), by_row.net_.module_.state_dict().values()):
        assert torch.equal(p, q)


def test_class_weight_names_classes_as_the_tree_finds_them():
    """Names that repeat under different parents: a class is named by its path (or a name only
    it has); a name several classes have is a named error listing their paths."""
    rng = np.random.default_rng(0)
    paths = [["Electronics", "Accessories"], ["Clothing", "Accessories"], ["Electronics", "Phones"], ["Clothing", "Tops"]]
    y = [paths[i] for i in rng.integers(0, 4, 40)]
    X = rng.standard_normal((40, 5)).astype(np.float32)
    params = dict(FULL_BATCH, module__dropout=0.0, prototypes=None)
    given = {("Electronics", "Accessories"): 3.0, "Phones": 2.0}
    by_class = HierarchicalClassifier(**params, class_weight=given).fit(X, y)
    rows = np.array([{0: 3.0, 2: 2.0}.get(paths.index(p), 1.0) for p in y])
    by_row = HierarchicalClassifier(**params).fit(X, y, sample_weight=rows)
    for p, q in zip(by_class.net_.module_.state_dict().values(), by_row.net_.module_.state_dict().values()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="'Accessories' is the name of 2 classes"):
        HierarchicalClassifier(**params, class_weight={"Accessories": 2.0}).fit(X, y)


def test_class_weight_errors_name_the_problem():
    tree, X, y = _data(False)
    with pytest.raises(ValueError, match="class_weight names 1 label.*'nope'"):
        HierarchicalClassifier(tree, max_epochs=1, class_weight={"nope": 2.0}).fit(X, y)
    with pytest.raises(ValueError, match=r"class_weight\[3\] is -1"):
        HierarchicalClassifier(tree, max_epochs=1, class_weight={3: -1}).fit(X, y)
    with pytest.raises(ValueError, match="not available in partial_fit"):
        HierarchicalClassifier(tree, max_epochs=1, class_weight="balanced").partial_fit(X, y)
    from sklearn.utils._param_validation import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="class_weight"):
        HierarchicalClassifier(tree, max_epochs=1, class_weight="uniform").fit(X, y)


def test_partial_fit_takes_weights():
    tree, X, y = _data(False)
    weight = np.random.default_rng(8).integers(0, 3, y.shape[0]).astype(float)
    repeat = np.repeat(np.arange(y.shape[0]), weight.astype(int))
    params = dict(FULL_BATCH, max_epochs=1)
    a = HierarchicalClassifier(tree, **params).partial_fit(X, y, sample_weight=weight)
    b = HierarchicalClassifier(tree, **params).partial_fit(X[repeat], y[repeat])
    a.partial_fit(X, y, sample_weight=weight)
    b.partial_fit(X[repeat], y[repeat])
    _assert_same_model(a, b, X)


def test_the_calibrator_and_prototype_weight_weigh_held_out_rows():
    """The answer calibrator's fit is a weighted log-loss: integer weights fit the map of
    repeated rows."""
    from hiclass_parallel.estimators import BetaCalibrator

    rng = np.random.default_rng(9)
    p = rng.uniform(0.05, 0.95, 200)
    right = rng.random(200) < p ** 1.5
    w = rng.integers(0, 4, 200)
    repeat = np.repeat(np.arange(200), w)
    a, b = BetaCalibrator.fit(p, right, sample_weight=w), BetaCalibrator.fit(p[repeat], right[repeat])
    assert (a.a, a.b, a.c) == pytest.approx((b.a, b.b, b.c), rel=1e-4, abs=1e-5)


def test_a_calibrated_fit_leaves_zero_weight_rows_out_of_the_calibrator():
    """calibration and prototypes="auto" on weighted rows: the held-out rows of weight zero
    count neither in the calibrator nor in the prototypes' weight; the others do."""
    tree, X, y = _data(True, n=240)
    weight = np.where(np.arange(240) % 3 == 0, 0.0, np.random.default_rng(11).uniform(0.5, 2.0, 240))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0, calibration="beta", calibration_size=90,
                                     module__dropout=0.0).fit(X, y, sample_weight=weight)
    assert 0 < clf.answer_.calibrator.n_rows < 90  # about two thirds of the held-out rows weigh more than zero
    assert np.isfinite(clf.predict_confidence(X)).all()


# ---------------------------------------------------------------------------- routing and scoring
def _small():
    tree, X, y = _data(True, n=60)
    weight = np.random.default_rng(10).integers(0, 3, y.shape[0]).astype(float)
    return tree, X, y, weight


def _spy_on_outer_fits(monkeypatch) -> list:
    """The ``sample_weight`` of each fit the caller starts, in order. A fit that learns its
    re-ranking weights by cross-fitting fits fold models inside it, which are not recorded."""
    import hiclass_parallel.estimators.classifier as classifier

    seen, depth = [], [0]
    real = classifier.run_fit

    def spy(*args, **kwargs):
        if not depth[0]:
            seen.append(kwargs.get("sample_weight"))
        depth[0] += 1
        try:
            return real(*args, **kwargs)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(classifier, "run_fit", spy)
    return seen


def test_metadata_routing_carries_sample_weight_through_pipeline_and_grid_search(monkeypatch):
    from sklearn.model_selection import GridSearchCV, KFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MaxAbsScaler

    tree, X, y, weight = _small()
    seen = _spy_on_outer_fits(monkeypatch)
    cv = KFold(2, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0, calibration=None)
        clf.set_fit_request(sample_weight=True).set_score_request(sample_weight=True)
        search = GridSearchCV(make_pipeline(MaxAbsScaler(), clf), {"hierarchicalclassifier__lr": [0.01, 0.02]}, cv=cv)
        search.fit(X, y, sample_weight=weight)
    folds = [test for _, test in cv.split(X)]
    trains = [np.setdiff1d(np.arange(len(y)), test) for test in folds]
    assert len(seen) == 2 * 2 + 1  # two settings on two folds, and the refit
    for got, rows in zip(seen[:4], trains * 2):
        np.testing.assert_array_equal(got, weight[rows])
    np.testing.assert_array_equal(seen[-1], weight)
    # the score of each split is the estimator's weighted score of its test rows
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def test_cross_validate_weighs_training_and_the_hierarchical_scorer():
    from sklearn.model_selection import KFold, cross_validate

    from hiclass_parallel.metrics import get_scorer, hierarchical_f1_score

    tree, X, y, weight = _small()
    with sklearn.config_context(enable_metadata_routing=True):
        clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0, calibration=None)
        clf.set_fit_request(sample_weight=True)
        scorer = get_scorer("hierarchical_f1").set_score_request(sample_weight=True)
        result = cross_validate(clf, X, y, cv=KFold(2), scoring=scorer, params={"sample_weight": weight},
                                return_estimator=True, return_indices=True)
    for est, test, score in zip(result["estimator"], result["indices"]["test"], result["test_score"]):
        by_hand = hierarchical_f1_score(y[test], est.predict_node(X[test]), tree, input_type="ids",
                                        sample_weight=weight[test])
        assert score == pytest.approx(by_hand)
        assert est.score(X[test], y[test], sample_weight=weight[test]) == pytest.approx(by_hand)
        unweighted = hierarchical_f1_score(y[test], est.predict_node(X[test]), tree, input_type="ids")
        assert by_hand != pytest.approx(unweighted)  # the weights counted


def test_class_text_classifier_passes_sample_weight_on(monkeypatch):
    """The classifier's fit gets the weights (the vectorizer is fitted on every document, as
    in a Pipeline), and trains what it trains on the vectorized rows with those weights."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from hiclass_parallel.estimators import ClassTextClassifier

    tree = Tree.from_edges([("animal", None), ("plant", None), ("dog", "animal"), ("cat", "animal"),
                            ("oak", "plant"), ("rose", "plant")])
    docs = ["dog barks loud", "cat purrs soft", "oak tree tall", "rose red flower"] * 6
    y = ["dog", "cat", "oak", "rose"] * 6
    weight = np.tile([1.0, 2.0, 0.0, 1.0], 6)
    seen = _spy_on_outer_fits(monkeypatch)
    params = dict(FULL_BATCH, max_epochs=2)
    text = {"dog": "dog", "cat": "cat"}
    fitted = ClassTextClassifier(TfidfVectorizer(), HierarchicalClassifier(tree, **params), text).fit(docs, y, weight)
    np.testing.assert_array_equal(seen[-1], weight)
    features = fitted.vectorizer_.transform(docs)
    direct = HierarchicalClassifier(tree, **params, module__class_features=fitted.class_features_)
    direct.fit(features, y, sample_weight=weight)
    np.testing.assert_allclose(fitted.predict_proba(docs), direct.predict_proba(features), rtol=1e-6)


# ---------------------------------------------------------------------------- weighted metrics
def test_weighted_metrics_by_hand():
    from hiclass_parallel.metrics import (expected_calibration_error, hierarchical_f1_score,
                                          hierarchical_precision_score, hierarchical_recall_score)

    tree = Tree.from_edges([("a", None), ("b", None), ("a1", "a"), ("a2", "a"), ("b1", "b")])
    true = ["a1", "a2", "b1"]
    pred = ["a1", "a1", "a2"]
    w = [2.0, 1.0, 3.0]
    # node sets: {a, a1} vs {a, a1}: 2 common; {a, a2} vs {a, a1}: 1; {b, b1} vs {a, a2}: 0
    common, n_true, n_pred = 2 * 2 + 1 * 1 + 3 * 0, 2 * 2 + 1 * 2 + 3 * 2, 2 * 2 + 1 * 2 + 3 * 2
    p, r = common / n_pred, common / n_true
    assert hierarchical_precision_score(true, pred, tree, sample_weight=w) == pytest.approx(p)
    assert hierarchical_recall_score(true, pred, tree, sample_weight=w) == pytest.approx(r)
    assert hierarchical_f1_score(true, pred, tree, sample_weight=w) == pytest.approx(2 * p * r / (p + r))
    # integer weights are repeated rows
    rows = [0, 0, 1, 2, 2, 2]
    assert hierarchical_f1_score(true, pred, tree, sample_weight=w) == pytest.approx(
        hierarchical_f1_score([true[i] for i in rows], [pred[i] for i in rows], tree))
    # calibration error: one bin at 0.9 of weight 3 (2 of it right), one at 0.1 of weight 0 (left out)
    ece, bins = expected_calibration_error([True, False, True], [0.9, 0.9, 0.1], n_bins=10,
                                           sample_weight=[2.0, 1.0, 0.0], return_bins=True)
    assert ece == pytest.approx(abs(0.9 - 2 / 3))
    assert len(bins) == 1 and bins[0]["count"] == 3.0
    with pytest.raises(ValueError, match=r"sample_weight\[0\] is -1.0"):
        expected_calibration_error([True], [0.5], sample_weight=[-1.0])
