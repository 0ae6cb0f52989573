"""The path-level linear term in the fit (``path_term``): when a fit keeps it and why, what it is
fitted on, the re-ranked answer against brute force over every term, export, persistence,
continuing training (growing the tree: ``test_grow.py``); and what both linear terms share:
where they cannot be fitted, bad values. Its margins against one SVM per node are
``test_path_margins.py``'s."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from support import text_like

from hiclass_parallel.estimators import HierarchicalClassifier, serving_module
from hiclass_parallel.estimators.answer import PathMargins
from hiclass_parallel.estimators.answer import _held_out
from hiclass_parallel.estimators.answer._prototypes import last_nodes
from hiclass_parallel.estimators.fitting import _costs
from hiclass_parallel.estimators.io._persistence import PATH_TERM, load_classifier, save_classifier
from hiclass_parallel.exceptions import IgnoredSettingWarning, ModelFileError


@pytest.fixture(autouse=True)
def _every_svm_within_the_budget(monkeypatch):
    """These fits train a network of a few epochs, beside which an SVM's estimated cost is over
    the budget; the tests about the budget set the estimates themselves."""
    for name in ("flat_svm_cost", "candidates_svm_cost", "least_squares_cost"):
        monkeypatch.setattr(_costs, name, lambda *args: 0.0)
    _path_cost(monkeypatch, 0.0)


def _path_cost(monkeypatch, cost):
    """The path-level term's estimated cost set to ``cost``, its route the cheaper one's."""
    real = _costs.path_term_cost
    monkeypatch.setattr(_costs, "path_term_cost", lambda X, classes: (cost, real(X, classes)[1]))


def _fit(X, y, tree, **params):
    """A fit with a path-level term of a fixed weight unless ``path_term`` is given, and no flat
    term unless ``flat_term`` is given."""
    params = {"semantics": "terminal", "max_epochs": 3, "random_state": 0, "path_term": 4.0, "flat_term": None,
              **params}
    return HierarchicalClassifier(tree, **params).fit(X, y)


# ---------------------------------------------------------------------------- what is fitted
def test_a_fixed_weight_fits_the_term_on_every_training_row():
    X, y, tree = text_like(shuffle_ids=True, n_samples=300)
    clf = _fit(X, y, tree, calibration=None)
    want = PathMargins.fit(X, tree.to_ids(y), clf.tree_, random_state=clf.random_state)
    got = clf.answer_.terms["path_term"]
    np.testing.assert_array_equal(got.margins.classes, want.margins.classes)
    np.testing.assert_array_equal(got.margins.coef, want.margins.coef)
    np.testing.assert_array_equal(got.margins.intercept, want.margins.intercept)
    assert clf.answer_.weight("path_term") == 4.0 and clf.config_.path_term == 4.0
    assert clf.config_.path_term_reason.startswith("path_term=4.0: a path-level linear SVM a level")


def test_a_calibrating_fit_leaves_its_held_out_rows_out_of_the_term(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True, n_samples=2400)
    fitted_rows = []
    real_fit = PathMargins.fit.__func__

    def recording_fit(cls, X, ids, *args, **kwargs):
        fitted_rows.append(int((np.asarray(ids) >= 0).sum()))
        return real_fit(cls, X, ids, *args, **kwargs)

    monkeypatch.setattr(PathMargins, "fit", classmethod(recording_fit))
    clf = _fit(X, y, tree, path_term="auto")  # 5% of 2,400 rows held out for calibration
    assert fitted_rows == [2400 - 120]  # fitted once, on the rows the network trained on first
    assert clf.answer_.calibrator is not None
    assert "learnt on the calibration share" in clf.config_.term_weights_reason
    assert "path_term: " in clf.config_.term_weights_reason


def test_auto_learns_the_weight_by_cross_fitting_and_records_it():
    X, y, tree = text_like(shuffle_ids=True, n_samples=400, seed=1)
    clf = _fit(X, y, tree, path_term="auto", flat_term="auto")
    reason = clf.config_.term_weights_reason
    assert reason.startswith("learnt on 2-fold cross-fitting"), reason
    assert "tried" in clf.config_.terms_tried_reason.split("path_term: ")[1]
    record = reason.split("path_term: ")[1]
    assert clf.config_.path_term_reason.startswith("path_term: " + record)
    if clf.answer_.term("path_term") is not None:
        assert clf.answer_.weight("path_term") > 0 and record.startswith("weight")
    else:  # dropped: it did not gain enough held-out likelihood
        assert record.startswith("dropped (held-out gain")


def test_a_learnt_weight_of_zero_drops_the_term_and_says_so(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True, n_samples=300, seed=2)
    real = _held_out.fit_term_weights

    def path_gains_nothing(base, learnt, correct, sample_weight=None):
        fitted = real(base, learnt, correct, sample_weight)
        return dataclasses.replace(fitted, weights={**fitted.weights, "path_term": 0.0},
                                   gains={**fitted.gains, "path_term": 0.0})

    monkeypatch.setattr(_held_out, "fit_term_weights", path_gains_nothing)
    clf = _fit(X, y, tree, path_term="auto", flat_term="auto")
    assert clf.answer_.term("path_term") is None and "path_term" not in clf.answer_.weights
    assert clf.config_.path_term_reason.startswith("path_term: dropped (held-out gain 0.0 nats")
    assert clf.answer_.term("flat_term") is None or clf.answer_.weight("flat_term") > 0


def test_the_linear_terms_share_one_budget(monkeypatch):
    X, y, tree = text_like(shuffle_ids=True, n_samples=240)
    monkeypatch.setattr(_costs, "network_cost", lambda *args: 1.0)
    monkeypatch.setattr(_costs, "flat_svm_cost", lambda *args: 0.3)
    _path_cost(monkeypatch, 0.3)
    both = dict(path_term="auto", flat_term="auto", calibration=None)
    clf = _fit(X, y, tree, **both)  # 0.3 + 0.3 > 0.5: the flat term first, the path term over what is left
    assert clf.config_.flat_term == 1.0 and clf.config_.path_term == 0.0
    assert clf.config_.path_term_reason == "a path-level linear SVM a level 0.3x, 0.2x of the budget left: over the budget"
    alone = _fit(X, y, tree, **{**both, "flat_term": None})  # without the flat term the whole budget is its
    assert alone.config_.path_term == 1.0 and "0.5x of the budget left" in alone.config_.path_term_reason
    monkeypatch.setattr(_costs, "flat_svm_cost", lambda *args: 0.1)
    assert _fit(X, y, tree, **both).config_.path_term == 1.0  # 0.1 + 0.3: both within it
    # a number fixes the weight whatever the cost
    _path_cost(monkeypatch, float("inf"))
    assert _fit(X, y, tree, **{**both, "path_term": 2.0}).answer_.weight("path_term") == 2.0


@pytest.mark.parametrize("name", ["flat_term", "path_term"])
def test_where_a_linear_term_cannot_be_fitted_auto_says_why_and_a_weight_is_an_error(name):
    X, y, tree = text_like(shuffle_ids=True)
    reason = f"{name}_reason"
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=0).partial_fit(X, y)
    assert clf.answer_.term(name) is None and "partial_fit" in getattr(clf.config_, reason)
    with pytest.raises(ValueError, match=f"{name}=2.0 cannot be fitted here: partial_fit"):
        HierarchicalClassifier(tree, semantics="terminal", **{name: 2.0}).partial_fit(X, y)
    alone = {"flat_term": None, "path_term": None, name: "auto"}
    # partial semantics answer with leaves: internal targets have no answer's margin
    partial = _fit(X, y, tree, semantics="partial", **alone)
    assert partial.answer_.term(name) is None and "internal nodes" in getattr(partial.config_, reason)
    leaves_only = text_like(shuffle_ids=True, terminal_fraction=0.0)
    assert _fit(*leaves_only, semantics="partial", **{**alone, name: 2.0}).answer_.term(name) is not None
    dense = X.toarray() * 3.0  # numeric features, rows not of unit length
    other = _fit(dense, y, tree, **alone)
    assert other.answer_.term(name) is None and "not all of length 1" in getattr(other.config_, reason)


@pytest.mark.parametrize("value", [True, -1.0, "on"])
@pytest.mark.parametrize("name", ["flat_term", "path_term"])
def test_bad_values_of_either_linear_term_are_refused_by_name(name, value):
    X, y, tree = text_like(shuffle_ids=True, n_samples=60)
    with pytest.raises(ValueError, match=name):
        HierarchicalClassifier(tree, **{name: value}).fit(X, y)


# ---------------------------------------------------------------------------- the answer
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("decoding", ["best", "hf1"])
def test_the_answer_is_the_brute_force_best_of_every_term(seed, decoding):
    """log p + w_p * similarity + w_f * flat margin + w_a * summed path margins, the best of the
    candidates (or their expected-hF1 answer), on trees with shuffled ids."""
    from hiclass_parallel.ops.decode import expected_hf1_paths

    X, y, tree = text_like(shuffle_ids=True, seed=seed)
    clf = _fit(X, y, tree, decoding=decoding, prototypes=16.0, flat_term=8.0, path_term=8.0)
    decoder = clf._decoder()
    paths, log_prob, similarity = decoder.candidates(decoder.rows(X))
    assert decoder.terms["path_term"][1] == 8.0 and decoder.terms["flat_term"][1] == 8.0
    nodes = last_nodes(paths)
    summed = np.zeros(nodes.shape)
    term = clf.answer_.terms["path_term"]
    for level in range(paths.shape[2]):  # the path term by hand: each node's margin, summed along the path
        on = paths[:, :, level]
        summed += np.where(on >= 0, term.margins.score(X, np.maximum(on, 0)), 0.0)
    score = (log_prob + decoder.weight * similarity + 8.0 * clf.answer_.terms["flat_term"].score(X, nodes)
             + 8.0 * summed)
    score = np.where(np.isfinite(log_prob), score, -np.inf)
    if decoding == "best":
        want = paths[np.arange(len(paths)), np.argmax(score, axis=1)]
    else:
        want, _ = expected_hf1_paths(paths, (decoder.scale * score).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(clf.tree_.paths)[clf.predict_node(X)], want)
    # and each linear term changes answers: without it some rows differ
    for name in ("flat_term", "path_term"):
        assert (clf.set_params(**{name: None}).predict_node(X) != clf.set_params(**{name: 8.0}).predict_node(X)).any()


def test_a_weight_set_on_a_model_without_the_term_warns_by_name():
    X, y, tree = text_like(shuffle_ids=True)
    clf = _fit(X, y, tree, path_term=None)
    with pytest.warns(IgnoredSettingWarning, match="path_term=3.0 asks to re-rank the answers, but the fit kept no "
                                                   r"path-level term \(path_term=None\)"):
        clf.set_params(path_term=3.0).predict(X[:5])


# ---------------------------------------------------------------------------- export, persistence
def test_the_exported_module_saved_and_loaded_models_answer_as_predict(tmp_path):
    X, y, tree = text_like(shuffle_ids=True, seed=1)
    clf = _fit(X, y, tree, prototypes=None)
    want = np.asarray(clf.tree_.paths)[clf.predict_node(X)]
    module = serving_module(clf)
    assert list(module.reranker.terms) == ["path_term"]
    np.testing.assert_array_equal(module(torch.from_numpy(X.toarray()))[0].numpy(), want)
    folder = save_classifier(clf, tmp_path / "m")
    assert (folder / PATH_TERM).exists()
    loaded = load_classifier(folder)
    np.testing.assert_array_equal(loaded.predict_node(X), clf.predict_node(X))
    assert loaded.config_.path_term_reason == clf.config_.path_term_reason
    np.testing.assert_array_equal(loaded.answer_.terms["path_term"].margins.coef,
                                  clf.answer_.terms["path_term"].margins.coef)


def test_a_damaged_or_missing_path_term_file_is_a_named_error(tmp_path):
    from test_flat_term import _redigest

    X, y, tree = text_like(shuffle_ids=True, seed=3)
    folder = save_classifier(_fit(X, y, tree), tmp_path / "m")
    arrays = dict(np.load(folder / PATH_TERM))
    np.savez(folder / PATH_TERM, **{**arrays, "coef": arrays["coef"][:, :-1]})
    _redigest(folder)
    with pytest.raises(ModelFileError, match="coef must be float32 of shape"):
        load_classifier(folder)
    (folder / PATH_TERM).unlink()
    with pytest.raises(ModelFileError, match="path_term.npz is missing"):
        load_classifier(folder)


# ---------------------------------------------------------------------------- continuing (growing: test_grow.py)
def test_continuing_drops_the_term_with_a_warning():
    X, y, tree = text_like(shuffle_ids=True)
    clf = _fit(X, y, tree, warm_start=True)
    with pytest.warns(UserWarning, match="drops the answer model's path term"):
        clf.fit(X, y)
    assert clf.answer_.term("path_term") is None and "continued" in clf.config_.path_term_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: nothing to drop the next time
        clf.partial_fit(X, y)
