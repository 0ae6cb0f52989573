"""Tests of hiclass_parallel.metrics: hand-computed values, an independent set-based
implementation of Kiritchenko's definitions, input handling, errors, and scorers inside
GridSearchCV / cross_validate."""

from __future__ import annotations

import math
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import make_scorer
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from hiclass_parallel import Tree, UnknownLabelError
from hiclass_parallel.metrics import (
    LevelAccuracy,
    check_paths,
    exact_path_accuracy_score,
    get_scorer,
    get_scorer_names,
    get_scorers,
    hierarchical_classification_report,
    hierarchical_f1_score,
    hierarchical_fbeta_score,
    hierarchical_precision_score,
    hierarchical_recall_score,
    level_accuracy_score,
    make_hierarchical_scorer,
    mean_tree_distance,
    mistake_severity,
    tree_distance,
)

PAPER = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])  # the paper's tree, for the probes below

# ----------------------------------------------------------------------------- fixtures
#   dog ── small dog
#       └─ big dog ── happy big dog
#   cat
# Node ids are shuffled (not sorted by depth) on purpose.
LABELS = ["happy big dog", "cat", "big dog", "dog", "small dog"]
PARENTS = [2, -1, 3, -1, 3]


@pytest.fixture
def tree() -> Tree:
    return Tree.from_parents(PARENTS, labels=LABELS)


# Four samples with true labels at depths 2, 1, 0, 0.
Y_TRUE = ["happy big dog", "small dog", "cat", "cat"]
Y_PRED = ["big dog", "happy big dog", "cat", "dog"]
# node sets:  T                          P                        |T&P|
#   0: {dog, big, happy}   {dog, big}               2
#   1: {dog, small}        {dog, big, happy}        1
#   2: {cat}               {cat}                    1
#   3: {cat}               {dog}                    0
# sum |T| = 7, sum |P| = 7, sum |T&P| = 4


# ----------------------------------------------------------------------------- hand-computed
def test_hand_computed_micro(tree):
    assert hierarchical_precision_score(Y_TRUE, Y_PRED, tree) == pytest.approx(4 / 7)
    assert hierarchical_recall_score(Y_TRUE, Y_PRED, tree) == pytest.approx(4 / 7)
    assert hierarchical_f1_score(Y_TRUE, Y_PRED, tree) == pytest.approx(4 / 7)
    # F2 = 5 * 4 / (4 * 7 + 7)
    assert hierarchical_fbeta_score(Y_TRUE, Y_PRED, tree, beta=2) == pytest.approx(20 / 35)
    # beta = 0 is precision
    assert hierarchical_fbeta_score(Y_TRUE, Y_PRED, tree, beta=0) == pytest.approx(4 / 7)


def test_hand_computed_macro(tree):
    p = [2 / 2, 1 / 3, 1 / 1, 0 / 1]
    r = [2 / 3, 1 / 2, 1 / 1, 0 / 1]
    f = [4 / 5, 2 / 5, 2 / 2, 0 / 2]
    kw = {"average": "macro"}
    assert hierarchical_precision_score(Y_TRUE, Y_PRED, tree, **kw) == pytest.approx(np.mean(p))
    assert hierarchical_recall_score(Y_TRUE, Y_PRED, tree, **kw) == pytest.approx(np.mean(r))
    assert hierarchical_f1_score(Y_TRUE, Y_PRED, tree, **kw) == pytest.approx(np.mean(f))


def test_hand_computed_other_metrics(tree):
    acc, support = level_accuracy_score(Y_TRUE, Y_PRED, tree)
    np.testing.assert_allclose(acc, [3 / 4, 1 / 2, 0 / 1])
    assert support.tolist() == [4, 2, 1]
    assert isinstance(level_accuracy_score(Y_TRUE, Y_PRED, tree), LevelAccuracy)
    assert level_accuracy_score(Y_TRUE, Y_PRED, tree, level=1) == 0.5
    assert level_accuracy_score(Y_TRUE, Y_PRED, tree, level=-1) == 0.0
    assert exact_path_accuracy_score(Y_TRUE, Y_PRED, tree) == 0.25
    assert exact_path_accuracy_score(Y_TRUE, Y_PRED, tree, normalize=False) == 1
    assert tree_distance(Y_TRUE, Y_PRED, tree).tolist() == [1, 3, 0, 2]
    assert mean_tree_distance(Y_TRUE, Y_PRED, tree) == 1.5
    # mistakes: samples 0, 1, 3. Edges from the true node up to the LCA: 1, 1, 1.
    assert mistake_severity(Y_TRUE, Y_PRED, tree) == 1.0
    # tree heights of the LCAs: big dog (1), dog (2), root (n_levels = 3)
    assert mistake_severity(Y_TRUE, Y_PRED, tree, height="tree") == pytest.approx(2.0)


def test_sample_weight(tree):
    w = np.array([1.0, 0.0, 2.0, 1.0])
    # weighted sums: |T&P| = 2 + 2*1 + 0 = 4, |P| = 2 + 2 + 1 = 5, |T| = 3 + 2 + 1 = 6
    assert hierarchical_precision_score(Y_TRUE, Y_PRED, tree, sample_weight=w) == pytest.approx(4 / 5)
    assert hierarchical_recall_score(Y_TRUE, Y_PRED, tree, sample_weight=w) == pytest.approx(4 / 6)
    assert hierarchical_f1_score(Y_TRUE, Y_PRED, tree, sample_weight=w, average="macro") == pytest.approx(
        (0.8 + 2 * 1.0 + 0.0) / 4
    )
    assert exact_path_accuracy_score(Y_TRUE, Y_PRED, tree, sample_weight=w) == 0.5
    assert mean_tree_distance(Y_TRUE, Y_PRED, tree, sample_weight=w) == pytest.approx((1 + 0 + 2) / 4)
    # zero weight drops the sample entirely, as if it were absent
    keep = w > 0
    assert hierarchical_f1_score(Y_TRUE, Y_PRED, tree, sample_weight=keep.astype(float)) == pytest.approx(
        hierarchical_f1_score(np.array(Y_TRUE)[keep], np.array(Y_PRED)[keep], tree)
    )


def test_report(tree):
    report = hierarchical_classification_report(Y_TRUE, Y_PRED, tree, output_dict=True)
    assert report["level 0"] == {"precision": 0.75, "recall": 0.75, "f1-score": 0.75, "support": 4}
    assert report["level 2"]["support"] == 1
    micro = report["hierarchical micro avg"]
    assert micro["precision"] == pytest.approx(hierarchical_precision_score(Y_TRUE, Y_PRED, tree))
    assert micro["f1-score"] == pytest.approx(hierarchical_f1_score(Y_TRUE, Y_PRED, tree))
    macro = report["hierarchical macro avg"]
    assert macro["recall"] == pytest.approx(hierarchical_recall_score(Y_TRUE, Y_PRED, tree, average="macro"))
    assert report["exact path accuracy"] == {"score": 0.25, "support": 4}
    assert report["mistake severity"] == {"score": 1.0, "support": 3}
    text = hierarchical_classification_report(Y_TRUE, Y_PRED, tree, level_names=["kind", "size", "mood"], digits=3)
    assert "kind" in text and "mood" in text and "0.571" in text and "hierarchical macro avg" in text
    with pytest.raises(ValueError, match="level_names"):
        hierarchical_classification_report(Y_TRUE, Y_PRED, tree, level_names=["a"])


def test_report_levels_sum_to_micro(tree):
    # Per-level hits and counts decompose the micro averages.
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 5, 50)
    y_pred = rng.integers(-1, 5, 50)
    true, pred, _ = check_paths(y_true, y_pred, tree, input_type="ids")
    hits = ((true == pred) & (true >= 0)).sum()
    assert hierarchical_precision_score(y_true, y_pred, tree, input_type="ids") == pytest.approx(hits / (pred >= 0).sum())
    assert hierarchical_recall_score(y_true, y_pred, tree, input_type="ids") == pytest.approx(hits / (true >= 0).sum())


# ----------------------------------------------------------------------------- representations
def test_paths_and_labels_and_ids_agree(tree):
    paths_pred = [["dog", "big dog", ""], ["dog", "big dog", "happy big dog"], ["cat", "", ""], ["dog", "", ""]]
    ids_pred = tree.to_ids(Y_PRED)
    ids_true = tree.to_ids(Y_TRUE)
    expected = hierarchical_f1_score(Y_TRUE, Y_PRED, tree)
    assert hierarchical_f1_score(Y_TRUE, paths_pred, tree) == pytest.approx(expected)
    assert hierarchical_f1_score(ids_true, ids_pred, tree) == pytest.approx(expected)  # auto: ints are ids
    assert hierarchical_f1_score(ids_true, paths_pred, tree) == pytest.approx(expected)
    # without a tree, paths of labels alone
    true_paths = tree.to_labels(np.maximum(tree.paths[ids_true], 0))
    true_paths = np.where(tree.paths[ids_true] >= 0, true_paths, "")
    assert hierarchical_f1_score(true_paths, paths_pred) == pytest.approx(expected)
    assert tree_distance(true_paths, paths_pred).tolist() == [1, 3, 0, 2]
    # a wider padded array is fine too
    wide = np.array([row + ["", ""] for row in paths_pred], dtype=object)
    assert hierarchical_f1_score(Y_TRUE, wide, tree) == pytest.approx(expected)
    # node-id paths padded with -1
    id_paths = tree.paths[ids_pred]
    assert hierarchical_f1_score(ids_true, id_paths, tree) == pytest.approx(expected)


def test_column_vector_is_labels(tree):
    col = np.array(Y_TRUE, dtype=object)[:, None]
    assert hierarchical_f1_score(col, Y_PRED, tree) == pytest.approx(hierarchical_f1_score(Y_TRUE, Y_PRED, tree))


def test_int_labels_and_pads():
    # Integer labels that are not node ids: 10..14; the pad is -1, the classifier's default.
    tree = Tree.from_parents(PARENTS, labels=[12, 11, 10, 14, 13])  # happy=12, cat=11, big=10, dog=14, small=13
    y_true = [12, 13, 11, 11]
    y_pred_paths = [[14, 10, -1], [14, 10, 12], [11, -1, -1], [14, -1, -1]]
    assert hierarchical_f1_score(y_true, y_pred_paths, tree) == pytest.approx(4 / 7)
    assert hierarchical_f1_score(y_true, [10, 12, 11, 14], tree) == pytest.approx(4 / 7)
    # with int labels, ints are labels, so node ids must be asked for
    ids = tree.to_ids([10, 12, 11, 14])
    assert hierarchical_f1_score(tree.to_ids(y_true), ids, tree, input_type="ids") == pytest.approx(4 / 7)
    # explicit pad label
    padded = [[14, 10, 99], [14, 10, 12], [11, 99, 99], [14, 99, 99]]
    assert hierarchical_f1_score(y_true, padded, tree, pad_label=99) == pytest.approx(4 / 7)


def test_pad_that_is_a_label_is_not_a_pad():
    # -1 is a real class here, so it is not taken as a pad automatically.
    tree = Tree.from_parents([-1, 0], labels=[-1, 5])
    assert hierarchical_f1_score([5], [-1], tree) == pytest.approx(2 / 3)


def test_repeated_names_under_different_parents():
    # Two classes named "dog": an animal and a toy. Labels are node ids, names repeat.
    names = np.array(["animal", "toy", "dog", "dog"])
    tree = Tree.from_parents([-1, -1, 0, 1])
    y_true, y_pred = np.array([2]), np.array([3])
    assert names[y_true][0] == names[y_pred][0]
    assert hierarchical_f1_score(y_true, y_pred, tree, zero_division=0) == 0.0
    assert tree_distance(y_true, y_pred, tree).tolist() == [4]
    assert exact_path_accuracy_score(y_true, y_pred, tree) == 0.0
    # without a tree, named paths: the "dog" of another parent is another node
    assert hierarchical_f1_score([["animal", "dog"]], [["toy", "dog"]]) == 0.0
    acc, support = level_accuracy_score([["animal", "dog"], ["toy", "dog"]], [["toy", "dog"], ["toy", "dog"]])
    np.testing.assert_allclose(acc, [0.5, 0.5])
    assert support.tolist() == [2, 2]
    assert tree_distance([["animal", "dog"]], [["toy", "dog"]]).tolist() == [4]


def test_torch_inputs(tree):
    torch = pytest.importorskip("torch")
    ids_true = torch.as_tensor(tree.to_ids(Y_TRUE))
    id_paths = torch.as_tensor(tree.paths[tree.to_ids(Y_PRED)])
    assert hierarchical_f1_score(ids_true, id_paths, tree) == pytest.approx(4 / 7)
    assert hierarchical_f1_score(Y_TRUE, id_paths, tree, sample_weight=torch.ones(4)) == pytest.approx(4 / 7)


def test_cupy_inputs(tree):
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # pragma: no cover - no GPU here
        pytest.skip("CuPy is installed but no CUDA device is available")
    ids_true = cupy.asarray(tree.to_ids(Y_TRUE))
    ids_pred = cupy.asarray(tree.to_ids(Y_PRED))
    assert hierarchical_f1_score(ids_true, ids_pred, tree) == pytest.approx(4 / 7)


# ----------------------------------------------------------------------------- empty / zero_division
def test_empty_predictions(tree):
    y_true = ["happy big dog", "cat"]
    empty = [["", "", ""], ["", "", ""]]
    with pytest.warns(UndefinedMetricWarning):
        assert hierarchical_precision_score(y_true, empty, tree) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hierarchical_precision_score(y_true, empty, tree, zero_division=1.0) == 1.0
        assert np.isnan(hierarchical_precision_score(y_true, empty, tree, zero_division=np.nan))
        # recall and F1 are defined: nothing of the true paths was found
        assert hierarchical_recall_score(y_true, empty, tree) == 0.0
        assert hierarchical_f1_score(y_true, empty, tree) == 0.0
        assert tree_distance(y_true, empty, tree).tolist() == [3, 1]
        acc, support = level_accuracy_score(y_true, empty, tree)
        assert acc.tolist() == [0.0, 0.0, 0.0] and support.tolist() == [2, 1, 1]
    # one empty prediction, one exact: macro with np.nan leaves the empty one out
    y_pred = [["", "", ""], ["cat", "", ""]]
    assert hierarchical_precision_score(y_true, y_pred, tree, average="macro", zero_division=np.nan) == 1.0
    assert hierarchical_precision_score(y_true, y_pred, tree, average="macro", zero_division=0.0) == 0.5
    assert hierarchical_precision_score(y_true, y_pred, tree, average="macro", zero_division=1.0) == 1.0
    # 1-D: the pad label is an empty prediction too
    assert hierarchical_recall_score(y_true, ["", "cat"], tree) == pytest.approx(1 / 4)


def test_zero_division_f_and_severity(tree):
    empty = [["", "", ""]]
    with pytest.warns(UndefinedMetricWarning):
        assert hierarchical_f1_score(empty, empty, tree) == 0.0
    assert hierarchical_f1_score(empty, empty, tree, zero_division=1.0) == 1.0
    with pytest.warns(UndefinedMetricWarning):
        assert mistake_severity(["cat"], ["cat"], tree) == 0.0
    assert np.isnan(mistake_severity(["cat"], ["cat"], tree, zero_division=np.nan))
    # a level no true label reaches: NaN by default, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc, support = level_accuracy_score(["cat"], ["cat"], tree)
    assert acc[0] == 1.0 and np.isnan(acc[1:]).all() and support.tolist() == [1, 0, 0]
    with pytest.raises(ValueError, match="zero_division"):
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, zero_division="nan")
    with pytest.raises(ValueError, match="zero_division"):
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, zero_division=0.5)


def test_over_specific_prediction_is_a_mistake_of_height_zero(tree):
    # True label "dog" (internal); predicting "small dog" is a mistake whose LCA is "dog".
    assert mistake_severity(["dog"], ["small dog"], tree) == 0.0
    assert mistake_severity(["dog"], ["small dog"], tree, height="tree") == 2.0
    assert hierarchical_recall_score(["dog"], ["small dog"], tree) == 1.0
    assert hierarchical_precision_score(["dog"], ["small dog"], tree) == 0.5


# ----------------------------------------------------------------------------- errors
def test_errors(tree):
    with pytest.raises(ValueError, match="different numbers of samples: 4 and 3"):
        hierarchical_f1_score(Y_TRUE, Y_PRED[:3], tree)
    # Classes the tree lacks are refused with unknown="raise" (the default scores them).
    with pytest.raises(UnknownLabelError, match="y_pred.*'cow'"):
        hierarchical_f1_score(Y_TRUE, ["cow", "dog", "cat", "cat"], tree, unknown="raise")
    with pytest.raises(KeyError):  # UnknownLabelError is a KeyError too
        hierarchical_f1_score(["wolf"] * 4, Y_PRED, tree, unknown="raise")
    with pytest.raises(ValueError, match=r"y_pred has 1 row\(s\) that are not ancestral paths.*row 0"):
        hierarchical_f1_score(["cat"], [["cat", "small dog", ""]], tree, unknown="raise")
    with pytest.raises(ValueError, match="not ancestral paths"):  # a child in the top-level column
        hierarchical_f1_score(["cat"], [["small dog", "", ""]], tree, unknown="raise")
    with pytest.raises(ValueError, match="unknown must be one of"):
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, unknown="skip")
    with pytest.raises(ValueError, match="label after a pad"):
        hierarchical_f1_score(["cat"], [["dog", "", "happy big dog"]], tree)
    with pytest.raises(ValueError, match="label after a pad"):
        hierarchical_f1_score([["a", "", "b"]], [["a", "", ""]])
    with pytest.raises(ValueError, match="needs tree="):
        hierarchical_f1_score(["cat"], [["cat"]])
    with pytest.raises(ValueError, match="shape"):
        hierarchical_f1_score(np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), tree)
    with pytest.raises(ValueError, match="scalar"):
        hierarchical_f1_score("cat", "cat", tree)
    with pytest.raises(ValueError, match="out of range"):
        hierarchical_f1_score([0, 1], [0, 7], tree)
    with pytest.raises(TypeError, match="node ids"):
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, input_type="ids")
    with pytest.raises(ValueError, match="average"):
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, average="weighted")
    with pytest.raises(ValueError, match="input_type"):
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, input_type="names")
    with pytest.raises(ValueError, match="sample_weight"):
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, sample_weight=[1, 2])
    with pytest.raises(ValueError, match="empty"):
        hierarchical_f1_score([], [], tree)
    with pytest.raises(ValueError, match="beta"):
        hierarchical_fbeta_score(Y_TRUE, Y_PRED, tree, beta=-1)
    with pytest.raises(ValueError, match="height"):
        mistake_severity(Y_TRUE, Y_PRED, tree, height="leaf")
    with pytest.raises(ValueError, match="needs tree"):
        mistake_severity([["cat"]], [["dog"]], height="tree")
    with pytest.raises(ValueError, match="level=5"):
        level_accuracy_score(Y_TRUE, Y_PRED, tree, level=5)


# ----------------------------------------------------------------------------- property test
def _reference(tree_parents, names, t_ids, p_ids):
    """Kiritchenko's definitions with Python sets of *names* (unique in this test)."""

    def ancestors(node):
        out = set()
        while node >= 0:
            out.add(names[node])
            node = tree_parents[node]
        return out

    T = [ancestors(t) for t in t_ids]
    P = [ancestors(p) for p in p_ids]
    inter = [len(a & b) for a, b in zip(T, P)]
    micro_p = sum(inter) / sum(len(b) for b in P) if sum(len(b) for b in P) else 0.0
    micro_r = sum(inter) / sum(len(a) for a in T)
    micro_f = 2 * micro_p * micro_r / (micro_p + micro_r) if micro_p + micro_r else 0.0
    per_p = [i / len(b) if b else 0.0 for i, b in zip(inter, P)]
    per_r = [i / len(a) for i, a in zip(inter, T)]
    per_f = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(per_p, per_r)]
    dist = [len(a ^ b) for a, b in zip(T, P)]
    mean = lambda v: sum(v) / len(v)
    return {
        "micro": (micro_p, micro_r, micro_f),
        "macro": (mean(per_p), mean(per_r), mean(per_f)),
        "dist": dist,
    }


@st.composite
def trees_and_samples(draw):
    n = draw(st.integers(1, 12))
    # parent of node k among nodes 0..k-1 (or the root), then node ids shuffled
    raw_parents = [draw(st.integers(-1, k - 1)) for k in range(n)]
    perm = draw(st.permutations(list(range(n))))
    parents = [-1] * n
    for k, p in enumerate(raw_parents):
        parents[perm[k]] = -1 if p < 0 else perm[p]
    n_samples = draw(st.integers(1, 15))
    t_ids = draw(st.lists(st.integers(0, n - 1), min_size=n_samples, max_size=n_samples))
    p_ids = draw(st.lists(st.integers(-1, n - 1), min_size=n_samples, max_size=n_samples))
    return parents, t_ids, p_ids


@settings(max_examples=150, deadline=None)
@given(trees_and_samples())
def test_matches_set_based_reference(case):
    parents, t_ids, p_ids = case
    names = [f"n{i}" for i in range(len(parents))]
    tree = Tree.from_parents(parents, labels=names)
    ref = _reference(parents, names, t_ids, p_ids)
    y_true = [names[i] for i in t_ids]
    y_pred = [names[i] if i >= 0 else "" for i in p_ids]
    for average in ("micro", "macro"):
        got = (
            hierarchical_precision_score(y_true, y_pred, tree, average=average, zero_division=0.0),
            hierarchical_recall_score(y_true, y_pred, tree, average=average, zero_division=0.0),
            hierarchical_f1_score(y_true, y_pred, tree, average=average, zero_division=0.0),
        )
        np.testing.assert_allclose(got, ref[average], rtol=1e-12, atol=1e-12)
    assert tree_distance(y_true, y_pred, tree).tolist() == ref["dist"]
    # the same on node ids, and on label paths without a tree
    np.testing.assert_allclose(
        hierarchical_f1_score(np.array(t_ids), np.array(p_ids), tree, average="macro", zero_division=0.0),
        ref["macro"][2],
        atol=1e-12,
    )
    label_paths = lambda ids: np.where(
        tree.paths[ids] >= 0, np.asarray(names, dtype=object)[np.maximum(tree.paths[ids], 0)], ""
    )
    t_paths, p_paths = label_paths(np.array(t_ids)), label_paths(np.array(p_ids))
    p_paths[np.array(p_ids) < 0] = ""
    np.testing.assert_allclose(
        hierarchical_recall_score(t_paths, p_paths, average="micro", zero_division=0.0), ref["micro"][1], atol=1e-12
    )


# ----------------------------------------------------------------------------- plots
def test_plots(tree):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hiclass_parallel.metrics.plot import (
        plot_hierarchical_summary,
        plot_level_accuracy,
        plot_tree_distance,
    )

    ax = plot_level_accuracy(Y_TRUE, Y_PRED, tree, level_names=["kind", "size", "mood"])
    assert [float(b.get_height()) for b in ax.patches] == [0.75, 0.5, 0.0]
    ax = plot_tree_distance(Y_TRUE, Y_PRED, tree, density=True)
    np.testing.assert_allclose([b.get_height() for b in ax.patches], [0.25, 0.25, 0.25, 0.25])
    fig = plot_hierarchical_summary(Y_TRUE, Y_PRED, tree)
    assert len(fig.axes) == 2
    _, ax0 = plt.subplots()
    assert plot_level_accuracy(Y_TRUE, Y_PRED, tree, ax=ax0) is ax0
    plt.close("all")


# ----------------------------------------------------------------------------- scorers
BIG_TREE_PATHS = [
    ["animal", "dog", "poodle"],
    ["animal", "dog", "beagle"],
    ["animal", "cat", "siamese"],
    ["animal", "cat", "persian"],
    ["plant", "tree", "oak"],
    ["plant", "tree", "pine"],
    ["plant", "flower", "rose"],
    ["plant", "flower", "tulip"],
]
PREDICT_CALLS = {"n": 0}


class PathPredictor(ClassifierMixin, BaseEstimator):
    """A fake hierarchical classifier: X[:, 0] holds the true node id; predict returns the
    ancestral path truncated to ``max_depth`` levels, or a sibling's path if ``confuse``."""

    def __init__(self, max_depth=2, confuse=False):
        self.max_depth = max_depth
        self.confuse = confuse

    def fit(self, X, y):
        self.tree_ = Tree.from_paths(BIG_TREE_PATHS)
        self.pad_label_ = ""
        self.classes_ = self.tree_.labels
        self.tree_.to_ids(y)  # labels must be known
        return self

    def predict(self, X):
        PREDICT_CALLS["n"] += 1
        ids = np.asarray(X)[:, 0].astype(np.int64)
        if self.confuse:  # the previous class id, usually a wrong node
            ids = (ids - 1) % self.tree_.n_classes
        paths = self.tree_.paths[ids].copy()
        paths[:, self.max_depth + 1 :] = -1
        labels = self.tree_.labels[np.maximum(paths, 0)].astype(object)
        labels[paths < 0] = ""
        return labels


@pytest.fixture
def data():
    tree = Tree.from_paths(BIG_TREE_PATHS)
    rng = np.random.default_rng(0)
    ids = rng.choice(np.flatnonzero(tree.is_leaf), size=60)
    # some true labels at internal nodes
    ids[:10] = tree.parents[ids[:10]]
    X = np.column_stack([ids, rng.normal(size=60)]).astype(float)
    y = tree.labels[ids]
    return X, y


def test_scorer_on_fake_estimator(data):
    X, y = data
    est = PathPredictor().fit(X, y)
    for name in get_scorer_names():
        score = get_scorer(name)(est, X, y)
        assert score == pytest.approx(0.0 if name.startswith("neg_") else 1.0), name
    shallow = PathPredictor(max_depth=0).fit(X, y)
    pred = shallow.predict(X)
    assert get_scorer("hierarchical_f1")(shallow, X, y) == pytest.approx(
        hierarchical_f1_score(y, pred, shallow.tree_)
    )
    assert get_scorer("neg_tree_distance")(shallow, X, y) == pytest.approx(-mean_tree_distance(y, pred, shallow.tree_))
    assert get_scorer("hierarchical_precision")(shallow, X, y) == 1.0
    # sample_weight reaches the metric
    w = np.r_[np.zeros(30), np.ones(30)]
    assert get_scorer("hierarchical_recall")(shallow, X, y, sample_weight=w) == pytest.approx(
        hierarchical_recall_score(y[30:], pred[30:], shallow.tree_)
    )
    # a scorer pickles (joblib workers) and prints like make_scorer
    assert pickle.loads(pickle.dumps(get_scorer("hierarchical_f1")))(est, X, y) == 1.0
    assert repr(get_scorer("neg_mean_tree_distance")) == "make_hierarchical_scorer(mean_tree_distance, greater_is_better=False)"


def test_grid_search_picks_by_hierarchical_score(data):
    X, y = data
    grid = {"max_depth": [0, 1, 2], "confuse": [False, True]}
    for scoring in (
        get_scorer("hierarchical_f1"),
        make_hierarchical_scorer(hierarchical_fbeta_score, beta=0.5),
    ):
        search = GridSearchCV(PathPredictor(), grid, scoring=scoring, cv=KFold(3)).fit(X, y)
        assert search.best_params_ == {"max_depth": 2, "confuse": False}
    # several scorers as a dict, refit on one of them
    search = GridSearchCV(
        PathPredictor(),
        grid,
        scoring=get_scorers(["hierarchical_f1_macro", "neg_tree_distance"]),
        refit="neg_tree_distance",
        cv=KFold(3),
    ).fit(X, y)
    assert search.best_params_ == {"max_depth": 2, "confuse": False}
    # the precision of a truncated prediction is perfect: hP alone prefers shallow models
    ranks = GridSearchCV(PathPredictor(confuse=False), {"max_depth": [0, 2]}, scoring=get_scorer("hierarchical_precision"), cv=KFold(3)).fit(X, y)
    assert ranks.cv_results_["mean_test_score"].tolist() == [1.0, 1.0]
    # a fitted search is itself scorable: the tree is found on its best estimator
    assert get_scorer("hierarchical_f1")(search, X, y) == 1.0


def test_cross_validate_with_several_scorers(data):
    X, y = data
    names = ["hierarchical_f1", "hierarchical_precision_macro", "exact_path_accuracy", "neg_tree_distance"]
    PREDICT_CALLS["n"] = 0
    result = cross_validate(PathPredictor(max_depth=1), X, y, scoring=get_scorers(names), cv=KFold(3))
    # predictions are computed once per split and shared by the scorers
    assert PREDICT_CALLS["n"] == 3
    assert result["test_hierarchical_precision_macro"].tolist() == [1.0, 1.0, 1.0]
    assert np.all(result["test_exact_path_accuracy"] < 1.0)
    assert np.all(result["test_neg_tree_distance"] < 0)
    one_by_one = {name: cross_val_score(PathPredictor(max_depth=1), X, y, scoring=get_scorer(name), cv=KFold(3)) for name in names}
    for name in names:
        np.testing.assert_allclose(one_by_one[name], result[f"test_{name}"])
    scores = cross_val_score(PathPredictor(), X, y, scoring=get_scorer("hierarchical_f1_macro"), cv=KFold(3))
    assert scores.tolist() == [1.0, 1.0, 1.0]
    scores = cross_val_score(PathPredictor(confuse=True), X, y, scoring=get_scorer("neg_mistake_severity"), cv=KFold(3))
    assert np.all(scores < 0)
    top_level = make_hierarchical_scorer(level_accuracy_score, level=0)
    scores = cross_val_score(PathPredictor(max_depth=0), X, y, scoring=top_level, cv=KFold(3))
    assert scores.tolist() == [1.0, 1.0, 1.0]


def test_scorer_through_pipeline_and_given_tree(data):
    X, y = data
    pipe = make_pipeline(FunctionTransformer(), PathPredictor(max_depth=1))
    search = GridSearchCV(pipe, {"pathpredictor__max_depth": [0, 2, 1]}, scoring=get_scorer("hierarchical_f1"), cv=KFold(3))
    assert search.fit(X, y).best_params_ == {"pathpredictor__max_depth": 2}
    fitted = pipe.fit(X, y)
    assert get_scorer("exact_path_accuracy")(fitted, X, y) < 1.0

    class NoTree:
        """Predicts paths but does not expose tree_."""

        def predict(self, X):
            return PathPredictor().fit(X, y).predict(X)

    with pytest.raises(ValueError, match="no fitted tree_"):
        get_scorer("hierarchical_f1")(NoTree(), X, y)
    tree = Tree.from_paths(BIG_TREE_PATHS)
    assert make_hierarchical_scorer(hierarchical_f1_score, tree=tree)(NoTree(), X, y) == 1.0
    # y given as paths needs no tree at all
    y_paths = NoTree().predict(X)
    assert get_scorer("hierarchical_f1")(NoTree(), X, y_paths) == 1.0
    # scikit-learn's own make_scorer works with the metric and a fixed tree
    assert make_scorer(hierarchical_f1_score, tree=tree)(PathPredictor().fit(X, y), X, y) == 1.0


def test_get_scorer_lookup():
    import sys

    assert "matplotlib.pyplot" not in sys.modules or "hiclass_parallel.metrics.plot" in sys.modules
    assert get_scorer("accuracy") is not None  # falls back to scikit-learn
    f = lambda est, X, y: 0.0
    assert get_scorer(f) is f
    with pytest.raises(ValueError, match="hierarchical_f1"):
        get_scorer("hierarchical_f2")
    assert get_scorer("hierarchical_f1") is not get_scorer("hierarchical_f1")  # copies
    assert set(get_scorers()) <= set(get_scorer_names())
    assert sorted(get_scorers(["accuracy", "hierarchical_f1"])) == ["accuracy", "hierarchical_f1"]


def test_ragged_lists_of_paths_read_as_in_the_path_encoder(tree):
    """A ragged list of label paths means what it means to PathEncoder: short rows are padded."""
    from hiclass_parallel.estimators import PathEncoder

    ragged = [["dog", "big dog"], ["cat"], ["dog", "big dog", "happy big dog"]]
    pred = ["big dog", "dog", "big dog"]
    true_ids, _, _ = check_paths(ragged, pred, tree)
    encoded = PathEncoder(tree).fit(LABELS).transform(ragged)
    np.testing.assert_array_equal(true_ids, encoded)
    # sets: {dog, big} vs {dog, big}: 2/2; {cat} vs {dog}: 0; {dog, big, happy} vs {dog, big}: 2
    assert hierarchical_f1_score(ragged, pred, tree) == pytest.approx(2 * 4 / (6 + 5))
    assert hierarchical_f1_score(ragged, pred, tree) == pytest.approx(
        hierarchical_f1_score(["big dog", "cat", "happy big dog"], pred, tree)
    )
    without_tree = hierarchical_f1_score(ragged, [["dog", "big dog"], ["dog"], ["dog", "big dog"]])
    assert without_tree == pytest.approx(2 * 4 / (6 + 5))


def test_package_scorer_names_are_not_registered_with_scikit_learn(data):
    """scikit-learn's scorer names stay its own: the package writes nothing into its table
    (and has no function that would), so a package name is refused as a string."""
    from sklearn.metrics import get_scorer_names as sk_get_scorer_names

    import hiclass_parallel.metrics

    assert not hasattr(hiclass_parallel.metrics, "register_scorers")
    assert "hierarchical_f1" not in sk_get_scorer_names()
    X, y = data
    with pytest.raises(ValueError, match="scoring"):
        GridSearchCV(PathPredictor(), {"max_depth": [0, 1]}, scoring="hierarchical_f1", cv=KFold(3)).fit(X, y)


# ----------------------------------------------------------------------------- sample weights
@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ([1.0, -1.0, 1.0, 1.0], r"sample_weight\[1\] is -1\.0: weights must be finite and non-negative"),
        ([1.0, 1.0, np.nan, 1.0], r"sample_weight\[2\] is nan: weights must be finite and non-negative"),
        ([np.inf, 1.0, 1.0, 1.0], r"sample_weight\[0\] is inf: weights must be finite and non-negative"),
        ([1.0, 2.0], r"sample_weight must have shape \(4,\), got \(2,\)"),
        ([[1.0, 1.0, 1.0, 1.0]], r"sample_weight must have shape \(4,\), got \(1, 4\)"),
        (["a", "b", "c", "d"], r"sample_weight must be numbers, got <U1"),
    ],
)
def test_one_weight_check_for_the_tree_and_the_dag_metrics(tree, weight, message):
    """The DAG metrics took weights [1, -1] and returned an F1 of 1.43; the
    tree and DAG metrics now share one check, with one message naming the weight."""
    from hiclass_parallel.dag import Dag
    from hiclass_parallel.metrics import (
        hierarchical_f1_score_dag,
        hierarchical_precision_score_dag,
    )

    dag = Dag.from_tree(tree)
    for metric, hierarchy in [(hierarchical_f1_score, tree), (hierarchical_f1_score_dag, dag),
                              (hierarchical_precision_score_dag, dag), (exact_path_accuracy_score, tree)]:
        with pytest.raises(ValueError, match=message):
            metric(Y_TRUE, Y_PRED, hierarchy, sample_weight=weight)
    # the reproducer: two samples on a DAG with weights [1, -1]
    diamond = Dag.from_edges([("b", "a"), ("c", "a"), ("d", "b"), ("d", "c")])
    with pytest.raises(ValueError, match=r"sample_weight\[1\] is -1\.0"):
        hierarchical_f1_score_dag(["d", "b"], ["d", "c"], diamond, sample_weight=[1, -1])
    # valid weights still give the hand-computed values (node sets {a,b,c,d} vs {a,b,c,d}, {a,b} vs {a,c})
    assert hierarchical_f1_score_dag(["d", "b"], ["d", "c"], diamond, sample_weight=[1, 2]) == pytest.approx(
        (4 + 2 * 1) / (4 + 2 * 2))
    assert hierarchical_f1_score_dag(Y_TRUE, Y_PRED, dag, sample_weight=[1.0, 0.0, 2.0, 1.0]) == pytest.approx(
        hierarchical_f1_score(Y_TRUE, Y_PRED, tree, sample_weight=[1.0, 0.0, 2.0, 1.0]))


# ---------------------------------------------------------------------------- bad and extreme input
# Regression probes: each once gave a wrong result, a bare crash or a misleading error; each
# asserts the correct result or the named error now.
def test_metrics_nan_pad_with_tree():
    tree = Tree.from_edges([("dog", "animal"), ("cat", "animal")])
    y_true = np.array([["animal", "dog"], ["animal", np.nan]], dtype=object)
    y_pred = np.array([["animal", np.nan], ["animal", np.nan]], dtype=object)
    assert hierarchical_recall_score(y_true, y_pred, tree) == pytest.approx(2 / 3)


def test_metrics_huge_ids_named():
    with pytest.raises(ValueError, match="9223372036854775808 out of range"):
        hierarchical_f1_score(np.array([2, 5]), np.array([2**63, 5], dtype=np.uint64), PAPER, input_type="ids")


@pytest.mark.parametrize("beta", [math.inf, 1e200])
def test_fbeta_infinite_beta_is_recall(beta):
    y_true, y_pred = [[1, 2]], [[1, 3]]
    assert hierarchical_fbeta_score(y_true, y_pred, beta=beta) == hierarchical_recall_score(y_true, y_pred) == 0.5


@pytest.mark.parametrize("average", ["micro", "macro"])
@pytest.mark.parametrize("beta", [0.35, 0.1, 3.7, 1e200])
def test_fbeta_of_a_perfect_prediction_is_exactly_one(beta, average):
    # (1 + b2) |T & P| / (b2 |T| + |P|) rounded its two sides differently: 1.0000000000000002
    # for three one-node paths at beta=0.35 (found by the fuzz test of tests/trees).
    tree = Tree.from_parents([-1])
    labels = tree.labels[[0, 0, 0]]
    assert hierarchical_fbeta_score(labels, labels, tree, beta=beta, average=average) == 1.0


def test_fbeta_matches_the_textbook_formula():
    # The rewritten denominator gives the formula's value (to rounding) on imperfect paths.
    y_true, y_pred = [[1, 2], [1, 3]], [[1, 3], [1, 3]]
    for beta in (0.35, 1.0, 2.0):
        b2 = beta * beta
        p = r = 3 / 4
        expected = (1 + b2) * p * r / (b2 * p + r)
        assert hierarchical_fbeta_score(y_true, y_pred, beta=beta) == pytest.approx(expected, rel=1e-12)
    weighted = hierarchical_fbeta_score([[1, 2], [1, 3]], [[1], [1, 3]], beta=0.5, sample_weight=[0.3, 0.7])
    tp, t, pr = 0.3 * 1 + 0.7 * 2, 0.3 * 2 + 0.7 * 2, 0.3 * 1 + 0.7 * 2
    assert weighted == pytest.approx(1.25 * tp / (0.25 * t + pr), rel=1e-12)


def test_report_omits_levels_nothing_reaches():
    tree = Tree.from_dict({"a": {"b": {"c": {"d": None}}}, "e": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = hierarchical_classification_report(["a", "e"], ["b", "e"], tree)
    assert "level 2 and level 3: omitted, no true label and no prediction reaches them" in text
    assert "level 1" in text and "       level 2  " not in text
