"""Best-first decoding of the sibling partition equals exhaustive decoding, ties included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import BEST_FIRST_OPTIONS, assert_same_paths, complete_tree, sparse_rows

from hiclass_parallel.ops import best_paths, topk_paths
from hiclass_parallel.ops.best_first import best_first_paths
from hiclass_parallel.ops.groups import n_outputs

OPTIONS = BEST_FIRST_OPTIONS


def _scores(rng, kind, shape):
    if kind == "normal":
        return torch.as_tensor(rng.normal(size=shape) * 3, dtype=torch.float32)
    if kind == "integers":  # many exact ties
        return torch.as_tensor(rng.integers(-2, 3, size=shape), dtype=torch.float32)
    if kind == "zeros":  # every path ties with its equal-sized rivals
        return torch.zeros(shape)
    x = torch.as_tensor(rng.normal(size=shape), dtype=torch.float32)  # some -inf columns
    x[torch.as_tensor(rng.random(shape) < 0.2)] = -torch.inf
    return x


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 60), option=st.sampled_from(OPTIONS),
       kind=st.sampled_from(["normal", "integers", "zeros", "neginf"]), budget=st.sampled_from([None, 1, 8]))
def test_best_equals_exhaustive(seed, n, option, kind, budget, random_tree):
    stop, semantics = option
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n, max_top=4)
    x = _scores(rng, kind, (7, n_outputs(tree, "sibling", stop)))
    expected, expected_lp = best_paths(x, tree, "sibling", stop, semantics)
    paths, log_prob = best_first_paths(lambda r, c: x[r, c], 7, tree, stop, semantics, max_columns=budget)
    if kind in ("normal", "zeros"):  # no ties, or exact ties only: identical
        assert torch.equal(paths, expected)
    assert_same_paths(paths, log_prob, expected, expected_lp, x, tree, stop, semantics)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 50), option=st.sampled_from(OPTIONS),
       kind=st.sampled_from(["normal", "zeros"]), k=st.integers(1, 4))
def test_top_k_equals_exhaustive(seed, n, option, kind, k, random_tree):
    stop, semantics = option
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n, max_top=4)
    k = min(k, n if semantics == "terminal" else int(tree.is_leaf.sum()))
    x = _scores(rng, kind, (5, n_outputs(tree, "sibling", stop)))
    expected, expected_lp = topk_paths(x, tree, k, "sibling", stop, semantics)
    paths, log_prob = best_first_paths(lambda r, c: x[r, c], 5, tree, stop, semantics, k=k)
    assert_same_paths(paths, log_prob, expected, expected_lp, x, tree, stop, semantics)


def test_confident_scores_are_decoded_sublinearly():
    # a complete 4-ary tree of depth 6 (5,460 nodes); scores that favour one child per group
    tree = complete_tree(4, 6)
    rng = np.random.default_rng(1)
    x = torch.as_tensor(rng.normal(size=(16, tree.n_classes)) * 4, dtype=torch.float32)
    paths, _, work = best_first_paths(lambda r, c: x[r, c], 16, tree, return_work=True)
    assert torch.equal(paths, best_paths(x, tree, "sibling")[0])
    assert int(work.max()) < tree.n_classes // 10  # a few groups of 4, not 5,460 columns


def test_budget_falls_back_to_exhaustive_and_counts_it(paper_tree):
    x = torch.zeros(2, 9)
    _, _, work = best_first_paths(lambda r, c: x[r, c], 2, paper_tree, max_columns=1, return_work=True)
    assert (work >= 9).all()


def test_k_out_of_range_is_named(paper_tree):
    with pytest.raises(ValueError, match=r"k must be in \[1, 6\]"):
        best_first_paths(lambda r, c: torch.zeros(r.shape[0]), 1, paper_tree, k=7)
    with pytest.raises(ValueError, match="stop"):
        best_first_paths(lambda r, c: torch.zeros(r.shape[0]), 1, paper_tree, semantics="terminal")


def test_classifier_best_first_decoding_equals_exhaustive_decoding(random_tree):
    
    from hiclass_parallel.estimators import HierarchicalClassifier

    rng = np.random.default_rng(0)
    tree = random_tree(rng, 40)
    X = sparse_rows(200, 30, density=0.2, seed=0)
    y = rng.integers(0, 40, size=200)
    # no re-ranking term: the model's own decoding is compared
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=3, module__hidden_units=16, random_state=0,
                                 prototypes=None, flat_term=None, path_term=None)
    clf.fit(X, y)
    assert clf.partition_ == "sibling" and clf.path_local_
    scores = torch.as_tensor(clf.decision_function(X))
    expected, _ = best_paths(scores, tree, "sibling", True, "terminal")
    np.testing.assert_array_equal(clf._predict_ids(X), expected.numpy())
    top, top_lp = topk_paths(scores, tree, 3, "sibling", True, "terminal")
    labels, lp = clf.predict_top_k(X, 3, return_log_prob=True)
    np.testing.assert_allclose(lp, top_lp.numpy(), rtol=1e-5)


def test_hf1_decoding_backs_off_to_the_common_ancestor():
    from hiclass_parallel.ops import expected_hf1_paths

    paths = torch.tensor([[[0, 2, 5], [0, 2, 6], [0, 3, -1]], [[1, -1, -1], [0, -1, -1], [0, 2, -1]]])
    log_prob = torch.log(torch.tensor([[0.34, 0.33, 0.33], [0.9, 0.05, 0.05]]))
    chosen, value = expected_hf1_paths(paths, log_prob)
    assert chosen.tolist() == [[0, 2, -1], [1, -1, -1]]
    # row 0: 0.8 * 0.67 (prefix 0>2 against both deep rivals) + 0.5 * 0.33 (against 0>3)
    assert abs(float(value[0]) - (0.8 * 0.67 + 0.5 * 0.33)) < 1e-6
    assert abs(float(value[1]) - 0.9) < 1e-6


def test_undecidable_rows_get_the_exhaustive_result(random_tree):
    tree = random_tree(3, 30)
    x = torch.randn(4, n_outputs(tree, "sibling", True))
    top = np.flatnonzero(tree.depth == 0)  # group 0: scored by every search
    x[1, int(top[0])] = float("nan")
    x[2, int(top[-1])] = float("inf")
    for k in (None, 2):
        paths, log_prob = best_first_paths(lambda r, c: x[r, c], 4, tree, True, "terminal", k=k)
        if k is None:
            expected, expected_lp = best_paths(x, tree, "sibling", True, "terminal")
        else:
            expected, expected_lp = topk_paths(x, tree, k, "sibling", True, "terminal")
        assert torch.equal(paths, expected)
        assert torch.equal(torch.isnan(log_prob), torch.isnan(expected_lp))
        assert (paths[1] == -1).all() and (paths[2] == -1).all()
