"""Each answer-model term's export module scores as the term does (``Term.export_module``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import complete_tree, shuffled_ids

from hiclass_parallel.estimators.answer import ClassPrototypes, FlatMargins, GaussianPrototypes, PathMargins, Term
from hiclass_parallel.estimators.answer._export_terms import (CosineScores, DenseMarginScores, GaussianScores,
                                                              PathMarginScores, SparseMarginScores)

KINDS = ["cosine", "gaussian", "flat_dense", "flat_dense_of_sparse_rows", "flat_sparse", "path", "path_dense"]
MODULES = {"cosine": CosineScores, "gaussian": GaussianScores, "flat_dense": DenseMarginScores,
           "flat_dense_of_sparse_rows": DenseMarginScores, "flat_sparse": SparseMarginScores,
           "path": PathMarginScores, "path_dense": PathMarginScores}


def _data(seed: int = 0):
    """Sparse non-negative rows (float32 CSR) of a 3x3x2 tree with shuffled node ids, labelled
    with a share of its nodes only (so the flat term has non-targets), some rows unlabelled,
    and candidates of every node id and ``-1``."""
    rng = np.random.default_rng(seed)
    tree = shuffled_ids(complete_tree(3, 3), rng)  # 39 nodes
    labelled = rng.choice(tree.n_classes, size=20, replace=False)
    ids = rng.choice(labelled, size=240)
    ids[rng.uniform(size=ids.size) < 0.1] = -1
    X = sp.random(240, 30, density=0.3, random_state=seed, format="csr", dtype=np.float32)
    X = sp.csr_matrix(X + sp.csr_matrix((np.ones(240, np.float32), (np.arange(240), np.maximum(ids, 0) % 30)),
                                        shape=X.shape))  # a class's rows share a feature
    nodes = rng.integers(-1, tree.n_classes, size=(50, 6))
    return X, ids, tree, nodes, rng


def _term(kind: str, X, ids, tree, rng):
    """A fitted term of ``kind`` and the rows it scores as it was fitted on them (sparse or dense)."""
    dense = X.toarray()
    if kind == "cosine":
        return ClassPrototypes.from_rows(X, ids, tree), X
    if kind == "gaussian":
        return GaussianPrototypes.from_rows(dense * 5.0 + 100.0, ids, tree), dense * 5.0 + 100.0  # far from zero
    if kind == "flat_dense":
        return FlatMargins.fit(dense, ids, tree.n_classes), dense
    if kind == "flat_dense_of_sparse_rows":
        return FlatMargins.fit(X, ids, tree.n_classes, random_state=0), X
    if kind == "path":
        return PathMargins.fit(X, ids, tree, random_state=0), X
    if kind == "path_dense":
        return PathMargins.fit(dense, ids, tree), dense
    rivals = np.where(ids[:, None] >= 0, rng.choice(np.unique(ids[ids >= 0]), size=(ids.size, 3)), -1)
    return FlatMargins.fit_on_candidates(X, ids, rivals, tree.n_classes, random_state=0), X


def _close(got: np.ndarray, expected: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("kind", KINDS)
def test_the_export_module_scores_as_the_term(kind):
    X, ids, tree, nodes, rng = _data()
    term, rows = _term(kind, X, ids, tree, rng)
    assert isinstance(term, Term)
    module = term.export_module()
    assert type(module) is MODULES[kind]
    assert not list(module.parameters()) and list(module.buffers())  # fitted arrays, never trained
    expected = term.score(rows[:50], nodes)
    dense = torch.from_numpy(np.asarray(rows[:50].toarray() if sp.issparse(rows) else rows[:50], dtype=np.float32))
    got = module(dense, torch.from_numpy(nodes))
    assert got.dtype == torch.float32 and got.shape == nodes.shape
    _close(got.numpy(), expected)
    if kind.startswith("flat"):  # every node that was no target, and -1, read the margin of none
        assert (~np.isin(nodes, ids[ids >= 0])).any()
    assert (nodes < 0).any()


@pytest.mark.parametrize("kind", KINDS)
def test_the_export_module_is_traced_by_torch_export(kind):
    if not hasattr(torch, "export") or not hasattr(torch.export, "export"):
        pytest.skip("torch.export is unavailable in this torch")
    X, ids, tree, nodes, rng = _data(seed=1)
    term, rows = _term(kind, X, ids, tree, rng)
    dense = np.asarray(rows.toarray() if sp.issparse(rows) else rows, dtype=np.float32)
    batch = torch.export.Dim("batch", min=1)
    program = torch.export.export(term.export_module(), (torch.from_numpy(dense[:4]), torch.from_numpy(nodes[:4])),
                                  dynamic_shapes={"X": {0: batch}, "nodes": {0: batch}})
    got = program.module()(torch.from_numpy(dense[:37]), torch.from_numpy(nodes[:37]))  # another batch size
    _close(got.numpy(), term.score(rows[:37], nodes[:37]))

