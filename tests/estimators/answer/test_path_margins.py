"""The path-level linear term (``PathMargins``): one SVM fit per level is the one-vs-rest SVM
of every node, summed along a candidate's path, on trees with shuffled node ids."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.svm import LinearSVC
from support import complete_tree, shuffled_ids

from hiclass_parallel.estimators.answer import NO_TARGET_MARGIN, FlatMargins, PathMargins


def _data(seed: int = 0):
    """Sparse rows of a 3x3x2 tree with shuffled ids, labelled at any depth with a share of its
    nodes (so some nodes are on no training path), some rows unlabelled."""
    rng = np.random.default_rng(seed)
    tree = shuffled_ids(complete_tree(3, 3), rng)
    labelled = rng.choice(tree.n_classes, size=15, replace=False)
    ids = rng.choice(labelled, size=200)
    ids[rng.uniform(size=ids.size) < 0.1] = -1
    X = sp.random(200, 25, density=0.3, random_state=seed, format="csr", dtype=np.float32)
    X = sp.csr_matrix(X + sp.csr_matrix((np.ones(200, np.float32), (np.arange(200), np.maximum(ids, 0) % 25)),
                                        shape=X.shape))
    nodes = rng.integers(-1, tree.n_classes, size=(40, 7))
    return X, ids, tree, nodes


def _reference(X, ids, tree, nodes, binary_margin):
    """The exhaustive reference: one binary SVM per node (positive: the labelled rows whose
    target's path holds it), its margins summed over each candidate's path nodes."""
    paths = np.asarray(tree.paths)
    rows = ids >= 0
    on_path = paths[ids[rows]]
    margin = np.full((nodes.shape[0], tree.n_classes), NO_TARGET_MARGIN)
    for node in np.unique(on_path[on_path >= 0]):
        positive = (on_path == node).any(axis=1)
        margin[:, node] = 1.0 if positive.all() else binary_margin(X[rows], positive)
    score = np.zeros(nodes.shape)
    for i, j in np.ndindex(nodes.shape):
        if nodes[i, j] >= 0:
            path = paths[nodes[i, j]]
            score[i, j] = margin[i, path[path >= 0]].sum()
    return score


def test_one_fit_per_level_is_every_node_s_one_vs_rest_svm_summed_along_the_path():
    X, ids, tree, nodes = _data()
    term = PathMargins.fit(X, ids, tree, random_state=0)
    queries = X[:nodes.shape[0]]

    def svm(rows, positive):
        return LinearSVC(random_state=0).fit(rows, positive).decision_function(queries)

    expected = _reference(X, ids, tree, nodes, svm)
    np.testing.assert_allclose(term.score(queries, nodes), expected, rtol=1e-3, atol=1e-3)
    assert (term.score(queries, nodes)[nodes < 0] == 0).all()
    off_paths = ~np.isin(np.arange(tree.n_classes), np.asarray(tree.paths)[ids[ids >= 0]])
    assert off_paths.any()  # some candidates sit on no training path: their own margin is NO_TARGET_MARGIN


def test_dense_rows_fit_each_level_by_least_squares_as_each_node_alone():
    X, ids, tree, nodes = _data(seed=1)
    dense = X.toarray()
    term = PathMargins.fit(dense, ids, tree)
    queries = dense[:nodes.shape[0]]

    def least_squares(rows, positive):
        alone = FlatMargins.fit(rows, positive.astype(np.int64), n_classes=2)  # node (1) against the rest (0)
        return alone.score(queries, np.ones((queries.shape[0], 1), dtype=np.int64))[:, 0]

    np.testing.assert_allclose(term.score(queries, nodes), _reference(dense, ids, tree, nodes, least_squares),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_rows_fewer_than_their_features_solve_every_level_as_least_squares_at_once(weighted):
    """The dual route (fewer rows than features): one least-squares SVM per node, each fitted
    alone on dense rows (the primal), summed along the path; rows weighted or not."""
    X, ids, tree, nodes = _data(seed=3)
    wide = sp.hstack([X, sp.random(200, 400, density=0.02, random_state=3, format="csr", dtype=np.float32)],
                     format="csr")
    weight = np.random.default_rng(3).uniform(0.2, 3.0, size=200) if weighted else None
    from hiclass_parallel.estimators.answer._path_margins import least_squares_route

    assert least_squares_route(wide, int((ids >= 0).sum())) and not least_squares_route(X, int((ids >= 0).sum()))
    term = PathMargins.fit(wide, ids, tree, sample_weight=weight)
    queries = wide[:nodes.shape[0]]
    rows = ids >= 0

    def least_squares(rows_x, positive):
        alone = FlatMargins.fit(rows_x.toarray(), positive.astype(np.int64), n_classes=2,
                                sample_weight=None if weight is None else weight[rows])
        return alone.score(queries.toarray(), np.ones((queries.shape[0], 1), dtype=np.int64))[:, 0]

    np.testing.assert_allclose(term.score(queries, nodes), _reference(wide, ids, tree, nodes, least_squares),
                               rtol=1e-4, atol=1e-4)


def test_its_arrays_load_back_against_the_model_and_mismatches_are_named():
    X, ids, tree, nodes = _data(seed=2)
    term = PathMargins.fit(X, ids, tree, random_state=0)
    back = PathMargins.from_arrays(term.to_arrays(), tree, X.shape[1])
    np.testing.assert_array_equal(back.score(X[:40], nodes), term.score(X[:40], nodes))
    with pytest.raises(ValueError, match="coef must be float32 of shape"):
        PathMargins.from_arrays(term.to_arrays(), tree, X.shape[1] + 1)
    sparse_parts = FlatMargins.fit_on_candidates(X, ids, np.repeat(ids[:, None], 2, axis=1), tree.n_classes,
                                                 random_state=0).to_arrays()
    with pytest.raises(ValueError, match="weights are dense"):
        PathMargins.from_arrays(sparse_parts, tree, X.shape[1])


def test_rows_without_labels_are_refused_by_name():
    X, ids, tree, _ = _data()
    with pytest.raises(ValueError, match="labelled training rows"):
        PathMargins.fit(X, np.full_like(ids, -1), tree)


def test_the_svm_solver_fits_a_linear_svc_a_level_on_any_rows_and_an_unknown_one_is_named():
    X, ids, tree, nodes = _data(seed=4)
    wide = sp.hstack([X, sp.random(200, 400, density=0.02, random_state=4, format="csr", dtype=np.float32)],
                     format="csr")  # fewer rows than features: "auto" would solve the least squares
    term = PathMargins.fit(wide, ids, tree, random_state=0, solver="svm")
    queries = wide[:nodes.shape[0]]

    def svm(rows, positive):
        return LinearSVC(random_state=0).fit(rows, positive).decision_function(queries)

    np.testing.assert_allclose(term.score(queries, nodes), _reference(wide, ids, tree, nodes, svm), rtol=1e-3,
                               atol=1e-3)
    with pytest.raises(ValueError, match="solver must be 'auto', 'least_squares' or 'svm', got 'lbfgs'"):
        PathMargins.fit(wide, ids, tree, solver="lbfgs")
