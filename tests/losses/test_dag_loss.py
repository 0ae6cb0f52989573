"""The DAG loss equals brute-force enumeration of every path to the label."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import random_dag

from hiclass_parallel.dag import Dag
from hiclass_parallel.losses import DagCrossEntropy, HierarchicalCrossEntropy
from hiclass_parallel.ops.groups import n_outputs

OPTIONS = [("sibling", False, "partial"), ("sibling", True, "terminal"), ("sibling", True, "partial"),
           ("level", True, "terminal")]


def brute_force(unrolled, scores, target, partition, stop, semantics):
    """-log sum over the DAG's paths to the label of the product of explicit group softmaxes."""
    tree = unrolled.tree
    C = tree.n_classes
    groups = tree.groups(partition)
    G = int(groups.max()) + 1
    col_group = np.concatenate([groups, np.arange(1, G)]) if stop else groups
    child_group = {}
    for c in range(C):  # the group of each internal node's children
        kids = tree.children(c)
        if len(kids):
            child_group[c] = int(groups[kids[0]])

    def log_p(b, col):  # log-softmax of column col within its group
        members = np.flatnonzero(col_group == col_group[col])
        return float(scores[b, col] - torch.logsumexp(scores[b, members], 0))

    out = []
    for b, v in enumerate(target.tolist()):
        if v < 0:
            out.append(0.0)
            continue
        total = 0.0
        for copy in unrolled.copy_ids(unrolled.dag.labels[v]):  # one copy per DAG path, found by unrolling
            path = [int(n) for n in tree.paths[copy] if n >= 0]
            assert [int(unrolled.origin[n]) for n in path][-1] == v
            lp = sum(log_p(b, n) for n in path)
            if semantics == "terminal" and copy in child_group:
                lp += log_p(b, C + child_group[copy] - 1)
            total += math.exp(lp)
        out.append(-math.log(total))
    return torch.tensor(out, dtype=torch.float64)


def count_paths(dag: Dag, v: int) -> int:
    """Root paths to DAG node v, by recursion over its parents (independent of unrolling)."""
    parents = dag.parent_ids[dag.parent_offsets[v]:dag.parent_offsets[v + 1]]
    return sum(1 if p < 0 else count_paths(dag, int(p)) for p in parents)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9), option=st.sampled_from(OPTIONS))
def test_dag_loss_equals_brute_force_path_enumeration(seed, n, option):
    partition, stop, semantics = option
    rng = np.random.default_rng(seed)
    dag = random_dag(rng, n)
    unrolled = dag.unroll()
    for v in range(n):
        assert len(unrolled.copy_ids(dag.labels[v])) == count_paths(dag, v)
    scores = torch.as_tensor(rng.normal(size=(5, n_outputs(unrolled.tree, partition, stop))) * 2)
    target = torch.as_tensor(rng.integers(-1, n, size=5))
    loss = DagCrossEntropy(unrolled, partition, stop, semantics, reduction="none")(scores, target)
    if partition == "sibling":  # explicit group softmaxes: a proper distribution
        torch.testing.assert_close(loss, brute_force(unrolled, scores, target, partition, stop, semantics))
    assert torch.isfinite(loss).all()


def test_on_a_tree_it_is_the_hierarchical_cross_entropy_per_sample():
    dag = Dag.from_edges([("a", None), ("b", "a"), ("c", "a"), ("d", "b"), ("e", None)])
    unrolled = dag.unroll()
    tree = unrolled.tree
    scores = torch.randn(4, n_outputs(tree, "sibling", True), dtype=torch.float64, requires_grad=True)
    ids = torch.as_tensor(dag.to_ids(["d", "a", "e", "c"]))
    nodes = torch.as_tensor(unrolled.copy_offsets[ids.numpy()])  # one copy each
    expected = HierarchicalCrossEntropy(tree, "sibling", True, "none")(scores, nodes)
    got = DagCrossEntropy(unrolled, "sibling", True, reduction="none")(scores, ids)
    torch.testing.assert_close(got, expected)
    got.sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_bad_targets_are_named():
    unrolled = Dag.from_edges([("a", None), ("b", "a")]).unroll()
    criterion = DagCrossEntropy(unrolled)
    with pytest.raises(IndexError, match=r"\[7\]"):
        criterion(torch.zeros(1, 2), torch.tensor([7]))
    with pytest.raises(ValueError, match="stop=True"):
        DagCrossEntropy(unrolled, semantics="terminal")
