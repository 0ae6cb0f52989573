"""Labels as users have them: names repeated under different parents, path strings
(``path_sep``), DataFrames, Series and ragged lists of levels; answers in the user's terms."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from support import Pairs

from hiclass_parallel import Tree
from hiclass_parallel.estimators import HierarchicalClassifier, MultiLabelHierarchicalClassifier, PathEncoder
from hiclass_parallel.exceptions import TreeError, UnknownClassWarning, UnknownLabelError
from hiclass_parallel.metrics import (
    check_paths,
    hierarchical_classification_report,
    hierarchical_f1_score,
    make_hierarchical_scorer,
)

# A small product taxonomy: "Accessories" and "Other" each under two parents.
PATHS = [
    ["Electronics", "Accessories", "Cables"],
    ["Electronics", "Accessories", "Chargers"],
    ["Electronics", "Other"],
    ["Clothing", "Accessories"],
    ["Clothing", "Tops"],
    ["Clothing", "Other"],
]
NAMES = {name for path in PATHS for name in path}


def taxonomy_data(per_class: int = 12, seed: int = 0) -> tuple[np.ndarray, list[list[str]]]:
    """One well-separated cluster of rows per path of ``PATHS``; ragged lists of names."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(len(PATHS)), per_class)
    X = np.eye(len(PATHS))[rows] + 0.05 * rng.standard_normal((rows.size, len(PATHS)))
    return X.astype(np.float32), [PATHS[i] for i in rows]


def fit(y, X, **params) -> HierarchicalClassifier:
    return HierarchicalClassifier(max_epochs=25, random_state=0, **params).fit(X, y)


@pytest.fixture(scope="module")
def data():
    return taxonomy_data()


@pytest.fixture(scope="module")
def paths_model(data):
    X, y = data
    return fit(y, X)


@pytest.fixture(scope="module")
def strings_model(data):
    X, y = data
    return fit(["/".join(p) for p in y], X, path_sep="/")


def as_lists(predicted: np.ndarray) -> list[list[str]]:
    """Predicted padded paths as ragged lists of names."""
    return [[v for v in row if v != ""] for row in predicted.tolist()]


# ---------------------------------------------------------------------------- repeated names
def test_repeated_names_fit_and_answer_in_the_users_paths(paths_model, data):
    # Before: TreeError "node 'Accessories' has two parents".
    X, y = data
    clf = paths_model
    assert clf.tree_.n_classes == 9  # two "Accessories", two "Other"
    predicted = clf.predict(X)
    assert predicted.shape == (len(y), 3)
    assert as_lists(predicted) == y  # the user's own paths of names, nothing else
    assert set(predicted.ravel().tolist()) <= NAMES | {""}
    labels = clf.predict_labels(X[::12])
    assert labels.tolist() == [tuple(p) for p in PATHS]  # a class's label is its path of names
    assert clf.classes_.tolist() == clf.tree_.labels.tolist()
    assert ("Clothing", "Accessories") in clf.classes_.tolist()
    assert clf.predict_proba(X[:2]).shape == (2, clf.classes_.size)


def test_repeated_names_top_k_and_metrics(paths_model, data):
    X, y = data
    clf = paths_model
    top = clf.predict_top_k(X[:12], k=3)
    assert top.shape == (12, 3, 3)
    assert set(top.ravel().tolist()) <= NAMES | {""}
    assert as_lists(top[:, 0]) == y[:12]
    assert clf.score(X, y) == pytest.approx(1.0)
    assert hierarchical_f1_score(y, clf.predict(X), tree=clf.tree_) == pytest.approx(1.0)
    assert hierarchical_f1_score(y, clf.predict_labels(X), tree=clf.tree_) == pytest.approx(1.0)
    assert make_hierarchical_scorer(hierarchical_f1_score)(clf, X, y) == pytest.approx(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no mistakes: their severity is undefined
        assert "level 2" in hierarchical_classification_report(y, clf.predict(X), tree=clf.tree_)
    # A wrong answer is wrong only where it is: Clothing > Accessories against Electronics > Accessories.
    true, pred, _ = check_paths([["Electronics", "Accessories"]], [["Clothing", "Accessories"]], clf.tree_)
    assert true.tolist()[0][:2] != pred.tolist()[0][:2] and true[0, 1] != pred[0, 1]
    assert hierarchical_f1_score([["Electronics", "Accessories"]], [["Clothing", "Accessories"]],
                                 tree=clf.tree_) == 0.0


def test_repeated_names_save_load_and_pickle(paths_model, data, tmp_path):
    pytest.importorskip("safetensors")
    from hiclass_parallel.estimators import load_classifier, save_classifier

    X, _ = data
    clf = paths_model
    save_classifier(clf, tmp_path / "model")
    loaded = load_classifier(tmp_path / "model")
    assert loaded.tree_ == clf.tree_ and loaded.tree_.names.tolist() == clf.tree_.names.tolist()
    assert (loaded.predict(X) == clf.predict(X)).all()
    assert loaded.predict_labels(X[:3]).tolist() == clf.predict_labels(X[:3]).tolist()
    assert loaded.classes_.tolist() == clf.classes_.tolist()
    again = pickle.loads(pickle.dumps(clf))
    assert (again.predict(X) == clf.predict(X)).all()


def test_ambiguous_and_unknown_names_are_named_errors(paths_model):
    tree = paths_model.tree_
    assert tree.to_ids(["Cables"]).tolist() == tree.to_ids([("Electronics", "Accessories", "Cables")]).tolist()
    with pytest.raises(UnknownLabelError, match=r"'Accessories' is the name of 2 classes \('Electronics > Accessories', "
                                                r"'Clothing > Accessories'\)"):
        tree.to_ids(["Accessories"])
    # Metrics refuse classes the tree lacks only when asked to (unknown="raise")...
    with pytest.raises(ValueError, match=r"row 0 is \['Clothing', 'Cables'\], but there is no 'Cables' under Clothing"):
        hierarchical_f1_score([["Clothing", "Cables"]], [["Clothing", "Tops"]], tree=tree, unknown="raise")
    with pytest.raises(UnknownLabelError, match="'Shoes'"):
        hierarchical_f1_score([["Clothing", "Shoes"]], [["Clothing", "Tops"]], tree=tree, unknown="raise")
    # ...by default "Cables" under Clothing is a class of its own, a miss under a known Clothing.
    with pytest.warns(UnknownClassWarning, match=r"1 of 1 rows of y_true \(e.g. \['Clothing', 'Shoes'\]\)"):
        assert hierarchical_f1_score([["Clothing", "Shoes"]], [["Clothing", "Tops"]], tree=tree) == 0.5
    with pytest.warns(UnknownClassWarning, match="1 of 1 rows of y "):
        paths_model.score(np.zeros((1, 6), dtype=np.float32), [["Clothing", "Cables"]])


# ---------------------------------------------------------------------------- path strings
def test_path_strings_with_path_sep(strings_model, paths_model, data):
    X, y = data
    clf = strings_model
    strings = ["/".join(p) for p in y]
    assert clf.classes_.tolist()[:3] == ["Electronics", "Electronics/Accessories", "Electronics/Accessories/Cables"]
    predicted = clf.predict(X)
    assert predicted.shape == (len(y),) and predicted.tolist() == strings  # the user's form: 1-D strings
    assert clf.predict_labels(X).tolist() == strings
    top = clf.predict_top_k(X[:5], k=2)
    assert top.shape == (5, 2) and top[:, 0].tolist() == strings[:5]
    assert clf.score(X, strings) == pytest.approx(1.0)
    assert hierarchical_f1_score(strings, predicted, tree=clf.tree_) == pytest.approx(1.0)
    # The same model as from the lists of names: same tree, same weights, same answers.
    assert (clf.tree_.parents == paths_model.tree_.parents).all()
    assert (clf.predict_node(X) == paths_model.predict_node(X)).all()
    np.testing.assert_array_equal(clf.predict_proba(X), paths_model.predict_proba(X))


def test_path_strings_save_load(strings_model, data, tmp_path):
    pytest.importorskip("safetensors")
    from hiclass_parallel.estimators import load_classifier, save_classifier

    X, _ = data
    save_classifier(strings_model, tmp_path / "model")
    loaded = load_classifier(tmp_path / "model")
    assert loaded.path_sep == "/"
    assert loaded.predict(X).tolist() == strings_model.predict(X).tolist()


def test_path_sep_with_a_given_tree_reads_and_answers_path_strings(data):
    X, y = data
    tree = Tree.from_paths(y)  # labels: paths of names (tuples)
    strings = [" > ".join(p) for p in y]
    clf = fit(strings, X, tree=tree, path_sep=" > ")
    assert clf.predict(X[:2]).tolist() == strings[:2]
    assert clf.classes_.tolist() == tree.labels.tolist()


@pytest.mark.parametrize("sep, labels", [
    ("/", ["Electronics/Accessories/Cables", "Clothing/Tops", "Clothing/Other", "Books"]),
    (" > ", ["Electronics > Cables", "Clothing > Tops", "Books > Novels"]),
    ("|", ["a|b", "a|c", "d"]),
])
def test_labels_that_look_like_paths_warn_when_the_tree_is_flat(sep, labels):
    X = np.eye(len(labels), dtype=np.float32)
    with pytest.warns(UserWarning, match=rf"paths separated by '{sep}'.*path_sep='{sep}'"):
        HierarchicalClassifier(max_epochs=1, random_state=0).fit(X, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HierarchicalClassifier(max_epochs=1, path_sep=sep, random_state=0).fit(X, labels)
        HierarchicalClassifier(max_epochs=1, random_state=0).fit(X, ["cat", "dog", "TV/Video", "cow"][: len(labels)])
    with pytest.raises(ValueError, match=rf"pass path_sep='{sep}'"):
        PathEncoder().fit(labels)


def test_path_sep_refuses_non_strings_and_is_checked():
    X = np.eye(2, dtype=np.float32)
    with pytest.raises(ValueError, match=r"path_sep='/' reads each label as a path string, but the labels of rows 1"):
        HierarchicalClassifier(max_epochs=1, path_sep="/").fit(X, np.array(["a/b", 3], dtype=object))
    with pytest.raises(ValueError, match="path_sep"):
        HierarchicalClassifier(max_epochs=1, path_sep=3).fit(X, ["a/b", "a/c"])
    with pytest.raises(TreeError, match="has an empty name"):
        HierarchicalClassifier(max_epochs=1, path_sep="/").fit(X, ["a/b", "a/"])
    with pytest.raises(ValueError, match="path_sep is for HierarchicalClassifier"):
        MultiLabelHierarchicalClassifier(Tree.from_paths([["a", "b"]]), path_sep="/", max_epochs=1).fit(X, [["b"], ["a"]])


# ---------------------------------------------------------------------------- forms of y
def test_dataframe_series_and_ragged_lists_give_the_same_model():
    pd = pytest.importorskip("pandas")
    X, y = taxonomy_data(per_class=4)
    width = max(map(len, y))
    padded = [p + [None] * (width - len(p)) for p in y]
    forms = {
        "ragged lists": (y, None),
        "DataFrame (None)": (pd.DataFrame(padded, columns=["l0", "l1", "l2"], dtype=object), None),
        "DataFrame (NaN)": (pd.DataFrame(padded, columns=["l0", "l1", "l2"]).fillna(np.nan), None),
        "Series of lists": (pd.Series(y), None),
        "Series of path strings": (pd.Series(["/".join(p) for p in y]), "/"),
    }
    models = {name: HierarchicalClassifier(max_epochs=3, random_state=0, path_sep=sep).fit(X, yy)
              for name, (yy, sep) in forms.items()}
    reference = models.pop("ragged lists")
    for name, clf in models.items():
        assert (clf.tree_.parents == reference.tree_.parents).all(), name
        assert clf.tree_.names.tolist() == reference.tree_.names.tolist(), name
        np.testing.assert_array_equal(clf.predict_proba(X), reference.predict_proba(X), err_msg=name)
        answers = clf.predict(X)
        expected = reference.predict(X)
        if clf.path_sep:
            expected = np.array(["/".join(p) for p in as_lists(expected)], dtype=object)
        assert answers.tolist() == expected.tolist(), name


def test_dataframe_with_pandas_na():
    pd = pytest.importorskip("pandas")
    y = pd.DataFrame({"l0": ["A", "A", "B"], "l1": ["x", pd.NA, "x"]}, dtype="string")
    encoder = PathEncoder().fit(y)
    assert encoder.tree_.names.tolist() == ["A", "x", "B", "x"]
    assert encoder.transform(y).tolist() == [[0, 1], [0, -1], [2, 3]]


# ---------------------------------------------------------------------------- PathEncoder, Tree
def test_path_encoder_repeated_names_and_path_strings():
    encoder = PathEncoder().fit(PATHS)
    ids = encoder.transform(PATHS)
    assert encoder.inverse_transform(ids).tolist() == [tuple(p) for p in PATHS]
    assert encoder.transform([["Clothing", "Other"]]).tolist() == [[5, 8, -1]]
    strings = ["/".join(p) for p in PATHS]
    encoder = PathEncoder(path_sep="/").fit(strings)
    assert (encoder.transform(strings) == ids).all()
    assert encoder.inverse_transform(ids).tolist() == strings
    assert (encoder.transform(PATHS) == ids).all()  # lists of names read too


def test_tree_from_paths_with_sep_matches_lists():
    strings = ["/".join(p) for p in PATHS]
    by_strings = Tree.from_paths(strings, sep="/")
    by_lists = Tree.from_paths(PATHS)
    assert (by_strings.parents == by_lists.parents).all()
    assert by_strings.names.tolist() == by_lists.names.tolist()
    assert by_strings.labels.tolist()[4] == "Electronics/Other"
    assert by_lists.labels.tolist()[4] == ("Electronics", "Other")
    assert Tree.from_paths(["a > b", "a > c"], sep=" > ").labels.tolist() == ["a", "a > b", "a > c"]
    # no repeated name, no sep: labels are the names, as before
    assert Tree.from_paths([["a", "b"], ["a", "c"]]).labels.tolist() == ["a", "b", "c"]
    assert not Tree.from_paths([["a", "b"]]).has_names


def test_tree_with_names_saves_and_loads(tmp_path):
    for tree in (Tree.from_paths(PATHS), Tree.from_paths(["/".join(p) for p in PATHS], sep="/"),
                 Tree.from_paths([[1, 2], [3, 2]])):
        tree.save(tmp_path / "tree.npz")
        loaded = Tree.load(tmp_path / "tree.npz")
        assert loaded == tree
        assert loaded.names.tolist() == tree.names.tolist() and loaded.labels.tolist() == tree.labels.tolist()
    assert Tree.from_paths([["a"]]) != Tree.from_parents([-1], labels=["a"], names=["b"])
    clothing = Tree.from_paths(PATHS).subtree(("Clothing",))  # still labelled by paths of names
    assert clothing.labels.tolist() == [("Clothing",), ("Clothing", "Accessories"), ("Clothing", "Tops"),
                                        ("Clothing", "Other")]
    clothing.save(tmp_path / "clothing.npz")
    assert Tree.load(tmp_path / "clothing.npz") == clothing


def test_from_edges_repeated_name_points_to_from_paths():
    with pytest.raises(TreeError, match=r"two classes that share the name 'Accessories'.*Tree\.from_paths.*Dag"):
        Tree.from_edges([("Accessories", "Electronics"), ("Accessories", "Clothing")])


def test_a_streamed_dataset_of_path_strings(data):
    X, y = data
    tree = Tree.from_paths(y)  # labelled by paths of names: the path strings are split and walked
    strings = [" > ".join(p) for p in y]
    params = dict(tree=tree, path_sep=" > ", max_epochs=3, random_state=0, prototypes=None)
    streamed = HierarchicalClassifier(**params).fit(Pairs(X, strings))
    arrays = HierarchicalClassifier(**params).fit(X, strings)
    assert streamed.predict(X[:3]).tolist() == arrays.predict(X[:3]).tolist()
