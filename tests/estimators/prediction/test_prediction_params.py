"""Settings prediction reads, changed after fit with ``set_params``: held to the constructor's
constraints where prediction reads them (an unknown ``decoding`` no longer predicts as
"best", a negative or NaN ``prototypes`` no longer switches the re-ranking off), and good
values still predict."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from hiclass_parallel.dag import Dag
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier, MultiLabelHierarchicalClassifier

BAD = [
    ("decoding", "HF1"),
    ("prototypes", -5),
    ("prototypes", float("nan")),
    ("prototypes", float("inf")),
    ("prototypes", "bogus"),
    ("prototypes", True),
    ("prototype_candidates", 0),
    ("top_k", 0),
    ("threshold", 2.0),
    ("semantics", "Terminal"),
    ("batch_size", 0),
]

GOOD = [
    ("decoding", "hf1"),
    ("decoding", "threshold"),
    ("prototypes", 3),
    ("prototypes", 0.0),
    ("prototypes", None),
    ("prototype_candidates", 2),
    ("top_k", 2),
    ("threshold", 0.0),
    ("batch_size", -1),
]


@pytest.fixture(scope="module")
def data():
    return make_hierarchical_classification(n_samples=200, n_features=6, branching=2, depth=2, random_state=0)


@pytest.fixture(scope="module")
def fitted(data):
    X, y, tree = data
    return HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)


def _entry_points(clf, X, y):
    return {
        "predict": lambda: clf.predict(X),
        "predict_top_k": lambda: clf.predict_top_k(X, k=2),
        "predict_proba": lambda: clf.predict_proba(X),
        "predict_confidence": lambda: clf.predict_confidence(X),
        "score": lambda: clf.score(X, y),
    }


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_a_bad_setting_after_fit_is_refused_at_prediction_as_in_the_constructor(data, fitted, name, value):
    X, y, tree = data
    with pytest.raises(InvalidParameterError, match=f"'{name}' parameter"):
        HierarchicalClassifier(tree, **{name: value}).fit(X, y)
    old = fitted.get_params()[name]
    fitted.set_params(**{name: value})
    try:
        for entry, call in _entry_points(fitted, X[:5], y[:5]).items():
            with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of HierarchicalClassifier"):
                call()
                pytest.fail(f"{entry} accepted {name}={value!r}")
    finally:
        fitted.set_params(**{name: old})


@pytest.mark.parametrize(("name", "value"), GOOD, ids=[f"{n}={v!r}" for n, v in GOOD])
def test_a_good_setting_after_fit_still_predicts(data, fitted, name, value):
    X, y, _ = data
    old = fitted.get_params()[name]
    fitted.set_params(**{name: value})
    try:
        for call in _entry_points(fitted, X[:5], y[:5]).values():
            call()
        assert fitted.predict(X[:5]).shape == (5, fitted.n_levels_)
    finally:
        fitted.set_params(**{name: old})


def test_the_weight_set_after_fit_is_the_weight_used(data, fitted):
    X, _, _ = data
    old = fitted.prototypes
    try:
        by_int = fitted.set_params(prototypes=3).predict_node(X)
        by_float = fitted.set_params(prototypes=3.0).predict_node(X)
    finally:
        fitted.set_params(prototypes=old)
    np.testing.assert_array_equal(by_int, by_float)


def test_the_multi_label_classifier_checks_its_prediction_settings():
    dag = Dag.from_edges([("dog", "pet"), ("dog", "canine"), ("cat", "pet"), ("wolf", "canine")])
    X = np.repeat(np.eye(3), 10, axis=0)
    y = [["dog"]] * 10 + [["cat", "wolf"]] * 10 + [["pet"]] * 10
    clf = MultiLabelHierarchicalClassifier(dag, max_epochs=1, random_state=0).fit(X, y)
    for name, value in [("threshold", -0.5), ("top_k", 0), ("semantics", "bogus")]:
        old = clf.get_params()[name]
        clf.set_params(**{name: value})
        with pytest.raises(InvalidParameterError, match=f"'{name}' parameter of MultiLabelHierarchicalClassifier"):
            clf.predict(X[:2])
        with pytest.raises(InvalidParameterError, match=f"'{name}' parameter"):
            clf.predict_proba(X[:2])
        clf.set_params(**{name: old})
    assert len(clf.predict(X[:2])) == 2
