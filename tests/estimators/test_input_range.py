"""Values outside float32's range: the network computes in float32, where a finite float64
such as 1e39 is ``inf``. Fit and predict name the value, its row and its column, on every
input route (dense, sparse, torch), instead of reporting a diverged training."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.estimators._checks import check_float32_range

ROUTES = {
    "dense": lambda X: X,
    "sparse": sp.csr_matrix,
    "tensor": torch.from_numpy,
    "sparse tensor": lambda X: torch.from_numpy(X).to_sparse(),
}


@pytest.fixture(scope="module")
def data():
    X, y, tree = make_hierarchical_classification(n_samples=200, n_features=6, branching=2, depth=2, random_state=0)
    return X.astype(np.float64), y, tree


@pytest.fixture(scope="module")
def fitted(data):
    X, y, tree = data
    return HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)


def _with(X, row, col, value):
    X = X.copy()
    X[row, col] = value
    return X


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("method", ["predict", "predict_proba", "predict_top_k", "decision_function"])
def test_predict_names_the_value_row_and_column_outside_float32(data, fitted, route, method):
    X, _, _ = data
    bad = ROUTES[route](_with(X[:6], 3, 4, 1e39))
    with pytest.raises(ValueError, match=r"X\[3, 4\] = 1e\+39 is outside the range of float32"):
        getattr(fitted, method)(bad, **({"k": 2} if method == "predict_top_k" else {}))
    # The model is healthy: its good rows still predict.
    assert fitted.predict(ROUTES[route](X[:3])).shape == (3, fitted.n_levels_)


@pytest.mark.parametrize("route", ["dense", "sparse"])
@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_fit_names_the_value_row_and_column_outside_float32(data, route, method):
    X, y, tree = data
    bad = ROUTES[route](_with(X, 7, 2, -2e39))
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0)
    with pytest.raises(ValueError, match=r"X\[7, 2\] = -2e\+39 is outside the range of float32"):
        getattr(clf, method)(bad, y)


def test_the_first_offending_entry_is_named_and_float32_input_passes_as_it_is():
    X = np.zeros((4, 5))
    X[2, 3], X[1, 4], X[3, 0] = 5e38, -1e300, 4e38
    for given in (X, sp.csr_matrix(X)):
        with pytest.raises(ValueError, match=r"X\[1, 4\] = -1e\+300"):
            check_float32_range(given)
    largest = np.full((2, 2), np.finfo(np.float32).max, dtype=np.float64)
    assert check_float32_range(largest) is largest
    single = np.ones((2, 2), dtype=np.float32)
    assert check_float32_range(single) is single
