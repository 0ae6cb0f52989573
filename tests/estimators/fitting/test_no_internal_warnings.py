"""Nothing internal reaches the user: no warning from the package's own models, and one warning,
in the user's terms, when labels mix leaves and internal nodes under ``semantics="partial"``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from hiclass_parallel.estimators import HierarchicalClassifier, make_pipeline


def _fit(y, **kw):
    X = [label.replace("/", " ") + f" w{i % 17}" for i, label in enumerate(y)]
    model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(path_sep="/", random_state=0, **kw))
    return model.fit(X, y)


def test_a_small_fit_with_many_classes_warns_nothing():
    # 300 rows, 200 classes: the flat term's LinearSVC sees more classes than half its rows,
    # which scikit-learn takes for a regression target and says so. A fixed weight fits the SVM
    # whatever its estimated cost.
    rng = np.random.default_rng(0)
    classes = [f"c{i // 5}/d{i}" for i in range(200)]
    y = [classes[i] for i in rng.integers(200, size=300)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = _fit(y, max_epochs=2, flat_term=1.0)
    assert model[-1].answer_.term("flat_term") is not None  # the LinearSVC was fitted


def test_labels_mixing_leaves_and_internal_nodes_say_so_once():
    y = ["food/fruit/apple", "food/fruit", "tools/saw", "tools/drill", "tools"] * 8
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(y, max_epochs=2)
    messages = [str(w.message) for w in caught if "internal nodes" in str(w.message)]
    assert len(messages) == 1
    assert messages[0].startswith("16 of 40 rows of y are labelled at internal nodes of the tree (e.g. 'food/fruit')")
    assert "semantics='terminal'" in messages[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fit(y, max_epochs=2, semantics="terminal")
    # Every label internal: the warning of that case, not the mixed one.
    from hiclass_parallel import Tree

    tree = Tree.from_paths([["food", "fruit", "apple"], ["tools", "saw"]])
    X = np.eye(2, dtype=np.float32)[[0, 1] * 10]
    with pytest.warns(UserWarning, match="every label in y is an internal node"):
        HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, ["fruit", "tools"] * 10)
