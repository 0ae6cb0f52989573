"""Scoring labels whose classes the fitted tree lacks, and the metrics in every label form.

A held-out split of a real taxonomy has classes no training row had: each such class is a
miss, its known ancestors hits, as the label path says, and one warning says how many rows
held one. The metrics read every label form the estimators take.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import make_pipeline

from hiclass_parallel import Tree
from hiclass_parallel.dag import Dag
from hiclass_parallel.exceptions import UnknownClassWarning, UnknownLabelError
from hiclass_parallel.metrics import (
    coverage_score,
    exact_path_accuracy_score,
    get_scorer,
    hierarchical_classification_report,
    hierarchical_f1_score,
    hierarchical_f1_score_dag,
    hierarchical_precision_score,
    hierarchical_recall_score,
    level_accuracy_score,
    mean_tree_distance,
    mistake_severity,
)

TREE = Tree.from_paths([["food", "fruit", "apple"], ["food", "fruit", "pear"], ["food", "veg"], ["tools", "saw"]])


def _quiet(func, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownClassWarning)
        return func(*args, **kwargs)


# ---------------------------------------------------------------------------- the metrics
def test_an_unknown_class_is_a_miss_and_its_known_ancestors_are_hits():
    y_true = [["food", "fruit", "plum"], ["tools", "saw"]]  # "plum" is no class of the tree
    y_pred = [["food", "fruit", "apple"], ["tools", "saw"]]
    with pytest.warns(UnknownClassWarning, match=r"1 of 2 rows of y_true \(e\.g\. \['food', 'fruit', 'plum'\]\)"):
        f1 = hierarchical_f1_score(y_true, y_pred, TREE)
    # |T & P| = 2 + 2, |T| = 3 + 2, |P| = 3 + 2: food and fruit are hits, plum a miss
    assert f1 == pytest.approx(8 / 10)
    assert _quiet(hierarchical_recall_score, y_true, y_pred, TREE) == pytest.approx(4 / 5)
    assert _quiet(exact_path_accuracy_score, y_true, y_pred, TREE) == 0.5
    assert _quiet(mean_tree_distance, y_true, y_pred, TREE) == 1.0
    acc, support = _quiet(level_accuracy_score, y_true, y_pred, TREE)
    assert acc.tolist() == [1.0, 1.0, 0.0] and support.tolist() == [2, 2, 1]
    assert _quiet(mistake_severity, y_true, y_pred, TREE, height="tree") == 1.0


def test_unknown_classes_under_unknown_ones_and_below_the_deepest_level():
    # A new top-level class with a child, and a class below the tree's deepest level.
    y_true = [["toys", "kite"], ["food", "fruit", "apple", "green"]]
    y_pred = [["tools", "saw"], ["food", "fruit", "apple"]]
    with pytest.warns(UnknownClassWarning, match="2 of 2 rows of y_true"):
        precision = hierarchical_precision_score(y_true, y_pred, TREE)
    assert precision == pytest.approx(3 / 5)
    report = _quiet(hierarchical_classification_report, y_true, y_pred, TREE, output_dict=True, zero_division=0.0)
    assert report["level 3"]["support"] == 1 and report["level 3"]["recall"] == 0.0
    # The same unknown path in y_true and y_pred is the same node: a hit.
    assert _quiet(hierarchical_f1_score, [["toys", "kite"]], [["toys", "kite"]], TREE) == 1.0
    assert _quiet(hierarchical_f1_score, [["toys", "kite"]], [["food", "kite"]], TREE) == 0.0


def test_one_warning_per_call_and_the_other_choices():
    y_true, y_pred = [["food", "nuts"], ["tools", "drill"]], [["food", "veg"], ["tools", "saw"]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hierarchical_f1_score(y_true, y_pred, TREE)
    assert [str(w.message).split(" hold")[0] for w in caught] == ["2 of 2 rows of y_true (e.g. ['food', 'nuts'])"]
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hierarchical_f1_score(y_true, y_pred, TREE, unknown="ignore") == 0.5
    with pytest.raises(UnknownLabelError, match="'nuts'"):
        hierarchical_f1_score(y_true, y_pred, TREE, unknown="raise")
    # A plain label the tree lacks has no known ancestors: |T & P| = 0 + 2 of |T| = 1 + 2, |P| = 3 + 2.
    assert _quiet(hierarchical_f1_score, ["plum", "saw"], ["apple", "saw"], TREE) == pytest.approx(4 / 8)


def test_node_ids_and_ambiguous_names_stay_errors():
    with pytest.raises(ValueError, match="out of range"):
        hierarchical_f1_score([0, 1], [0, 99], Tree.from_dict({"a": None, "b": None, "c": None}), input_type="ids")
    repeated = Tree.from_paths([["a", "x"], ["b", "x"]])
    with pytest.raises(UnknownLabelError, match="'x' is the name of 2 classes"):
        hierarchical_f1_score(["x"], ["x"], repeated)


# ---------------------------------------------------------------------------- label forms
def test_path_strings_with_and_without_a_tree():
    y_true = ["food/fruit/apple", "food/veg", "food/fruit/plum"]
    y_pred = ["food/fruit/pear", "food/veg", "food/fruit/apple"]
    without = hierarchical_f1_score(y_true, y_pred, path_sep="/")
    with pytest.warns(UnknownClassWarning, match="1 of 3 rows"):
        with_tree = hierarchical_f1_score(y_true, y_pred, TREE, path_sep="/")
    assert without == with_tree == pytest.approx(2 * 6 / 16)
    # A tree whose labels are path strings (learnt with path_sep) reads them the same way.
    strings = Tree.from_paths(["food/fruit/apple", "food/fruit/pear", "food/veg"], sep="/")
    assert _quiet(hierarchical_f1_score, y_true, y_pred, strings, path_sep="/") == with_tree
    with pytest.raises(ValueError, match="path_sep='/' reads each label of y_true as a path string.*rows 1"):
        hierarchical_f1_score(["food/veg", 3], ["food/veg", "food"], path_sep="/")


def test_tuples_dataframes_ragged_lists_and_series_read_alike():
    pd = pytest.importorskip("pandas")
    paths = [["food", "fruit", "apple"], ["food", "veg"], ["tools"]]
    pred = [["food", "fruit", "pear"], ["food", "veg"], ["tools", "saw"]]
    expected = hierarchical_f1_score(paths, pred, TREE)
    repeated = Tree.from_paths(paths + [["tools", "saw"], ["food", "fruit", "pear"]])
    assert repeated.has_names is False
    forms = {
        "ragged lists": paths,
        "tuples": [tuple(p) for p in paths],
        "a DataFrame of levels": pd.DataFrame([p + [None] * (3 - len(p)) for p in paths], columns=["l0", "l1", "l2"]),
        "a Series of lists": pd.Series(paths),
        "path strings": ["/".join(p) for p in paths],
    }
    for form, y in forms.items():
        sep = "/" if form == "path strings" else None
        assert hierarchical_f1_score(y, pred, TREE, path_sep=sep) == pytest.approx(expected), form
        assert hierarchical_f1_score(y, pred, path_sep=sep) == pytest.approx(expected), form
    # Tuples are the labels of a tree whose names repeat; an unknown tuple keeps its known prefix.
    names = Tree.from_paths([["a", "x"], ["b", "x"], ["b", "y"]])
    with pytest.warns(UnknownClassWarning):
        assert hierarchical_f1_score([("b", "z")], [("b", "y")], names) == 0.5


def test_dag_metrics_score_labels_the_dag_lacks():
    dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
    with pytest.warns(UnknownClassWarning, match="1 of 2 rows of y_true"):
        f1 = hierarchical_f1_score_dag([["d", "e"], ["a"]], [["d"], ["a"]], dag)
    # row 0: |T| = 5 (d, c, a, b and the unknown e), |P| = 4, common 4; row 1: 1, 1, 1
    assert f1 == pytest.approx(2 * 5 / (6 + 5))
    assert _quiet(hierarchical_f1_score_dag, [["e"]], [["e"]], dag) == 1.0
    with pytest.raises(UnknownLabelError, match="'e'"):
        hierarchical_f1_score_dag(["e"], ["a"], dag, unknown="raise")


def test_conformal_metrics_cover_an_unknown_class_from_a_known_ancestor():
    y_true = [["food", "fruit", "plum"], ["food", "fruit", "plum"]]
    answers = [["food", "fruit", ""], ["food", "veg", ""]]
    assert _quiet(coverage_score, y_true, answers, TREE) == 0.5


# ---------------------------------------------------------------------------- estimators and model selection
def _texts_and_paths(n: int = 96):
    """Short texts labelled with path strings; the last two classes occur in one fold each,
    so unshuffled 3-fold splits leave them out of training."""
    common = ["food/fruit/apple", "food/fruit/pear", "food/veg/kale", "tools/saw", "tools/drill"]
    y = [common[i % len(common)] for i in range(n)]
    y[5], y[6] = "food/fruit/plum", "food/veg/leek"  # only in the first fold
    y[-3] = "tools/hammer"  # only in the last fold
    words = [p.replace("/", " ") for p in y]
    rng = np.random.default_rng(0)
    return [f"{w} w{rng.integers(40)}" for w in words], y


def _model():
    from hiclass_parallel.estimators import HierarchicalClassifier

    return make_pipeline(TfidfVectorizer(), HierarchicalClassifier(path_sep="/", max_epochs=4, random_state=0))


def test_score_of_a_split_holding_unseen_classes():
    X, y = _texts_and_paths()
    model = _model().fit(X[10:], y[10:])
    assert "food/fruit/plum" not in model[-1].classes_.tolist()
    with pytest.warns(UnknownClassWarning, match="2 of 10 rows of y"):
        score = model.score(X[:10], y[:10])
    # The same value as the metric on the predictions, read as path strings.
    expected = _quiet(hierarchical_f1_score, y[:10], model.predict(X[:10]), model[-1].tree_, path_sep="/")
    assert score == pytest.approx(expected) and 0.5 < score < 1.0
    with pytest.warns(UnknownClassWarning):
        assert get_scorer("hierarchical_f1")(model, X[:10], y[:10]) == pytest.approx(expected)


def test_cross_val_score_and_grid_search_with_folds_missing_classes():
    X, y = _texts_and_paths()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownClassWarning)
        scores = cross_val_score(_model(), X, y, cv=KFold(3), error_score="raise")
        search = GridSearchCV(_model(), {"hierarchicalclassifier__lr": [0.003, 0.01]}, cv=KFold(3),
                              scoring=get_scorer("hierarchical_f1"), error_score="raise").fit(X, y)
    assert np.isfinite(scores).all() and (scores > 0.5).all()
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
