"""The re-ranking weights learnt on held-out rows: the joint fit against known weights, a useless
term dropped, no held-out row scored by a model that trained on it, fixed weights as before."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import text_like

from hiclass_parallel.estimators import HierarchicalClassifier, serving_module
from hiclass_parallel.estimators.answer import MIN_GAIN, fit_term_weights, term_scores
from hiclass_parallel.estimators.fitting import _answer_fit
from hiclass_parallel.estimators.io._persistence import load_classifier, save_classifier


def _logit_rows(n, k, weights, scale, seed):
    """Candidates whose right one is drawn from ``softmax(scale * (log p + sum w_i term_i))``."""
    rng = np.random.default_rng(seed)
    log_prob = np.log(rng.dirichlet(np.ones(k), size=n))
    terms = {name: rng.normal(size=(n, k)) for name in weights}
    z = scale * (log_prob + sum(w * terms[name] for name, w in weights.items()))
    right = np.argmax(z + rng.gumbel(size=(n, k)), axis=1)
    return log_prob, terms, np.arange(k) == right[:, None]


# ---------------------------------------------------------------------------- the joint fit
def test_the_joint_fit_recovers_known_weights_and_scale():
    log_prob, terms, correct = _logit_rows(4000, 10, {"a": 2.0, "b": 0.5}, scale=0.7, seed=0)
    fitted = fit_term_weights(log_prob, terms, correct)
    assert fitted.weights["a"] == pytest.approx(2.0, rel=0.15)
    assert fitted.weights["b"] == pytest.approx(0.5, rel=0.25)
    assert fitted.scale == pytest.approx(0.7, rel=0.15)
    assert fitted.kept() == ["a", "b"] and min(fitted.gains.values()) > MIN_GAIN


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_term_of_random_scores_is_dropped_and_the_useful_one_kept(seed):
    log_prob, terms, correct = _logit_rows(800, 8, {"useful": 1.5}, scale=1.0, seed=seed)
    terms["random"] = np.random.default_rng(seed + 10).normal(size=log_prob.shape)
    fitted = fit_term_weights(log_prob, terms, correct)
    assert fitted.weights["random"] == 0.0 and fitted.gains["random"] < MIN_GAIN
    assert fitted.weights["useful"] > 1.0 and "dropped" in fitted.describe("random")


def test_pads_weights_and_rows_without_their_answer():
    log_prob, terms, correct = _logit_rows(600, 6, {"a": 1.0}, scale=1.0, seed=3)
    log_prob[:, -1] = -np.inf  # a pad candidate is never chosen, whatever its score
    terms["a"][:, -1] = 1e6
    correct[:, -1] = False  # rows whose answer was the pad say nothing
    weighted = fit_term_weights(log_prob, terms, correct, sample_weight=np.r_[np.zeros(300), np.ones(300)])
    assert weighted.rows <= 300 and 0.5 < weighted.weights["a"] < 2.0
    assert fit_term_weights(log_prob[:10], {"a": terms["a"][:10]}, correct[:10]) is None  # too few rows


def test_misshapen_scores_are_named():
    log_prob, terms, correct = _logit_rows(50, 4, {"a": 1.0}, scale=1.0, seed=0)
    with pytest.raises(ValueError, match="term 'a'"):
        fit_term_weights(log_prob, {"a": terms["a"][:, :3]}, correct)
    with pytest.raises(ValueError, match="unknown re-ranking terms"):
        term_scores({"bm25": object()}, None, np.zeros((1, 1), dtype=np.int64))


# ---------------------------------------------------------------------------- in the fit
@pytest.fixture(autouse=True)
def _every_svm_within_the_budget(monkeypatch):
    """These fits train a network of a few epochs, beside which an SVM's estimated cost is over
    the budget: the tests are about the weights of the terms tried, not which are."""
    from hiclass_parallel.estimators.fitting import _costs

    for name in ("flat_svm_cost", "candidates_svm_cost", "least_squares_cost"):
        monkeypatch.setattr(_costs, name, lambda *args: 0.0)


def _fit(X, y, tree, **params):
    params = {"semantics": "terminal", "max_epochs": 4, "random_state": 0, **params}
    return HierarchicalClassifier(tree, **params).fit(X, y)


def test_a_small_fit_learns_its_weights_by_cross_fitting_and_records_them():
    X, y, tree = text_like(n_samples=300)
    clf = _fit(X, y, tree)
    reason = clf.config_.term_weights_reason
    assert reason.startswith(f"learnt on {_answer_fit.FOLDS}-fold cross-fitting") and "prototypes:" in reason and "flat_term:" in reason
    assert clf.answer_.weight("flat_term") != 16.0 or clf.answer_.weight("prototypes") != 16.0  # learnt, not fixed
    kept_flat = "flat_term: weight" in reason or "flat_term: fixed" in reason
    assert (clf.answer_.term("flat_term") is None) != kept_flat  # a term learnt as 0 is dropped from the model


def test_no_held_out_row_is_scored_by_a_model_that_trained_on_it(monkeypatch):
    """Cross-fitting: each row's fingerprint feature (a column of its own) shows which rows each
    fold's network was given and which its prototypes and flat term trained on; no fold's
    model scores a row it trained on, and every row is scored once."""
    X, y, tree = text_like(n_samples=240, fingerprints=True)
    n_base = X.shape[1] - X.shape[0]
    given, views, models = {}, [], []
    real_fit = HierarchicalClassifier.fit

    def recording_fit(self, X, y=None, **kwargs):
        given[id(self)] = np.unique(sp.csr_matrix(X)[:, n_base:].indices)  # the rows' fingerprints
        return real_fit(self, X, y, **kwargs)

    real_view, real_decoder = _answer_fit.held_out_view, _answer_fit.decoder_of
    monkeypatch.setattr(HierarchicalClassifier, "fit", recording_fit)
    monkeypatch.setattr(_answer_fit, "held_out_view", lambda X, fit, held: views.append(held) or real_view(X, fit, held))

    def recording_decoder(model, *args, **kwargs):
        if model.get_params()["calibration"] is None:  # a fold's model (the fit calibrates where it can)
            models.append(model)
        return real_decoder(model, *args, **kwargs)

    monkeypatch.setattr(_answer_fit, "decoder_of", recording_decoder)
    clf = _fit(X, y, tree)
    assert clf.config_.term_weights_reason.startswith(f"learnt on {_answer_fit.FOLDS}-fold")
    assert len(views) == len(models) == _answer_fit.FOLDS
    np.testing.assert_array_equal(np.sort(np.concatenate(views)), np.arange(X.shape[0]))  # each row once
    for held, model in zip(views, models):
        assert given[id(model)].size == X.shape[0] - held.size
        assert not np.intersect1d(given[id(model)], held).size  # the network never saw them
        columns = n_base + held  # the held-out rows' own features
        assert not model.answer_.terms["prototypes"].sums[:, columns].count_nonzero()
        assert not np.abs(model.answer_.terms["flat_term"].coef[:, columns]).sum()


def test_each_fold_trains_the_fit_s_epochs_in_equal_batches_about_the_fit_s_size(monkeypatch):
    X, y, tree = text_like(n_samples=300)
    models = []
    real_decoder = _answer_fit.decoder_of

    def recording_decoder(model, *args, **kwargs):
        if model.get_params()["calibration"] is None:
            models.append(model)
        return real_decoder(model, *args, **kwargs)

    monkeypatch.setattr(_answer_fit, "decoder_of", recording_decoder)
    clf = _fit(X, y, tree, batch_size=64)
    assert len(models) == _answer_fit.FOLDS
    for model in models:
        assert model.config_.max_epochs == clf.config_.max_epochs
        # 150 rows a fold: two equal batches of 75, not 64, 64 and 22
        assert model.config_.batch_size == _answer_fit.fold_batch_size(150, 64) == 75


def test_the_calibration_share_learns_the_weights_on_rows_the_parts_did_not_train_on(monkeypatch):
    """From 2,000 rows the fit holds a share out: the network has trained on the other rows only
    when the weights are learnt on the held-out ones, and the prototypes and the flat term are
    those of the other rows."""
    X, y, tree = text_like(n_samples=2100, fingerprints=True)
    n_base = X.shape[1] - X.shape[0]
    seen = {}
    real = _answer_fit.learn_on_held_out

    def recording(estimator, config, answer, candidates, view, true, weight):
        seen.update(prototypes=answer.terms["prototypes"].sums.copy(), coef=np.array(answer.terms["flat_term"].coef),
                    rows=view.shape[0], trained_before=list(trained))
        return real(estimator, config, answer, candidates, view, true, weight)

    from torch.utils.data import Subset

    from hiclass_parallel.estimators.networks._net import TreeNet

    trained = []  # the rows of each training call of the network, in order
    real_partial_fit = TreeNet.partial_fit

    def recording_partial_fit(self, X, *args, **kwargs):
        trained.append(np.asarray(X.indices) if isinstance(X, Subset) else np.arange(len(X)))
        return real_partial_fit(self, X, *args, **kwargs)

    monkeypatch.setattr(TreeNet, "partial_fit", recording_partial_fit)

    held_rows = []
    real_view = _answer_fit.held_out_view
    monkeypatch.setattr(_answer_fit, "held_out_view",
                        lambda X, fit, held: held_rows.append(held) or real_view(X, fit, held))
    monkeypatch.setattr(_answer_fit, "learn_on_held_out", recording)
    clf = _fit(X, y, tree, max_epochs=1)
    assert clf.config_.term_weights_reason.startswith("learnt on the calibration share")
    columns = n_base + held_rows[0]
    assert seen["rows"] == held_rows[0].size == 105
    assert seen["trained_before"], "the network trained before the weights were learnt"
    for rows in seen["trained_before"]:
        assert not np.intersect1d(rows, held_rows[0]).size
    assert not seen["prototypes"][:, columns].count_nonzero()
    assert not np.abs(seen["coef"][:, columns]).sum()


def test_labels_without_a_tree_and_weighted_rows_cross_fit_on_the_fit_s_tree():
    """Without ``tree`` each fold's tree would be learnt from its own labels: the folds get the
    fit's, so their node ids are the fit's; zero-weight rows count for nothing."""
    X, y, tree = text_like(n_samples=300, seed=2)
    names = np.asarray(tree.labels, dtype=object)
    node = {name: i for i, name in enumerate(names)}
    paths = np.asarray(tree.paths)[[node[v] for v in y]]
    label_paths = np.where(paths >= 0, names[np.maximum(paths, 0)], "")  # padded with ""
    weight = np.r_[np.ones(250), np.zeros(50)]
    clf = HierarchicalClassifier(semantics="terminal", pad_label="", max_epochs=3, random_state=0)
    clf.fit(X, label_paths, sample_weight=weight)  # the tree learnt from the label paths
    assert clf.config_.term_weights_reason.startswith(f"learnt on {_answer_fit.FOLDS}-fold"), clf.config_.term_weights_reason
    assert clf.score(X[:250], label_paths[:250]) > 0.5


def test_dense_rows_learn_the_weights_of_the_gaussian_prototypes_and_the_least_squares_svm():
    X, y, tree = text_like(n_samples=300, seed=3)
    dense = X.toarray()
    dense /= np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-12)  # normalised embeddings
    clf = _fit(dense, y, tree)
    reason = clf.config_.term_weights_reason
    assert reason.startswith(f"learnt on {_answer_fit.FOLDS}-fold") and "flat_term: not tried" not in reason, reason
    assert type(clf.answer_.terms["prototypes"]).__name__ == "GaussianPrototypes"
    # predict re-ranks by the learnt weights: log p + w_p * similarity + the linear terms' w * score
    from hiclass_parallel.estimators.answer import PRIOR_TERMS
    from hiclass_parallel.estimators.answer._prototypes import last_nodes

    paths, log_prob, similarity = clf._reranking_candidates(dense)
    score = log_prob + clf.answer_.weights["prototypes"] * similarity
    for name in PRIOR_TERMS:
        if clf.answer_.term(name) is not None:
            score = score + clf.answer_.weights[name] * clf.answer_.terms[name].score(dense, last_nodes(paths))
    best = last_nodes(paths)[np.arange(len(dense)), np.argmax(np.where(np.isfinite(log_prob), score, -np.inf), axis=1)]
    assert (best == clf.predict_node(dense)).mean() > 0.99  # ties up to rounding aside


def test_partial_fit_builds_no_auto_term_and_says_why():
    X, y, tree = text_like(n_samples=200)
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=0)
    clf.partial_fit(X, y)
    reason = clf.config_.term_weights_reason
    assert "partial_fit" in reason and reason.startswith("no weight learnt") and clf.answer_.kept() == []


# ---------------------------------------------------------------------------- fixed weights
def test_fixed_weights_answer_as_before_and_learnt_ones_save_load_and_export(tmp_path):
    X, y, tree = text_like(n_samples=300, seed=1)
    fixed = _fit(X, y, tree, prototypes=8.0, flat_term=4.0, path_term=2.0)
    assert fixed.config_.term_weights_reason.startswith("no weight learnt")  # numbers fix all three
    assert fixed.answer_.weights == {"prototypes": 8.0, "flat_term": 4.0, "path_term": 2.0}

    learnt = _fit(X, y, tree)
    save_classifier(learnt, tmp_path / "m")
    loaded = load_classifier(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict_node(X), learnt.predict_node(X))
    assert loaded.config_.term_weights_reason == learnt.config_.term_weights_reason
    assert loaded.answer_.weights == learnt.answer_.weights and loaded.answer_.scale == learnt.answer_.scale
    paths, _ = serving_module(learnt)(torch.from_numpy(X.toarray()))
    np.testing.assert_array_equal(paths.numpy(), np.asarray(learnt.tree_.paths)[learnt.predict_node(X)])


@pytest.mark.parametrize("batch", [1, 7, 32, 256])
def test_a_fold_s_batches_are_about_the_fit_s_and_never_cost_an_extra_step(batch):
    for rows in range(1, 2000, 37):
        size = _answer_fit.fold_batch_size(rows, batch)
        steps = -(-rows // size)
        assert min(rows, 2 * batch // 3) <= size <= -(-3 * batch // 2)
        assert steps <= max(1, round(rows / batch + 1e-9))  # never more than the nearest whole number
        assert steps <= -(-rows // batch)  # never more than in batches of the fit's size
