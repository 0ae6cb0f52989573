"""ConformalHierarchicalClassifier: the guarantee measured over many random calibration/test
splits, the arrays against brute force, the calibration rows kept out of training, the
scikit-learn plumbing (Pipeline, GridSearchCV, cross_validate), persistence, refusals.

The coverage tests fit one small classifier per semantics once (module fixtures) and then
split its predicted probabilities at random many times: conformalizing is cheap, refitting is
not, and the guarantee is about the split, conditional on the model.
"""

from __future__ import annotations

import json
import shutil
import zlib

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import estimator_checks as sk_checks

from hiclass_parallel import Tree
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import (
    ConformalHierarchicalClassifier,
    HierarchicalClassifier,
    ModelFileError,
    MultiLabelHierarchicalClassifier,
    NonMonotoneLossError,
    UnsupportedEstimatorError,
    load_conformal,
    save_classifier,
    save_conformal,
)
from hiclass_parallel.estimators.conformal import (
    _answer_chains,
    _answers_at,
    _chain_losses,
    _sibling_route,
    conformal_cutoff,
    subtree_proba,
)
from hiclass_parallel.metrics import conformal_scorers, coverage_score, miss_loss, tree_distance_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ALPHAS = (0.05, 0.1, 0.2)
N_SPLITS = 200
N_CAL = 500
#: Monte Carlo slack of a mean over N_SPLITS splits (its standard error is a few times smaller).
TOL = 0.006


# ---------------------------------------------------------------------------- the arrays
def test_subtree_proba_against_loops(random_tree):
    tree = random_tree(11, 30)
    proba = np.random.default_rng(0).dirichlet(np.ones(30), size=4).astype(np.float32)
    expected = np.zeros_like(proba)
    for c in range(30):
        node = c
        while node >= 0:
            expected[:, node] += proba[:, c]
            node = int(tree.parents[node])
    np.testing.assert_allclose(subtree_proba(proba, tree), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"shape \(n_samples, 30\)"):
        subtree_proba(proba[:, :5], tree)


def brute_cutoff(mass, losses, alpha, bound=1.0, corrected=True):
    """Scan every candidate cut-off, ascending; the first that meets the corrected bound (or,
    with ``corrected=False``, the plug-in rule ``risk <= alpha``)."""
    n = mass.shape[0]
    for cut in [-np.inf, *np.unique(mass[np.isfinite(mass)])]:
        count = (mass > cut).sum(axis=1)
        risk = losses[np.arange(n), count].mean()
        if (n / (n + 1) * risk + bound / (n + 1) if corrected else risk) <= alpha + 1e-12:
            return cut, risk
    return np.inf, losses[:, 0].mean()


@pytest.mark.parametrize("seed", range(6))
def test_cutoff_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, depth = 40, 4
    mass = -np.sort(-rng.choice(np.linspace(0, 1, 21), size=(n, depth)), axis=1)  # ties on purpose
    stop = rng.integers(1, depth + 1, size=n)
    mass[np.arange(depth)[None, :] >= stop[:, None]] = -np.inf
    losses = np.sort(rng.random((n, depth + 1)), axis=1)
    losses[:, 0] = 0
    for row in range(n):
        losses[row, stop[row] + 1:] = losses[row, stop[row]]
    for alpha in (0.05, 0.2, 0.5, 0.9):
        got = conformal_cutoff(mass, losses, alpha)
        want = brute_cutoff(mass, losses, alpha)
        assert got[0] == want[0] and got[1] == pytest.approx(want[1])


@pytest.mark.parametrize("semantics", ["partial", "terminal"])
@pytest.mark.parametrize("seed", range(4))
def test_reach_probabilities_along_the_best_path_are_the_full_subtree_sums(random_tree, semantics, seed):
    # Under the sibling partition (stop scores matching the semantics) a node's subtree
    # probability is its reach probability: the walk needs only the best path's groups.
    import torch

    from hiclass_parallel.ops.best_first import best_first_paths
    from hiclass_parallel.ops.groups import node_log_probs
    from hiclass_parallel.ops.sibling_paths import sibling_plan

    from hiclass_parallel.estimators.conformal import reach_log_proba

    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 60)
    stop = semantics == "terminal"
    scores = torch.as_tensor(rng.normal(scale=2.0, size=(50, sibling_plan(tree, stop).n_outputs)), dtype=torch.float32)
    logp = node_log_probs(scores, tree, "sibling", stop=stop, semantics=semantics).numpy()
    if not stop:
        logp[:, ~tree.is_leaf] = -np.inf
    proba = np.exp(logp)
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-5)  # the sibling partition's answers
    nodes, mass = _answer_chains(proba / proba.sum(axis=1, keepdims=True), tree)

    def score(r, c):
        return scores[r, c]

    paths, _ = best_first_paths(score, 50, tree, stop=stop, semantics=semantics)
    np.testing.assert_array_equal(paths.numpy(), nodes)
    reach = np.exp(reach_log_proba(score, paths, tree, stop).numpy())
    np.testing.assert_allclose(np.where(nodes >= 0, reach, 0), np.where(nodes >= 0, mass, 0), rtol=1e-5, atol=1e-6)
    # the exhaustive route's paths, as a tensor of -1 pads, give the same
    assert np.isneginf(reach_log_proba(score, paths, tree, stop).numpy()[nodes < 0]).all()


@pytest.mark.parametrize("semantics", ["partial", "terminal"])
@pytest.mark.parametrize("training", ["path_local", "full"])
def test_fast_conformal_answers_equal_the_full_sums(random_tree, semantics, training):
    # The estimator's route (best-first search, or the exhaustive one for a model that scores
    # every column) against the reference (every subtree summed from predict_answer_proba),
    # on a tree with shuffled ids; a level-partition model takes the reference route.
    rng = np.random.default_rng(3)
    tree = random_tree(rng, 40)
    labels = tree.labels[tree.is_leaf] if semantics == "partial" else tree.labels
    y = rng.choice(labels, size=600)
    X = rng.normal(size=(600, 6)).astype(np.float32) + (tree.to_ids(y) % 6 == np.arange(6)[:, None]).T * 2
    clf = _clf(tree, semantics=semantics, training=training, max_epochs=3)
    model = ConformalHierarchicalClassifier(clf, alpha=0.2, random_state=0).fit(X[:400], y[:400])
    assert _sibling_route(model.classifier_)  # the route along the path is the one taken
    fast = model._chains(model.estimator_, X[400:])
    full = model._chains(model.estimator_, X[400:], route="full")
    np.testing.assert_array_equal(fast[0], full[0])
    finite = np.isfinite(full[1])
    np.testing.assert_array_equal(np.isfinite(fast[1]), finite)
    np.testing.assert_allclose(fast[1][finite], full[1][finite], rtol=1e-4, atol=1e-6)
    for cutoff in (model.lambda_, *np.quantile(full[1][finite], [0.2, 0.5, 0.8])):
        near = (np.abs(full[1] - cutoff) < 1e-4).any(axis=1)  # rounding may move a tie
        np.testing.assert_array_equal(_answers_at(*fast, cutoff)[~near], _answers_at(*full, cutoff)[~near])
    np.testing.assert_array_equal(model.predict_node(X[400:]), _answers_at(*fast, model.lambda_))


@pytest.mark.gpu
@pytest.mark.parametrize("semantics", ["partial", "terminal"])
def test_fast_route_of_a_model_on_cuda_equals_the_full_sums(small, semantics):
    # On a GPU the search and the path's groups run on the device, the walk on the host.
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (none on this machine)")
    X, y, tree = small
    model = ConformalHierarchicalClassifier(_clf(tree, semantics=semantics, device="cuda"), alpha=0.2,
                                            random_state=0).fit(X[:400], y[:400])
    assert model.classifier_.net_.device == "cuda" and _sibling_route(model.classifier_)
    fast = model._chains(model.estimator_, X[400:])
    full = model._chains(model.estimator_, X[400:], route="full")
    np.testing.assert_array_equal(fast[0], full[0])
    np.testing.assert_allclose(fast[1][np.isfinite(full[1])], full[1][np.isfinite(full[1])], rtol=1e-4, atol=1e-6)


def test_fast_route_through_a_class_text_classifier_and_a_pipeline():
    # The route along the path takes the features the classifier inside sees: the
    # ClassTextClassifier's vectorizer, a Pipeline's transformers.
    from sklearn.feature_extraction.text import TfidfVectorizer

    from hiclass_parallel.estimators import ClassTextClassifier

    tree = Tree.from_dict({"animal": {"dog": None, "cat": None}, "plant": {"tree": None, "grass": None}})
    words = {"dog": "bark bone leash", "cat": "purr whisker mouse", "tree": "bark leaf trunk",
             "grass": "lawn green blade"}
    rng = np.random.default_rng(0)
    y = rng.choice(list(words), size=300)
    texts = [" ".join(rng.choice(words[c].split() + ["the", "a", "leaf", "bone"], size=4)) for c in y]
    clf = HierarchicalClassifier(tree, max_epochs=3, calibration=None, prototypes=None, random_state=0)
    for estimator in (ClassTextClassifier(TfidfVectorizer(), clf, class_text=words),
                      make_pipeline(TfidfVectorizer(), clf)):
        model = ConformalHierarchicalClassifier(estimator, alpha=0.2, random_state=0).fit(texts[:200], y[:200])
        assert _sibling_route(model.classifier_)
        fast = model._chains(model.estimator_, texts[200:])
        full = model._chains(model.estimator_, texts[200:], route="full")
        np.testing.assert_array_equal(fast[0], full[0])
        np.testing.assert_allclose(fast[1][np.isfinite(full[1])], full[1][np.isfinite(full[1])], rtol=1e-4)


def test_answers_walk_up_until_the_subtree_holds_more_than_the_cutoff():
    tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    proba = np.zeros((1, 4), dtype=np.float32)
    proba[0, tree.to_ids(["small dog", "big dog", "cat"])] = [0.5, 0.25, 0.25]
    nodes, mass = _answer_chains(proba, tree)
    for cut, label in ((-np.inf, "small dog"), (0.49, "small dog"), (0.5, "dog"), (0.74, "dog")):
        assert tree.labels[_answers_at(nodes, mass, cut)[0]] == label
    assert _answers_at(nodes, mass, 0.75)[0] == -1  # the root: "anything"


# ---------------------------------------------------------------------------- the guarantee
def _pool(semantics: str):
    """A small fitted classifier and, for rows it never saw, its chains and the true nodes."""
    X, y, tree = make_hierarchical_classification(
        n_samples=3500, n_features=6, branching=3, depth=3, noise=1.2,
        terminal_fraction=0.3 if semantics == "terminal" else 0.0, random_state=1)
    clf = HierarchicalClassifier(tree, semantics=semantics, max_epochs=4, calibration=None, prototypes=None,
                                 random_state=0).fit(X[:1000], y[:1000])
    nodes, mass = _answer_chains(clf.predict_answer_proba(X[1000:]), tree)
    return tree, nodes, mass, tree.to_ids(y[1000:])


@pytest.fixture(scope="module", params=["partial", "terminal"])
def pool(request):
    return _pool(request.param)


def _split_risks(tree, nodes, mass, truth, loss, alpha, seed=0):
    losses = _chain_losses(nodes, truth, tree, loss, 1.0)
    rng = np.random.default_rng(seed)
    risks = np.empty(N_SPLITS)
    for s in range(N_SPLITS):
        order = rng.permutation(len(truth))
        cal, test = order[:N_CAL], order[N_CAL:]
        cutoff, _ = conformal_cutoff(mass[cal], losses[cal], alpha)
        risks[s] = loss(_answers_at(nodes[test], mass[test], cutoff), truth[test], tree).mean()
    return risks


@pytest.mark.parametrize("alpha", ALPHAS)
def test_coverage_over_random_splits(pool, alpha):
    tree, nodes, mass, truth = pool
    # The walk is not trivial: the most probable answer alone misses more than alpha.
    start = nodes[np.arange(len(nodes)), (nodes >= 0).sum(axis=1) - 1]
    assert miss_loss(start, truth, tree).mean() > max(ALPHAS) + 0.1
    coverage = 1 - _split_risks(tree, nodes, mass, truth, miss_loss, alpha).mean()
    assert 1 - alpha - TOL <= coverage <= 1 - alpha + 1 / (N_CAL + 1) + TOL


@pytest.mark.parametrize("alpha", ALPHAS)
def test_tree_distance_risk_over_random_splits(pool, alpha):
    tree, nodes, mass, truth = pool
    risk = _split_risks(tree, nodes, mass, truth, tree_distance_loss, alpha).mean()
    # Conformal risk control's two-sided bound: alpha - 2B/(n+1) <= E[loss] <= alpha.
    assert alpha - 2 / (N_CAL + 1) - TOL <= risk <= alpha + TOL


def test_without_the_correction_small_calibration_sets_undercover(pool):
    # The B/(n+1) term matters: dropping it (the plug-in quantile) on 20 rows misses alpha.
    tree, nodes, mass, truth = pool
    losses = _chain_losses(nodes, truth, tree, miss_loss, 1.0)
    rng = np.random.default_rng(3)
    corrected, plug_in = [], []
    for _ in range(N_SPLITS):
        order = rng.permutation(len(truth))
        cal, test = order[:20], order[20:]
        for out, cutoff in ((corrected, conformal_cutoff(mass[cal], losses[cal], 0.2)[0]),
                            (plug_in, brute_cutoff(mass[cal], losses[cal], 0.2, corrected=False)[0])):
            out.append(miss_loss(_answers_at(nodes[test], mass[test], cutoff), truth[test], tree).mean())
    assert np.mean(corrected) <= 0.2 + TOL
    assert np.mean(plug_in) > 0.2 + 0.01


# ---------------------------------------------------------------------------- no leak
class Memorizer(ClassifierMixin, BaseEstimator):
    """A classifier that is certain of every row it was fitted on, and guesses on the others.

    Rows it saw get all their mass on their true node; unseen rows get a random leaf
    (seeded by the row), mass 0.6, the rest spread uniformly. Calibrated on rows it saw, a
    conformal cut-off would trust its answers, and miss on new rows far more than alpha.
    """

    def __init__(self, tree=None, semantics="partial"):
        self.tree = tree
        self.semantics = semantics

    def fit(self, X, y):
        self.tree_, self.pad_label_, self.classes_ = self.tree, "", np.asarray(self.tree.labels)
        self.seen_ = {row.tobytes(): node for row, node in zip(np.asarray(X), self.tree.to_ids(y))}
        self.n_features_in_ = np.asarray(X).shape[1]
        return self

    def predict_answer_proba(self, X):
        leaves = self.tree_.leaves
        out = np.zeros((len(X), self.tree_.n_classes), dtype=np.float32)
        for i, row in enumerate(np.asarray(X)):
            node = self.seen_.get(row.tobytes())
            if node is None:
                out[i, leaves] = 0.4 / len(leaves)
                out[i, leaves[zlib.crc32(row.tobytes()) % len(leaves)]] += 0.6
            else:
                out[i, node] = 1.0
        return out

    def predict(self, X):
        return np.zeros(len(X))


def test_calibration_rows_never_reach_the_classifier():
    X, y, tree = make_hierarchical_classification(n_samples=1200, n_features=4, branching=4, depth=2,
                                                  random_state=0)
    model = ConformalHierarchicalClassifier(Memorizer(tree), alpha=0.1, calibration_size=400, random_state=0)
    model.fit(X[:800], y[:800])
    cal = model.calibration_indices_
    seen = set(model.estimator_.seen_)
    assert len(cal) == 400 and not seen & {X[i].tobytes() for i in cal}
    assert len(seen) == 400  # every other row trained it
    # A memorizer calibrated on rows it never saw keeps the promise on new rows...
    assert coverage_score(tree.to_ids(y[800:]), model.predict_node(X[800:]), tree, input_type="ids") >= 0.9 - 0.05
    # ... and calibrated on rows it had seen (the leak this design prevents) it breaks it.
    leaked = ConformalHierarchicalClassifier(Memorizer(tree).fit(X[:800], y[:800]), alpha=0.1, cv="prefit")
    leaked.fit(X[:800], y[:800])
    assert leaked.lambda_ == -np.inf
    assert coverage_score(tree.to_ids(y[800:]), leaked.predict_node(X[800:]), tree, input_type="ids") < 0.5


# ---------------------------------------------------------------------------- the estimator
@pytest.fixture(scope="module")
def small():
    X, y, tree = make_hierarchical_classification(n_samples=500, n_features=5, branching=2, depth=2,
                                                  noise=1.5, random_state=0)
    return X, y, tree


def _clf(tree, **kwargs):
    params = {"max_epochs": 2, "calibration": None, "prototypes": None, "random_state": 0, **kwargs}
    return HierarchicalClassifier(tree, **params)


def test_fit_predict_and_prefit(small):
    X, y, tree = small
    model = ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, calibration_size=0.3, random_state=0)
    model.fit(X[:400], y[:400])
    assert model.n_calibration_ == 120 and model.loss_bound_ == 1.0 and model.semantics_ == "partial"
    paths = model.predict(X[400:])
    nodes = model.predict_node(X[400:])
    assert paths.shape == (100, tree.n_levels)
    assert (model.predict_labels(X[400:]) == np.where(nodes >= 0, tree.labels[np.maximum(nodes, 0)], "")).all()
    assert coverage_score(y[400:], paths, tree) == coverage_score(tree.to_ids(y[400:]), nodes, tree, input_type="ids")
    assert model.score(X[400:], y[400:]) == pytest.approx((paths != "").sum(axis=1).mean())

    fitted = _clf(tree).fit(X[:200], y[:200])
    prefit = ConformalHierarchicalClassifier(fitted, alpha=0.2, cv="prefit").fit(X[200:400], y[200:400])
    assert prefit.n_calibration_ == 200 and prefit.calibration_indices_ is None
    with pytest.raises(NotFittedError):
        ConformalHierarchicalClassifier(_clf(tree), cv="prefit").fit(X, y)


def test_prefit_calibrates_a_copy_that_refitting_the_classifier_leaves_alone(small):
    # The cut-off belongs to the model it was calibrated for: training the user's object on,
    # or refitting it on another tree, must not put another model under it.
    X, y, tree = small
    fitted = _clf(tree).fit(X[:200], y[:200])
    model = ConformalHierarchicalClassifier(fitted, alpha=0.2, cv="prefit").fit(X[200:400], y[200:400])
    assert model.estimator_ is not fitted and model.get_params()["estimator"] is fitted
    nodes, scores = model.predict_node(X[400:]), model.estimator_.decision_function(X[400:])
    paths = model.predict(X[400:])
    fitted.partial_fit(X[:400], y[:400])  # trains the user's net in place
    assert not np.allclose(fitted.decision_function(X[400:]), scores)
    X2, y2, tree2 = make_hierarchical_classification(n_samples=300, n_features=5, branching=3, depth=2,
                                                     random_state=5)
    fitted.set_params(tree=tree2).fit(X2, y2)  # another tree altogether
    np.testing.assert_array_equal(model.predict_node(X[400:]), nodes)
    np.testing.assert_array_equal(model.predict(X[400:]), paths)
    np.testing.assert_array_equal(model.estimator_.decision_function(X[400:]), scores)
    assert model.tree_ == tree and model.classifier_.tree_ is not fitted.tree_


@pytest.mark.parametrize("sep", [None, "/"], ids=["repeated-names", "path_sep"])
def test_answers_come_back_in_the_classifiers_label_form_and_score(sep):
    # Names repeat under different parents ("Other"): answers are name paths (or path strings
    # with path_sep), as the classifier's predict writes them, so its metrics read them.
    from sklearn.model_selection import cross_val_score

    rng = np.random.default_rng(0)
    names = [["Electronics", "Other"], ["Electronics", "Cables"], ["Clothing", "Other"], ["Clothing", "Tops"]]
    X = np.eye(4).repeat(100, axis=0) + rng.normal(scale=0.8, size=(400, 4))
    y = [p for p in names for _ in range(100)]
    y = y if sep is None else ["/".join(p) for p in y]
    clf = HierarchicalClassifier(path_sep=sep, max_epochs=5, calibration=None, prototypes=None, random_state=0)
    model = ConformalHierarchicalClassifier(clf, alpha=0.1, random_state=0).fit(X, y)
    answers, nodes = model.predict(X), model.predict_node(X)
    depth = np.where(nodes >= 0, model.tree_.depth[np.maximum(nodes, 0)] + 1, 0)
    assert (depth == 1).any() and (depth == 2).any()  # answers at both levels
    own = model.estimator_.predict(X)
    assert answers.shape == own.shape
    same = nodes == model.estimator_.predict_node(X)
    assert same.any()
    np.testing.assert_array_equal(answers[same], own[same])  # the classifier's very form
    top = np.flatnonzero(depth == 1)[0]
    if sep is None:
        assert answers[top][1] == "" and answers[top][0] in {"Electronics", "Clothing"}
    else:
        assert answers[top] in {"Electronics", "Clothing"}
    assert model.score(X, y) == pytest.approx(depth.mean())
    assert coverage_score(y, answers, model.tree_, pad_label=model.pad_label_) == pytest.approx(
        coverage_score(_ids(model, y), nodes, model.tree_, input_type="ids"))
    scores = cross_val_score(model, X, y, cv=KFold(3, shuffle=True, random_state=0), error_score="raise")
    assert np.isfinite(scores).all() and (scores > 0).all()
    result = cross_validate(model, X, y, cv=KFold(2, shuffle=True, random_state=0), scoring=conformal_scorers(),
                            error_score="raise")
    assert np.isfinite(result["test_coverage"]).all() and (result["test_coverage"] > 0.8).all()


@pytest.mark.parametrize("sep", [None, "/"], ids=["paths", "path_sep"])
def test_score_reads_classes_the_model_never_saw(sep):
    # A held-out split of a real taxonomy holds classes no training row had: score reads them
    # as the classifier's own score does (a miss under their known ancestors, one warning).
    from hiclass_parallel.exceptions import UnknownClassWarning

    rng = np.random.default_rng(1)
    names = [["A", "a1"], ["A", "a2"], ["B", "b1"], ["B", "b2"]]
    X = np.eye(4).repeat(60, axis=0) + rng.normal(scale=0.5, size=(240, 4))
    y = [p for p in names for _ in range(60)]
    y = y if sep is None else ["/".join(p) for p in y]
    clf = HierarchicalClassifier(path_sep=sep, max_epochs=5, calibration=None, prototypes=None, random_state=0)
    model = ConformalHierarchicalClassifier(clf, alpha=0.1, random_state=0).fit(X, y)
    unseen = [["B", "b3"]] * 3 if sep is None else ["B/b3"] * 3  # b3 is no class of the fitted tree
    y_test = list(y[:3]) + unseen
    with pytest.warns(UnknownClassWarning, match="3 of 6 rows"):
        value = model.score(X[[0, 1, 2, 180, 181, 182]], y_test)
    nodes = model.predict_node(X[[0, 1, 2, 180, 181, 182]])
    depth = np.where(nodes >= 0, model.tree_.depth[np.maximum(nodes, 0)] + 1, 0)
    assert value == pytest.approx(depth.mean())


def _ids(model, y):
    from hiclass_parallel.estimators.conformal import _truth_ids

    return _truth_ids(model.classifier_, y)


def test_sparse_calibration_rows_are_shown_as_new_documents():
    # A vectorizer fitted before the split gave calibration row 2 a feature (column 3) that no
    # training row has: its weights are untrained, so the row is shown without it, rescaled.
    import scipy.sparse as sp
    from sklearn.preprocessing import normalize

    X = sp.csr_matrix(normalize(np.array([[1.0, 1, 0, 0], [0, 1, 1, 0], [1, 0, 1, 1]], dtype=np.float32)))
    model = ConformalHierarchicalClassifier(HierarchicalClassifier())
    view = model._calibration_rows(X, np.array([0, 1]), np.array([2]))
    np.testing.assert_allclose(view.toarray(), [[2 ** -0.5, 0, 2 ** -0.5, 0]], rtol=1e-6)
    piped = ConformalHierarchicalClassifier(make_pipeline(StandardScaler(with_mean=False), HierarchicalClassifier()))
    assert (piped._calibration_rows(X, np.array([0, 1]), np.array([2])) != X[2]).nnz == 0


def test_sample_weight_reaches_the_training_rows_only(small, monkeypatch):
    X, y, tree = small
    seen = []
    real_fit = HierarchicalClassifier.fit

    def spy(self, X, y=None, sample_weight=None):
        seen.append(None if sample_weight is None else np.asarray(sample_weight))
        return real_fit(self, X, y, sample_weight=sample_weight)

    monkeypatch.setattr(HierarchicalClassifier, "fit", spy)
    weight = np.arange(len(X), dtype=float) + 1
    model = ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, random_state=0).fit(X, y, sample_weight=weight)
    train = np.setdiff1d(np.arange(len(X)), model.calibration_indices_)
    np.testing.assert_array_equal(seen[-1], weight[train])
    piped = ConformalHierarchicalClassifier(make_pipeline(StandardScaler(), _clf(tree)), alpha=0.2, random_state=0)
    piped.fit(X, y, sample_weight=weight)
    np.testing.assert_array_equal(seen[-1], weight[train])
    with pytest.raises(ValueError, match="cv='prefit'"):
        ConformalHierarchicalClassifier(model.estimator_, cv="prefit").fit(X, y, sample_weight=weight)
    with pytest.raises(ValueError, match=r"shape \(500,\)"):
        ConformalHierarchicalClassifier(_clf(tree)).fit(X, y, sample_weight=weight[:3])


@pytest.mark.parametrize("bad, message", [(np.nan, "is nan"), (-1.0, "is -1.0"), (np.inf, "is inf")])
def test_calibration_rows_weights_are_checked_as_the_classifier_checks_them(small, bad, message):
    # The calibration counts every row once, but a NaN, negative or infinite weight is a
    # mistake wherever it sits: refused by position, as the classifier refuses it.
    X, y, tree = small
    model = ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, random_state=0)
    row = int(model._split(len(X))[0][3])  # a calibration row of this random_state
    weight = np.ones(len(X))
    weight[row] = bad
    with pytest.raises(ValueError, match=rf"sample_weight\[{row}\] {message}"):
        model.fit(X, y, sample_weight=weight)
    with pytest.raises(ValueError, match=rf"sample_weight\[{row}\] {message}"):
        _clf(tree).fit(X, y, sample_weight=weight)


def test_complex_weights_are_refused_everywhere(small):
    import torch

    from hiclass_parallel.metrics import hierarchical_f1_score

    X, y, tree = small
    weight = np.ones(len(X), dtype=complex)
    weight[5] = 1 + 2j  # its imaginary part would be dropped by a cast
    for fit in (ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, random_state=0).fit, _clf(tree).fit):
        with pytest.raises(ValueError, match="real numbers, got complex128"):
            fit(X, y, sample_weight=weight)
    with pytest.raises(ValueError, match="real numbers, got complex"):
        _clf(tree).fit(X, y, sample_weight=torch.as_tensor(weight))
    with pytest.raises(ValueError, match="real numbers, got complex128"):
        hierarchical_f1_score(y, y, tree=tree, sample_weight=weight)


def test_terminal_semantics_and_a_changed_semantics(small):
    X, y, tree = small
    model = ConformalHierarchicalClassifier(_clf(tree, semantics="terminal"), alpha=0.2, random_state=0).fit(X, y)
    assert model.semantics_ == "terminal"
    model.classifier_.semantics = "partial"
    with pytest.raises(ValueError, match="calibrated with 'terminal'"):
        model.predict(X[:3])


def test_pipeline_grid_search_and_cross_validate(small):
    X, y, tree = small
    pipe = make_pipeline(StandardScaler(), ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, random_state=0))
    assert pipe.fit(X, y).predict(X[:4]).shape == (4, tree.n_levels)
    # the scaler inside the wrapper's estimator sees only the training rows of each fit
    inner = ConformalHierarchicalClassifier(make_pipeline(StandardScaler(), _clf(tree)), alpha=0.2, random_state=0)
    inner.fit(X, y)
    assert inner.estimator_[0].n_samples_seen_ == len(X) - inner.n_calibration_
    search = GridSearchCV(ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, random_state=0),
                          {"estimator__max_epochs": [1, 3]}, cv=KFold(2), error_score="raise")
    search.fit(X, y)
    assert search.best_estimator_.alpha == 0.2 and len(search.cv_results_["params"]) == 2
    result = cross_validate(ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, random_state=0), X, y,
                            cv=KFold(2), scoring=conformal_scorers(), error_score="raise")
    assert set(result) >= {"test_coverage", "test_mean_answer_depth", "test_neg_risk"}
    np.testing.assert_allclose(result["test_coverage"], 1 + result["test_neg_risk"])


def test_refusals(small):
    X, y, tree = small
    multi = MultiLabelHierarchicalClassifier(tree)
    with pytest.raises(UnsupportedEstimatorError, match="label sets"):
        ConformalHierarchicalClassifier(multi).fit(X, y)
    with pytest.raises(UnsupportedEstimatorError, match="StandardScaler"):
        ConformalHierarchicalClassifier(StandardScaler()).fit(X, y)
    with pytest.raises(ValueError, match="alpha"):
        ConformalHierarchicalClassifier(_clf(tree), alpha=1.5).fit(X, y)
    with pytest.raises(ValueError, match="calibration_size=499"):
        ConformalHierarchicalClassifier(_clf(tree), calibration_size=499).fit(X[:100], y[:100])


def test_user_losses_are_checked(small):
    X, y, tree = small

    def rising(answer, truth, t):  # the root costs most: not monotone
        return (answer < 0).astype(float)

    with pytest.raises(NonMonotoneLossError, match="not monotone"):
        ConformalHierarchicalClassifier(_clf(tree), loss=rising, random_state=0).fit(X, y)

    def too_big(answer, truth, t):
        return 2 * miss_loss(answer, truth, t)

    with pytest.raises(NonMonotoneLossError, match="outside"):
        ConformalHierarchicalClassifier(_clf(tree), loss=too_big, random_state=0).fit(X, y)
    too_big.bound = 2.0
    model = ConformalHierarchicalClassifier(_clf(tree), loss=too_big, alpha=0.4, random_state=0).fit(X, y)
    assert model.loss_bound_ == 2.0


def test_too_few_calibration_rows_answer_the_root(small):
    X, y, tree = small
    with pytest.warns(UserWarning, match="at least 19 rows"):
        model = ConformalHierarchicalClassifier(_clf(tree), alpha=0.05, calibration_size=10, random_state=0).fit(X, y)
    assert model.lambda_ == np.inf and (model.predict_node(X[:5]) == -1).all()


def test_save_and_load_without_pickle(small, tmp_path):
    X, y, tree = small
    model = ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, loss="tree_distance", random_state=0).fit(X, y)
    save_conformal(model, tmp_path / "a")
    loaded = load_conformal(tmp_path / "a")
    assert loaded.lambda_ == model.lambda_ and loaded.get_params()["loss"] == "tree_distance"
    np.testing.assert_array_equal(loaded.calibration_indices_, model.calibration_indices_)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    # a classifier alone cannot be saved over it (it would drop the cut-off)...
    with pytest.raises(FileExistsError, match="conformal.json"):
        save_classifier(model.estimator_, tmp_path / "a")
    # ... and a cut-off beside another classifier is a named error
    other = ConformalHierarchicalClassifier(_clf(tree, max_epochs=1), alpha=0.2, random_state=1).fit(X, y)
    save_conformal(other, tmp_path / "b")
    shutil.copy(tmp_path / "b" / "conformal.json", tmp_path / "a" / "conformal.json")
    with pytest.raises(ModelFileError, match="calibrated for another classifier"):
        load_conformal(tmp_path / "a")
    record = json.loads((tmp_path / "b" / "conformal.json").read_text())
    record["fitted"]["lambda_"] = 0.0
    (tmp_path / "b" / "conformal.json").write_text(json.dumps(record))
    with pytest.raises(ModelFileError, match="modified after it was saved"):
        load_conformal(tmp_path / "b")


@pytest.fixture(scope="module")
def saved(small, tmp_path_factory):
    X, y, tree = small
    folder = tmp_path_factory.mktemp("conformal") / "m"
    save_conformal(ConformalHierarchicalClassifier(_clf(tree), alpha=0.2, random_state=0).fit(X, y), folder)
    return folder


@pytest.mark.parametrize(
    "section, field, value, message",
    [
        ("fitted", "lambda_", float("nan"), "lambda_=nan is out of range"),
        ("fitted", "lambda_", 1.5, "lambda_=1.5 is out of range"),
        ("fitted", "lambda_", "abc", "lambda_='abc' is not a number"),
        ("fitted", "lambda_", True, "lambda_=True is not a number"),
        ("fitted", "n_calibration_", -3, "n_calibration_=-3 is not a positive number"),
        ("fitted", "n_calibration_", 2.5, "n_calibration_=2.5 is not a positive number"),
        ("fitted", "n_calibration_", 3, "n_calibration_=3: no cut-off meets alpha"),
        ("fitted", "loss_bound_", 0, "loss_bound_=0.0 is out of range"),
        ("fitted", "loss_bound_", float("inf"), "loss_bound_=inf is out of range"),
        ("fitted", "loss_bound_", 2.0, "loss_bound_=2.0, but the loss 'miss' is bounded by 1.0"),
        ("fitted", "calibration_risk_", -0.1, "calibration_risk_=-0.1 is out of range"),
        ("fitted", "calibration_risk_", [0.1], "calibration_risk_=\\[0.1\\] is not a number"),
        ("fitted", "semantics_", "whatever", "semantics_='whatever' is not"),
        ("fitted", "semantics_", "terminal", "calibrated with semantics='terminal'"),
        ("fitted", "calibration_indices_", [3, 1], "calibration_indices_ must be"),
        ("fitted", "calibration_indices_", None, "calibration_indices_ must be"),
        ("params", "alpha", 7, "parameters the model does not take"),
        ("params", "loss", "zero", "parameters the model does not take"),
        ("params", "cv", "prefit", "calibration_indices_ must be null"),
    ],
)
def test_load_checks_every_value_even_with_the_digest_recomputed(saved, tmp_path, section, field, value, message):
    # An edited conformal.json whose digest was made to match again: every value is still
    # checked for type and range, and a bad one is a ModelFileError naming the field.
    from hiclass_parallel.estimators.io._model_folder import record_digest as _content_digest

    folder = tmp_path / "m"
    shutil.copytree(saved, folder)
    record = json.loads((folder / "conformal.json").read_text())
    record[section][field] = value
    record["digest"] = _content_digest(record)
    (folder / "conformal.json").write_text(json.dumps(record, allow_nan=True))
    with pytest.raises(ModelFileError, match=message):
        load_conformal(folder)


def test_loaded_prefit_model_keeps_its_own_classifier(small, tmp_path):
    X, y, tree = small
    fitted = _clf(tree).fit(X[:200], y[:200])
    save_conformal(ConformalHierarchicalClassifier(fitted, alpha=0.2, cv="prefit").fit(X[200:], y[200:]), tmp_path)
    loaded = load_conformal(tmp_path)
    nodes = loaded.predict_node(X)
    loaded.estimator.partial_fit(X, y)  # the estimator parameter, trained on in place
    np.testing.assert_array_equal(loaded.predict_node(X), nodes)


def test_save_refuses_what_json_cannot_hold(small, tmp_path):
    X, y, tree = small
    model = ConformalHierarchicalClassifier(_clf(tree), loss=tree_distance_loss, alpha=0.2, random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="'loss'"):
        save_conformal(model, tmp_path / "m")
    piped = ConformalHierarchicalClassifier(make_pipeline(StandardScaler(), _clf(tree)), alpha=0.2,
                                            random_state=0).fit(X, y)
    with pytest.raises(TypeError, match="Pipeline"):
        save_conformal(piped, tmp_path / "m")


@pytest.mark.parametrize(
    "check",
    [
        sk_checks.check_no_attributes_set_in_init,
        sk_checks.check_parameters_default_constructible,
        sk_checks.check_get_params_invariance,
        sk_checks.check_set_params,
        sk_checks.check_estimator_cloneable,
        sk_checks.check_estimator_repr,
        sk_checks.check_do_not_raise_errors_in_init_or_set_params,
    ],
    ids=lambda check: check.__name__,
)
def test_scikit_learn_api_checks(check):
    # The fitting checks feed flat data to a wrapper whose answers are paths: the API checks
    # that need no fit are the ones that apply.
    check("ConformalHierarchicalClassifier", ConformalHierarchicalClassifier(HierarchicalClassifier(max_epochs=1)))


def test_clone_keeps_the_parameters():
    model = ConformalHierarchicalClassifier(HierarchicalClassifier(max_epochs=1), alpha=0.05, loss="tree_distance")
    assert clone(model).get_params()["alpha"] == 0.05


def test_wordnet_subset_coverage():
    # Real text: mammal glosses placed under their hypernyms (terminal labels), TF-IDF features.
    from sklearn.feature_extraction.text import TfidfVectorizer

    from hiclass_parallel.datasets import load_wordnet_glosses

    data = load_wordnet_glosses("mammal.n.01", include_lemmas=True)
    order = np.random.default_rng(0).permutation(len(data.data))
    texts = np.asarray(data.data, dtype=object)[order]
    truth = data.tree.to_ids(np.asarray(data.target, dtype=object)[order])
    vec = TfidfVectorizer(sublinear_tf=True, dtype=np.float32)
    X_train = vec.fit_transform(texts[:500])
    clf = HierarchicalClassifier(data.tree, semantics="terminal", calibration=None, prototypes=None,
                                 random_state=0).fit(X_train, data.tree.labels[truth[:500]])
    nodes, mass = _answer_chains(clf.predict_answer_proba(vec.transform(texts[500:])), data.tree)
    truth = truth[500:]
    losses = _chain_losses(nodes, truth, data.tree, miss_loss, 1.0)
    rng = np.random.default_rng(0)
    n_cal = 250
    for alpha in ALPHAS:
        covered = []
        for _ in range(N_SPLITS):
            split = rng.permutation(len(truth))
            cal, test = split[:n_cal], split[n_cal:]
            cutoff, _ = conformal_cutoff(mass[cal], losses[cal], alpha)
            covered.append(1 - miss_loss(_answers_at(nodes[test], mass[test], cutoff), truth[test], data.tree).mean())
        assert 1 - alpha - 0.01 <= np.mean(covered) <= 1 - alpha + 1 / (n_cal + 1) + 0.01, alpha
