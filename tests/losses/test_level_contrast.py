"""The in-batch level softmax term of path-local training (``level_contrast``) against a
brute-force reference written from its definition, on random trees with shuffled ids."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import random_dag

from hiclass_parallel.estimators import SparseMLP
from hiclass_parallel.losses import (
    DagCrossEntropy,
    PathLocalCrossEntropy,
    in_batch_level_loss,
)
from hiclass_parallel.ops.groups import n_outputs
from hiclass_parallel.ops.sibling_paths import LinearScores, score_matrix


def reference(scores: torch.Tensor, target: torch.Tensor, tree) -> tuple[torch.Tensor, int]:
    """Per-sample sums and row count, one (sample, depth) row at a time."""
    paths = np.asarray(tree.paths)
    labelled = [b for b in range(target.shape[0]) if int(target[b]) >= 0]
    per_sample = [scores.sum() * 0 for _ in range(target.shape[0])]  # zero, in the graph
    rows = 0
    for b in labelled:
        for d, node in enumerate(paths[int(target[b])]):
            if node < 0:
                break
            candidates = sorted({int(paths[int(target[o]), d]) for o in labelled} - {-1})
            per_sample[b] = per_sample[b] + torch.logsumexp(scores[b, candidates], 0) - scores[b, int(node)]
            rows += 1
    return torch.stack(per_sample), rows


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), stop=st.booleans(), batch=st.integers(1, 8))
def test_in_batch_level_loss_and_gradient_equal_the_reference(seed, n, stop, batch, random_tree):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)  # shuffled node ids
    scores = torch.as_tensor(rng.normal(size=(batch, n_outputs(tree, "sibling", stop))) * 3).requires_grad_()
    target = torch.as_tensor(rng.integers(-1, n, size=batch))
    paths = torch.as_tensor(np.array(tree.paths), dtype=torch.int64)
    got, rows = in_batch_level_loss(lambda r, c: scores[r, c], target, paths)
    want, want_rows = reference(scores, target, tree)
    torch.testing.assert_close(got, want)
    assert int(rows) == want_rows
    (g_got,) = torch.autograd.grad(got.sum(), scores)
    (g_want,) = torch.autograd.grad(want.sum(), scores)
    torch.testing.assert_close(g_got, g_want)
    assert torch.isfinite(g_got).all()  # depths no target reaches give no NaN


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_criterion_adds_the_term_while_training_only(reduction, random_tree):
    rng = np.random.default_rng(3)
    tree = random_tree(rng, 25)
    scores = torch.as_tensor(rng.normal(size=(7, n_outputs(tree, "sibling", True))), dtype=torch.float64)
    target = torch.as_tensor(rng.integers(-1, 25, size=7))
    score = lambda r, c: scores[r, c]
    exact = PathLocalCrossEntropy(tree, True, reduction)(score, target)
    crit = PathLocalCrossEntropy(tree, True, reduction, level_contrast=0.5)
    per_sample, rows = reference(scores, target, tree)
    term = {"none": per_sample, "sum": per_sample.sum(), "mean": per_sample.sum() / max(rows, 1)}[reduction]
    torch.testing.assert_close(crit.train()(score, target), exact + 0.5 * term)
    torch.testing.assert_close(crit.eval()(score, target), exact)  # validation: the exact sibling loss


def test_score_matrix_routes_agree():
    torch.manual_seed(0)
    double = dict(dtype=torch.float64)
    h, weight, bias = torch.randn(5, 3, **double), torch.randn(9, 3, **double), torch.randn(9, **double)
    rows, cols = torch.tensor([4, 0, 2]), torch.tensor([8, 1, 5, 3])
    want = (h @ weight.T + bias)[rows][:, cols]
    linear = LinearScores(h, weight, bias)
    torch.testing.assert_close(score_matrix(linear, rows, cols), want)
    torch.testing.assert_close(score_matrix(lambda r, c: linear(r, c), rows, cols), want)  # pairs fallback
    net = SparseMLP(6, 9, hidden_units=4).double()
    X = torch.rand(5, 6, dtype=torch.float64)
    with torch.no_grad():
        full = net(X)
        torch.testing.assert_close(score_matrix(net.scorer(net.encode(X)), rows, cols), full[rows][:, cols])


def test_bad_level_contrast_is_named(paper_tree):
    for bad in (-0.1, float("nan"), True):
        with pytest.raises(ValueError, match="level_contrast"):
            PathLocalCrossEntropy(paper_tree, level_contrast=bad)


def test_sparse_mlp_scorer_reuses_its_scored_block_with_equal_loss_and_gradients(random_tree):
    rng = np.random.default_rng(4)
    tree = random_tree(rng, 30)
    torch.manual_seed(0)
    net = SparseMLP(12, n_outputs(tree, "sibling", True), hidden_units=8).double()
    X = torch.as_tensor(rng.random((9, 12)) * (rng.random((9, 12)) < 0.4))
    target = torch.as_tensor(rng.integers(-1, 30, size=9))
    crit = PathLocalCrossEntropy(tree, True, level_contrast=0.7)
    full = net(X)
    want = crit(lambda r, c: full[r, c], target)
    want.backward()
    expected = {name: p.grad.to_dense().clone() for name, p in net.named_parameters()}
    net.zero_grad()
    scorer = net.scorer(net.encode(X))
    got = crit(scorer, target)
    assert scorer._scored is not None  # the level term read the path-local block
    got.backward()
    torch.testing.assert_close(got, want)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad.to_dense(), expected[name], msg=name)


def dag_reference(scores: torch.Tensor, target: torch.Tensor, unrolled) -> tuple[torch.Tensor, int]:
    """Per-sample sums with several positives: at each depth, the logsumexp over the batch's
    depth-d ancestors of every label copy, minus the logsumexp over the sample's own."""
    paths = np.asarray(unrolled.tree.paths)
    copies = {b: list(unrolled.copy_ids(unrolled.dag.labels[int(v)])) for b, v in enumerate(target.tolist()) if v >= 0}
    per_sample = [scores.sum() * 0 for _ in range(target.shape[0])]
    rows = 0
    for b, own in copies.items():
        for d in range(paths.shape[1]):
            positives = sorted({int(paths[c, d]) for c in own} - {-1})
            if not positives:
                continue
            candidates = sorted({int(paths[c, d]) for cs in copies.values() for c in cs} - {-1})
            per_sample[b] = per_sample[b] + torch.logsumexp(scores[b, candidates], 0) - torch.logsumexp(scores[b, positives], 0)
            rows += 1
    return torch.stack(per_sample), rows


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9), reduction=st.sampled_from(["mean", "sum", "none"]))
def test_dag_loss_adds_the_term_with_every_copy_as_a_positive(seed, n, reduction):
    rng = np.random.default_rng(seed)
    unrolled = random_dag(rng, n).unroll()
    scores = torch.as_tensor(rng.normal(size=(6, n_outputs(unrolled.tree, "sibling", True))) * 2).requires_grad_()
    target = torch.as_tensor(rng.integers(-1, n, size=6))
    exact = DagCrossEntropy(unrolled, "sibling", True, reduction=reduction)(scores, target)
    crit = DagCrossEntropy(unrolled, "sibling", True, reduction=reduction, level_contrast=0.5)
    per_sample, rows = dag_reference(scores, target, unrolled)
    term = {"none": per_sample, "sum": per_sample.sum(), "mean": per_sample.sum() / max(rows, 1)}[reduction]
    want = exact + 0.5 * term
    for scored in (scores, lambda r, c: scores[r, c]):  # full scores and the path-local route
        got = crit.train()(scored, target)
        torch.testing.assert_close(got, want)
        (g_got,) = torch.autograd.grad(got.sum(), scores)
        (g_want,) = torch.autograd.grad(want.sum(), scores, retain_graph=True)
        torch.testing.assert_close(g_got, g_want)
        assert torch.isfinite(g_got).all()
    torch.testing.assert_close(crit.eval()(scores, target), exact)
