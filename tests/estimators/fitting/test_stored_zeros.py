"""Stored zeros of a sparse ``X`` do not change training, and the user's matrix is not changed.

A CSR matrix may store entries whose value is 0 (``X.multiply(mask)``, values set to 0 in
place). They add nothing to a score, but a sparse gradient would hold their features' rows
and ``LazyAdam`` would move them; input dropout would draw a mask value for each.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.estimators.networks._data import TreeDataset, csr_rows


def _with_stored_zeros():
    X, y, tree = make_hierarchical_classification(n_samples=300, n_features=30, branching=3, depth=2, random_state=0)
    X = sp.csr_matrix(np.abs(X).astype(np.float32))
    X.data[np.random.default_rng(0).random(X.nnz) < 0.5] = 0.0  # half the entries stored as zeros
    return X, y, tree


@pytest.mark.parametrize("params", [
    {"training": "full"},  # every score, LazyAdam over the input rows touched
    {"module__input_dropout": 0.3, "softmax_sample": None},  # path-local on torch, dropout on the values
    {},  # the default: the fused step
], ids=["full", "input-dropout", "default"])
def test_stored_zeros_train_the_model_of_the_matrix_without_them(params, one_torch_thread):
    X, y, tree = _with_stored_zeros()
    before = (X.data.copy(), X.indices.copy(), X.indptr.copy())
    clean = X.copy()
    clean.eliminate_zeros()
    assert clean.nnz < X.nnz
    common = dict(max_epochs=3, random_state=0, module__hidden_units=16, **params)
    with_zeros = HierarchicalClassifier(tree, **common).fit(X, y)
    without = HierarchicalClassifier(tree, **common).fit(clean, y)
    for a, b in zip(with_zeros.net_.module_.parameters(), without.net_.module_.parameters()):
        assert torch.equal(a, b)
    np.testing.assert_array_equal(with_zeros.decision_function(X), without.decision_function(clean))
    # the user's matrix is as it was: its zeros still stored
    for got, want in zip((X.data, X.indices, X.indptr), before):
        np.testing.assert_array_equal(got, want)


def test_a_batch_leaves_out_the_stored_zeros_of_its_rows():
    X = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 0, 0], [3, 4, 0]], dtype=np.float32))
    X.data[[1, 2]] = 0.0  # row 0 keeps 1 (column 0), row 2 keeps 4 (column 1)
    dataset = TreeDataset(X, np.zeros(3, dtype=np.int64), sparse_batches=True)
    assert dataset.skip_zeros
    batch, _ = dataset.__getitems__([2, 1, 0])
    assert batch.crow_indices().tolist() == [0, 1, 1, 2]
    assert batch.col_indices().tolist() == [1, 0] and batch.values().tolist() == [4.0, 1.0]
    np.testing.assert_array_equal(batch.to_dense().numpy(), X[[2, 1, 0]].toarray())
    assert csr_rows(X, np.array([0, 2])).values().numel() == 4  # kept when asked to keep them
    assert csr_rows(X.tocsc(), np.array([0, 2]), skip_zeros=True).values().tolist() == [1.0, 4.0]
    assert X.nnz == 4
