"""Explanations of answers: exact margins of the linear text model, integrated gradients of
others, the re-ranking terms' shares, feature names through a pipeline, the per-class view."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import sparse_rows

from hiclass_parallel import Tree
from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.estimators.explain import explain_classes, explain_predictions

TEXTS = ["red apple", "green apple", "ripe banana", "yellow banana", "oak tree", "pine tree"] * 5
PATHS = [["fruit", "apple"], ["fruit", "apple"], ["fruit", "banana"], ["fruit", "banana"],
         ["plant", "tree"], ["plant", "tree"]] * 5


def _random_model(random_tree, seed: int, partition: str, stop: bool, class_text: bool = False, **kwargs):
    """A fitted text model on a random tree with shuffled ids, its weights then drawn at random
    (the sum must hold for any weights, not only trained ones), and rows to explain."""
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 25)
    X = sparse_rows(120, 40, density=0.15, seed=seed)
    y = rng.integers(0, tree.n_classes, 120)
    params = dict(partition=partition, stop=stop, semantics="terminal" if stop else "partial", max_epochs=1,
                  calibration=None, prototypes=None, flat_term=None, path_term=None, random_state=0, **kwargs)
    if class_text:
        params["module__class_features"] = sparse_rows(tree.n_classes, 40, density=0.1, seed=seed + 1)
    clf = HierarchicalClassifier(tree, **params).fit(X, y)
    with torch.no_grad():
        for p in clf.net_.module_.parameters():
            p.copy_(torch.randn_like(p))
    return clf, X[:30]


@pytest.mark.parametrize("partition", ["sibling", "level"])
@pytest.mark.parametrize("stop", [False, True])
def test_exact_contributions_sum_to_the_margin_over_the_rival(random_tree, partition, stop):
    clf, X = _random_model(random_tree, 3 + stop, partition, stop, class_text=stop)
    why = explain_predictions(clf, X, top=40)  # every feature of every row kept
    assert why.exact
    scores = clf.decision_function(X)
    groups = np.concatenate([clf.tree_.groups(partition),
                             np.arange(1, clf.tree_.n_groups(partition))]) if stop else clf.tree_.groups(partition)
    ids = clf._predict_ids(X)
    checked = 0
    for i in range(len(X.indptr) - 1):
        steps = why.columns[i][why.columns[i] >= 0]
        path = ids[i][ids[i] >= 0]
        assert np.array_equal(steps[: path.size], path)  # the predicted answer, top down
        for s, col in enumerate(steps):
            members = np.flatnonzero(groups == groups[col])
            others = members[members != col]
            if not others.size:
                assert why.rivals[i, s] == -1
                continue
            rival = why.rivals[i, s]
            assert rival in others and scores[i, rival] == scores[i, others].max()
            margin = scores[i, col] - scores[i, rival]
            assert why.margins[i, s] == pytest.approx(margin, rel=1e-4, abs=1e-4)
            total = why.bias[i, s] + why.contributions[i, s].sum()
            assert total == pytest.approx(margin, rel=1e-4, abs=1e-3)
            assert abs(why.rest[i, s]) < 1e-3  # nothing left over: every feature is listed
            row = X[i].toarray().ravel()
            listed = why.features[i, s][why.features[i, s] >= 0]
            assert set(listed) == set(np.flatnonzero(row))  # one contribution per non-zero feature
            checked += 1
    assert checked > 20


def test_top_features_are_the_largest_and_the_rest_adds_up(random_tree):
    clf, X = _random_model(random_tree, 5, "sibling", False)
    full = explain_predictions(clf, X, top=40)
    two = explain_predictions(clf, X, top=2)
    keep = (two.columns >= 0) & (two.rivals >= 0)
    listed = np.where(full.features >= 0, full.contributions, -np.inf)
    largest = -np.sort(-listed, axis=2)[:, :, :2]
    found = np.where(two.features >= 0, two.contributions, -np.inf)
    assert np.allclose(found[keep], largest[keep], atol=1e-5)
    total = two.bias + two.contributions.sum(axis=2) + two.rest
    assert np.allclose(total[keep], two.margins[keep], atol=1e-4)


def test_the_explained_answer_is_the_reranked_one_and_the_terms_add_up():
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer().fit(TEXTS)
    clf = HierarchicalClassifier(max_epochs=20, random_state=0, calibration=None, prototypes=8.0,
                                 flat_term=4.0, path_term=2.0).fit(vec.transform(TEXTS), PATHS)
    X = vec.transform(["ripe banana", "green apple tree", "pine"])
    why = explain_predictions(clf, X)
    assert np.array_equal(why.columns[:, :2], clf._predict_ids(X))
    terms = why.terms
    assert np.allclose(terms["total"], terms["log_prob"] + terms["prototypes"] + terms["flat"] + terms["path"])
    answer = clf.predict_node(X)
    prototypes, flat, path = (clf.answer_.terms[name] for name in ("prototypes", "flat_term", "path_term"))
    assert np.allclose(terms["prototypes"], 8.0 * prototypes.score(X, answer[:, None])[:, 0], atol=1e-5)
    assert np.allclose(terms["flat"], 4.0 * flat.score(X, answer[:, None])[:, 0], atol=1e-5)
    assert np.allclose(terms["path"], 2.0 * path.score(X, answer[:, None])[:, 0], atol=1e-5)
    assert (terms["prototypes"] > 0).all() and (terms["path"] != 0).all()
    clf.set_params(prototypes=None, flat_term=None, path_term=None)
    plain = explain_predictions(clf, X)
    assert all((plain.terms[name] == 0).all() for name in ("prototypes", "flat", "path"))


def test_integrated_gradients_for_a_relu_model_are_labelled_approximate_and_nearly_complete():
    rng = np.random.default_rng(0)
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3])
    X = rng.normal(size=(60, 6)).astype(np.float32)
    y = rng.integers(0, tree.n_classes, 60)
    clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0, calibration=None, prototypes=None,
                                 flat_term=None, module__hidden_units=16).fit(X, y)
    why = explain_predictions(clf, X[:10], top=6, steps=64)
    assert not why.exact
    keep = (why.columns >= 0) & (why.rivals >= 0)
    # completeness of integrated gradients: bias (the zero row's margin) + contributions = margin
    assert np.allclose(why.rest[keep], 0.0, atol=0.02 * np.abs(why.margins[keep]).max())
    assert "approximate" in why.describe(0)


def test_a_pipeline_names_the_features_and_the_plot_has_a_panel_per_step():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(max_epochs=30, random_state=0)).fit(TEXTS, PATHS)
    why = explain_predictions(model, ["ripe yellow banana", "pine tree"], top=3)
    steps = why.steps(0)
    assert [s["node"] for s in steps] == ["fruit", "banana"]
    assert steps[1]["rival"] == "apple"
    assert {name for name, _ in steps[1]["features"]} == {"ripe", "yellow", "banana"}
    assert "banana over apple" in why.describe(0)
    assert "alone in its softmax group" in why.describe(1)  # "tree" is plant's only child
    fig = why.plot(0)
    assert len(fig.axes) == 2 and "banana" in fig.axes[1].get_title(loc="left")
    plt.close(fig)


def test_class_view_reads_the_weights():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(max_epochs=30, random_state=0)).fit(TEXTS, PATHS)
    classes = explain_classes(model, ["banana", "apple", "plant"], top=3)
    assert classes.exact
    assert {name for name, _ in classes.top("banana")} == {"ripe", "yellow", "banana"}
    assert {name for name, _ in classes.top("apple")} == {"red", "green", "apple"}
    with pytest.raises(KeyError, match="not one of the explained"):
        classes.top("fruit")
    # the weight of a feature is what a unit of it adds to the class over its group's mean
    clf, vec = model[-1], model[0]
    banana, apple = clf.tree_.to_ids(["banana", "apple"])
    x = vec.transform(["banana"])
    scores = clf.decision_function(x)[0]
    j = int(np.flatnonzero(vec.get_feature_names_out() == "banana")[0])
    weight = dict(classes.top("banana"))["banana"]
    zero = clf.decision_function(sp.csr_matrix((1, x.shape[1]), dtype=np.float32))[0]
    gain = (scores[banana] - scores[[banana, apple]].mean()) - (zero[banana] - zero[[banana, apple]].mean())
    assert weight * x[0, j] == pytest.approx(gain, rel=1e-3)


def test_bad_requests_are_named():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    with pytest.raises(TypeError, match="fitted HierarchicalClassifier"):
        explain_predictions(object(), np.zeros((1, 2)))
    model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(max_epochs=2, random_state=0)).fit(TEXTS, PATHS)
    with pytest.raises(ValueError, match="top must be a positive int"):
        explain_predictions(model, ["apple"], top=0)
    with pytest.raises(ValueError, match="feature_names has 2 names"):
        explain_predictions(model, ["apple"], feature_names=["a", "b"])
    relu = HierarchicalClassifier(max_epochs=2, random_state=0, module__activation=torch.nn.ReLU)
    relu.fit(TfidfVectorizer().fit_transform(TEXTS), PATHS)
    with pytest.raises(ValueError, match="needs rows X"):
        explain_classes(relu, ["apple"])


@pytest.mark.parametrize("rows, n_groups", [(3, 4), (400, 2)])  # small groups: members gathered; large: reduced
def test_rivals_are_the_best_other_column_of_each_group(rows, n_groups):
    from hiclass_parallel.estimators.explain import _rivals

    rng = np.random.default_rng(rows)
    groups = np.arange(30) % n_groups
    scores = rng.normal(size=(rows, 30)).astype(np.float32)
    cols = np.full((rows, 3), -1)
    for i in range(rows):  # one column of each of up to three distinct groups
        picked = rng.choice(n_groups, rng.integers(1, n_groups + 1), replace=False)
        cols[i, : picked.size] = [rng.choice(np.flatnonzero(groups == g)) for g in picked]
    found = _rivals(scores, cols, groups)
    for i in range(rows):
        for s in range(3):
            c = cols[i, s]
            if c < 0:
                assert found[i, s] == -1
                continue
            others = np.flatnonzero((groups == groups[c]) & (np.arange(30) != c))
            assert found[i, s] == others[np.argmax(scores[i, others])]
