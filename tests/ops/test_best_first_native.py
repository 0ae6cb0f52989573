"""The C search of best-first decoding (ops/engine/_best_first.c) equals exhaustive decoding, ties included."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import BEST_FIRST_OPTIONS as OPTIONS
from support import assert_same_paths, complete_tree

from hiclass_parallel.ops import best_paths, topk_paths
from hiclass_parallel.ops.engine import _native_best_first
from hiclass_parallel.ops.best_first import best_first_paths
from hiclass_parallel.ops.groups import n_outputs
from hiclass_parallel.ops.sibling_paths import LinearScores, sibling_plan

pytestmark = pytest.mark.skipif(
    not _native_best_first.available(),
    reason="the optional C search was not built (no C compiler at install time) or HICLASS_PARALLEL_NATIVE=0",
)


def _layer(rng, kind, n_rows, n_out, dtype):
    """Hidden rows and a linear layer; ``x = h @ weight.T + bias`` is what the exhaustive route decodes."""
    width = 6
    if kind == "normal":
        h, weight, bias = rng.normal(size=(n_rows, width)), rng.normal(size=(n_out, width)), rng.normal(size=n_out)
    else:  # small integers: every score is exact on both routes, and many candidates tie exactly
        h = rng.integers(-1, 2, size=(n_rows, width))
        weight, bias = rng.integers(-1, 2, size=(n_out, width)), rng.integers(-2, 3, size=n_out)
        if kind == "flat":  # every column of a group equal: each path ties with its equal-sized rivals
            weight, bias = np.zeros_like(weight), np.zeros_like(bias)
    h, weight, bias = (torch.as_tensor(a, dtype=dtype) for a in (h, weight, bias))
    if kind == "neginf":  # masked columns: probability 0
        bias[torch.as_tensor(rng.random(n_out) < 0.2)] = -torch.inf
    return h, weight, bias


def _calls(monkeypatch):
    """Count the calls of the C search."""
    calls = []
    real = _native_best_first.search
    monkeypatch.setattr(_native_best_first, "search", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 60), option=st.sampled_from(OPTIONS),
       kind=st.sampled_from(["normal", "integers", "flat", "neginf"]), k=st.sampled_from([None, 1, 3]),
       budget=st.sampled_from([None, 1, 8]), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_c_search_equals_exhaustive(seed, n, option, kind, k, budget, dtype, random_tree):
    stop, semantics = option
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n, max_top=4)
    if k is not None:
        k = min(k, n if semantics == "terminal" else int(tree.is_leaf.sum()))
    h, weight, bias = _layer(rng, kind, 7, n_outputs(tree, "sibling", stop), dtype)
    x = torch.addmm(bias, h, weight.t())
    if k is None:
        expected, expected_lp = best_paths(x, tree, "sibling", stop, semantics)
    else:
        expected, expected_lp = topk_paths(x, tree, k, "sibling", stop, semantics)
    paths, log_prob = best_first_paths(LinearScores(h, weight, bias), 7, tree, stop, semantics, k=k,
                                       max_columns=budget)
    assert log_prob.dtype == dtype
    if kind == "flat":  # exact ties only: the lowest-id rule decides, identically
        assert torch.equal(paths, expected)
    assert_same_paths(paths, log_prob, expected, expected_lp, x, tree, stop, semantics)
    # and the batched torch search (a plain score function) agrees with the C one
    torch_paths, torch_lp = best_first_paths(lambda r, c: x[r, c], 7, tree, stop, semantics, k=k, max_columns=budget)
    assert_same_paths(paths, log_prob, torch_paths, torch_lp, x, tree, stop, semantics)


def test_linear_scores_take_the_c_search(monkeypatch, random_tree):
    tree = random_tree(0, 30)
    h, weight, bias = _layer(np.random.default_rng(0), "normal", 4, n_outputs(tree, "sibling", True), torch.float32)
    calls = _calls(monkeypatch)
    best_first_paths(LinearScores(h, weight, bias), 4, tree, True, "terminal")
    assert len(calls) == 1
    # float16 is not the kernel's: the torch search runs, still exact (small integer scores)
    h, weight, bias = _layer(np.random.default_rng(0), "integers", 4, n_outputs(tree, "sibling", True), torch.float16)
    paths, _ = best_first_paths(LinearScores(h, weight, bias), 4, tree, True, "terminal")
    assert len(calls) == 1
    expected, _ = best_paths(torch.addmm(bias, h, weight.t()).float(), tree, "sibling", True, "terminal")
    assert torch.equal(paths, expected)


def test_rows_are_split_over_threads(random_tree):
    # more rows than one chunk (64) on two threads: every chunk lands in its own rows
    tree = random_tree(1, 200, max_top=5)
    rng = np.random.default_rng(1)
    h, weight, bias = _layer(rng, "normal", 300, n_outputs(tree, "sibling", True), torch.float32)
    h = h * 3
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        paths, log_prob, work = best_first_paths(LinearScores(h, weight, bias), 300, tree, True, "terminal",
                                                 return_work=True)
    finally:
        torch.set_num_threads(threads)
    x = torch.addmm(bias, h, weight.t())
    expected, expected_lp = best_paths(x, tree, "sibling", True, "terminal")
    assert_same_paths(paths, log_prob, expected, expected_lp, x, tree, True, "terminal")
    assert (work > 0).all()


def test_confident_rows_score_a_few_groups():
    # a complete 4-ary tree of depth 6 (5,460 nodes); scores of a wide spread (confident rows)
    tree = complete_tree(4, 6)
    rng = np.random.default_rng(2)
    C = tree.n_classes
    h = torch.as_tensor(rng.normal(size=(16, 8)), dtype=torch.float32)
    weight = torch.as_tensor(rng.normal(size=(C, 8)) * 2, dtype=torch.float32)
    bias = torch.zeros(C)
    paths, _, work = best_first_paths(LinearScores(h, weight, bias), 16, tree, return_work=True)
    assert torch.equal(paths, best_paths(torch.addmm(bias, h, weight.t()), tree, "sibling")[0])
    assert int(work.max()) < C // 10  # a few groups of 4, not 5,460 columns


def test_undecidable_rows_get_the_exhaustive_result(random_tree):
    tree = random_tree(3, 30)
    n_out = n_outputs(tree, "sibling", True)
    h, weight, bias = _layer(np.random.default_rng(3), "normal", 4, n_out, torch.float32)
    h[1, 0] = float("nan")  # a NaN hidden value reaches every column
    bias[int(np.flatnonzero(tree.depth == 0)[0])] = float("inf")  # +inf in group 0: every row
    x = torch.addmm(bias, h, weight.t())
    for k in (None, 2):
        paths, log_prob = best_first_paths(LinearScores(h, weight, bias), 4, tree, True, "terminal", k=k)
        expected = (best_paths(x, tree, "sibling", True, "terminal") if k is None
                    else topk_paths(x, tree, k, "sibling", True, "terminal"))[0]
        assert torch.equal(paths, expected) and (paths == -1).all()
        assert torch.isnan(log_prob).all()


def test_budget_falls_back_to_exhaustive_and_counts_it(paper_tree):
    h, weight, bias = torch.ones(2, 3), torch.zeros(9, 3), torch.zeros(9)
    paths, _, work = best_first_paths(LinearScores(h, weight, bias), 2, paper_tree, max_columns=1,
                                      return_work=True)
    assert (work >= 9).all()
    assert torch.equal(paths, best_paths(torch.zeros(2, 9), paper_tree, "sibling")[0])


def test_a_layer_of_the_wrong_size_is_named(paper_tree):
    plan = sibling_plan(paper_tree, False)
    with pytest.raises(ValueError, match=r"weight \(8, 3\).*needs \(9, 3\)"):
        _native_best_first.search(np.ones((2, 3), np.float32), np.ones((8, 3), np.float32), np.ones(8, np.float32),
                                  plan, 1, False, 100)
    with pytest.raises(TypeError, match="float32 or float64"):
        _native_best_first.search(np.ones((2, 3), np.float16), np.ones((9, 3), np.float16), np.ones(9, np.float16),
                                  plan, 1, False, 100)
