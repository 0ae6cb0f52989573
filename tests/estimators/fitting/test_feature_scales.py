"""Dense features on very different scales are named by a warning at ``fit``.

Eight features of unit scale beside a year with a fraction (``1990 + u``): the default dense
network, initialised for inputs of unit scale, answers few held-out rows exactly, and as many
as without the year once the column is centred. ``fit`` says so, naming the column.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.exceptions import FeatureScaleWarning
from hiclass_parallel.metrics import exact_path_accuracy_score


def _with_a_year(n_samples=3000):
    X, y, tree = make_hierarchical_classification(n_samples=n_samples, n_features=8, random_state=4)
    year = 1990 + np.random.default_rng(0).random(X.shape[0])
    return np.column_stack([X, year]), y, tree


def test_a_year_beside_unit_features_is_named_and_hurts_the_network(one_torch_thread):
    X, y, tree = _with_a_year()
    train, test = slice(0, 2000), slice(2000, None)
    params = dict(max_epochs=4, random_state=0, prototypes=None)  # the network alone
    with pytest.warns(FeatureScaleWarning, match=r"column 8 \(1\.99e\+03\).*median root mean square of 1\.\d+ over "
                                                   r"the 9 columns.*StandardScaler"):
        raw = HierarchicalClassifier(tree, **params).fit(X[train], y[train])
    centred = X.copy()
    centred[:, 8] -= centred[:, 8].mean()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureScaleWarning)  # centred: no warning
        fixed = HierarchicalClassifier(tree, **params).fit(centred[train], y[train])
    score = lambda clf, Z: exact_path_accuracy_score(y[test], clf.predict(Z[test]), tree=tree)  # noqa: E731
    assert score(raw, X) + 0.15 < score(fixed, centred)  # what the warning is about


def test_the_warning_names_dataframe_columns_and_skips_sparse_and_well_scaled_input(one_torch_thread):
    pd = pytest.importorskip("pandas")
    X, y, tree = _with_a_year(300)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(8)] + ["year"])
    with pytest.warns(FeatureScaleWarning, match=r"'year' \(1\.99e\+03\)"):
        HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(frame, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureScaleWarning)
        HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(X[:, :8], y)  # unit scale
        HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(sp.csr_matrix(np.abs(X)), y)  # sparse
