"""Streaming and out-of-core training: torch data sets in fit, sparse chunks in partial_fit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch.utils.data import IterableDataset
from support import Pairs

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier

pytestmark = pytest.mark.scale_out


class Stream(IterableDataset):
    def __init__(self, X, y):
        self.X, self.y = X, y

    def __iter__(self):
        for x, label in zip(self.X, self.y):
            yield torch.from_numpy(x), label


@pytest.fixture(scope="module")
def data():
    X, y, tree = make_hierarchical_classification(n_samples=240, n_features=6, branching=3, depth=3,
                                                  truncate_fraction=0.3, random_state=0)
    return X.astype(np.float32), y, tree


def test_a_map_style_dataset_trains_exactly_as_arrays(data, one_torch_thread):
    X, y, tree = data
    params = dict(max_epochs=3, batch_size=32, random_state=0, prototypes=None)  # a stream keeps no prototypes
    arrays = HierarchicalClassifier(tree, **params).fit(X, y)
    streamed = HierarchicalClassifier(tree, **params).fit(Pairs(X, y))
    np.testing.assert_allclose(streamed.decision_function(X), arrays.decision_function(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(streamed.predict(X), arrays.predict(X))
    # A validation split works on a map-style data set (it has a length).
    HierarchicalClassifier(tree, max_epochs=2, early_stopping=True, random_state=0).fit(Pairs(X, y))


def test_an_iterable_dataset_with_labels_and_label_paths_at_any_depth(data, one_torch_thread):
    X, y, tree = data
    depth = tree.depth[tree.to_ids(y)]
    assert len(set(depth.tolist())) > 1  # labels at several depths
    clf = HierarchicalClassifier(tree, max_epochs=8, batch_size=32, random_state=0).fit(Stream(X, y))
    assert clf.score(X, y) > 0.5
    paths = [tree.path_labels(label) for label in y]  # ragged label paths, top level down
    clf.partial_fit(Stream(X, paths))
    assert clf.predict(X).shape == (len(X), tree.n_levels)
    assert clf.net_.iterator_train__shuffle is True  # array training is untouched afterwards
    clf.partial_fit(X, y)


def test_stream_errors_are_clear(data):
    X, y, tree = data
    with pytest.raises(ValueError, match=r"early_stopping=True needs a validation split.*IterableDataset"):
        HierarchicalClassifier(tree, early_stopping=True).fit(Stream(X, y))
    with pytest.raises(ValueError, match=r"train_split needs a validation split"):
        HierarchicalClassifier(tree, train_split=lambda ds, y=None: (ds, ds)).fit(Stream(X, y))
    with pytest.raises(ValueError, match="y must be None"):
        HierarchicalClassifier(tree).fit(Pairs(X, y), y)
    with pytest.raises(ValueError, match=r"needs the tree \(tree=...\)"):
        HierarchicalClassifier().fit(Stream(X, y))
    with pytest.raises(ValueError, match="empty"):
        HierarchicalClassifier(tree).fit(Stream(X[:0], y[:0]))
    with pytest.raises(Exception, match="not-a-class"):
        HierarchicalClassifier(tree, max_epochs=1).fit(Stream(X, np.where(np.arange(len(y)) == 5, "not-a-class", y)))


def test_partial_fit_over_chunks_of_a_sparse_matrix(one_torch_thread):
    X, y, tree = make_hierarchical_classification(n_samples=2000, n_features=50, branching=3, depth=2,
                                                  random_state=1)
    X = sp.csr_matrix(np.where(X > 0.5, X, 0.0))
    clf = HierarchicalClassifier(tree, random_state=0, module__hidden_units=32)
    for epoch in range(3):
        for start in range(0, X.shape[0], 500):  # chunks as a reader of a large file would give them
            clf.partial_fit(X[start:start + 500], y[start:start + 500])
    assert clf.path_local_
    assert clf.score(X, y) > 0.7
