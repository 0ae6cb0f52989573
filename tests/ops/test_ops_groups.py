"""The lean engine: per-group log-softmax, stop columns and path log-probabilities."""

from __future__ import annotations

import math
import pickle
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hiclass_parallel.ops.engine._array_ops as array_ops_mod
from hiclass_parallel import Tree, partition_scores
from hiclass_parallel._backend import to_numpy as host
from hiclass_parallel.ops.engine._backends import BACKENDS, backend_for, use_backend
from hiclass_parallel.ops.engine._layout import layout
from hiclass_parallel.ops.groups import (
    group_log_softmax,
    group_logsumexp,
    n_outputs,
    node_log_probs,
    stop_columns,
)

CASES = [("level", False), ("level", True), ("sibling", False), ("sibling", True)]


def dense_reference(scores: np.ndarray, tree: Tree, mask_value: float) -> np.ndarray:
    """The paper: log_softmax of the masked (B, L, C) tensor, read at each class's level."""
    dense = partition_scores(torch.as_tensor(scores), tree, mask_value=mask_value)
    logp = torch.log_softmax(dense, -1).numpy()
    return logp[:, tree.depth, np.arange(tree.n_classes)]


def reference_group_log_softmax(scores: np.ndarray, tree: Tree, partition: str, stop: bool) -> np.ndarray:
    """One group at a time, with scipy's logsumexp (slow, obviously right)."""
    from scipy.special import logsumexp

    g = tree.groups(partition)
    G = int(g.max()) + 1
    col_group = np.concatenate([g, np.arange(1, G)]) if stop else g
    out = np.empty_like(scores)
    for k in range(G):
        cols = np.flatnonzero(col_group == k)
        out[:, cols] = scores[:, cols] - logsumexp(scores[:, cols], axis=1, keepdims=True)
    return out


def reference_node_log_probs(logp: np.ndarray, tree: Tree, partition: str, terminal: bool) -> np.ndarray:
    """Sum of group log-probabilities along every ancestral path (plus the stop term)."""
    stops = stop_columns(tree, partition)
    out = np.empty((logp.shape[0], tree.n_classes))
    for c in range(tree.n_classes):
        path = tree.paths[c][tree.paths[c] >= 0]
        out[:, c] = logp[:, path].sum(1)
        if terminal and stops[c] >= 0:
            out[:, c] += logp[:, stops[c]]
    return out


# ---------------------------------------------------------------------------- sizes
def test_n_outputs_and_stop_columns(paper_tree):
    C = paper_tree.n_classes
    assert n_outputs(paper_tree) == C
    assert n_outputs(paper_tree, "sibling") == C
    assert n_outputs(paper_tree, "level", stop=True) == C + paper_tree.n_levels - 1
    internal = int((~paper_tree.is_leaf).sum())
    assert n_outputs(paper_tree, "sibling", stop=True) == C + internal
    # level: an internal node at depth d stops with the stop of depth d + 1 (column C + d)
    level = stop_columns(paper_tree, "level")
    assert level.tolist() == [C + 0, C + 0, -1, C + 1, -1, -1, -1, -1, -1]
    # sibling: one stop per internal node, in ascending node id order
    sibling = stop_columns(paper_tree, "sibling")
    assert sibling[~paper_tree.is_leaf].tolist() == [C, C + 1, C + 2]
    assert (sibling[paper_tree.is_leaf] == -1).all()
    with pytest.raises(ValueError, match="partition"):
        n_outputs(paper_tree, "depth")


# ---------------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask_value", [-math.inf, -7.5, 0.0, math.nan])
def test_level_equals_dense_paper(dtype, mask_value, random_tree):
    """Random trees with shuffled ids: lean level log-softmax == the paper's dense one."""
    rng = np.random.default_rng(0)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)
    for seed in range(12):
        tree = random_tree(seed, int(rng.integers(1, 60)))
        scores = (rng.normal(size=(7, tree.n_classes)) * 4).astype(dtype)
        dense_mask = -math.inf if math.isnan(mask_value) else mask_value  # nan: "ignored", as -inf
        expected = dense_reference(scores, tree, dense_mask)
        for x in (scores, torch.as_tensor(scores)):
            got = host(group_log_softmax(x, tree, "level", mask_value=mask_value))
            assert got.dtype == dtype
            np.testing.assert_allclose(got, expected, **tol)


@pytest.mark.parametrize("partition, stop", CASES)
def test_group_log_softmax_matches_per_group_reference(partition, stop, to_xp, random_tree):
    rng = np.random.default_rng(1)
    for seed in range(6):
        tree = random_tree(seed, int(rng.integers(1, 40)))
        scores = rng.normal(size=(5, n_outputs(tree, partition, stop))) * 3
        expected = reference_group_log_softmax(scores, tree, partition, stop)
        got = group_log_softmax(to_xp(scores), tree, partition, stop)
        np.testing.assert_allclose(host(got), expected, rtol=1e-10, atol=1e-10)
        lse = host(group_logsumexp(to_xp(scores), tree, partition, stop))
        assert lse.shape == (5, tree.n_groups(partition))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 30), case=st.sampled_from(CASES))
def test_every_group_is_a_distribution(seed, n, case, random_tree):
    partition, stop = case
    tree = random_tree(seed, n)
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(3, n_outputs(tree, partition, stop))) * 5
    p = np.exp(group_log_softmax(scores, tree, partition, stop))
    g = tree.groups(partition)
    G = tree.n_groups(partition)
    col_group = np.concatenate([g, np.arange(1, G)]) if stop else g
    sums = np.stack([p[:, col_group == k].sum(1) for k in range(G)], 1)
    np.testing.assert_allclose(sums, 1.0, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 30))
def test_sibling_probabilities_form_a_distribution(seed, n, random_tree):
    tree = random_tree(seed, n)
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(4, tree.n_classes)) * 3
    p = np.exp(node_log_probs(scores, tree, "sibling"))
    np.testing.assert_allclose(p[:, tree.is_leaf].sum(1), 1.0, rtol=1e-12)
    # a node's probability is the probability of its subtree
    for c in range(tree.n_classes):
        below = (tree.paths[:, tree.depth[c]] == c) & tree.is_leaf
        np.testing.assert_allclose(p[:, c], p[:, below].sum(1), rtol=1e-10)
    # with stop columns, terminal probabilities of all nodes sum to 1
    scores = rng.normal(size=(4, n_outputs(tree, "sibling", stop=True))) * 3
    pt = np.exp(node_log_probs(scores, tree, "sibling", stop=True, semantics="terminal"))
    np.testing.assert_allclose(pt.sum(1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("partition, stop", CASES)
def test_node_log_probs_sum_along_paths(partition, stop, to_xp, random_tree):
    rng = np.random.default_rng(2)
    for seed in range(5):
        tree = random_tree(seed + 10, int(rng.integers(1, 40)))
        scores = rng.normal(size=(4, n_outputs(tree, partition, stop))) * 3
        logp = reference_group_log_softmax(scores, tree, partition, stop)
        for semantics in ("partial", "terminal") if stop else ("partial",):
            expected = reference_node_log_probs(logp, tree, partition, semantics == "terminal")
            got = node_log_probs(to_xp(scores), tree, partition, stop, semantics)
            np.testing.assert_allclose(host(got), expected, rtol=1e-10, atol=1e-10)


def test_namespaces_agree(to_xp, random_tree):
    tree = random_tree(3, 50)
    scores = np.random.default_rng(3).normal(size=(6, n_outputs(tree, "sibling", True))).astype(np.float32)
    for fn in (group_log_softmax, group_logsumexp, node_log_probs):
        expected = fn(scores, tree, "sibling", True)
        got = fn(to_xp(scores), tree, "sibling", True)
        assert host(got).dtype == np.float32
        np.testing.assert_allclose(host(got), expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- edge cases
def test_large_scores_and_infinities(random_tree):
    tree = random_tree(4, 30)
    rng = np.random.default_rng(4)
    scores = rng.normal(size=(3, tree.n_classes)) * 1e4
    for partition in ("level", "sibling"):
        for x in (scores, torch.as_tensor(scores, dtype=torch.float32)):
            assert np.isfinite(host(group_log_softmax(x, tree, partition))).all()
            assert np.isfinite(host(node_log_probs(x, tree, partition))).all()
    # -inf scores get probability 0; the rest of their group is still normalised
    masked = rng.normal(size=(2, tree.n_classes))
    masked[:, tree.depth == 0][:, 1:] = -np.inf
    masked[:, np.flatnonzero(tree.depth == 0)[1:]] = -np.inf
    logp = group_log_softmax(masked, tree, "level")
    top = np.flatnonzero(tree.depth == 0)
    assert (logp[:, top[0]] == 0).all()
    assert np.isneginf(logp[:, top[1:]]).all()
    # a group of -inf only has log-normaliser -inf, with no NaN leaking to other groups
    all_masked = np.where(tree.depth == 0, -np.inf, masked[0])[None]
    lse = group_logsumexp(all_masked, tree, "level")
    assert np.isneginf(lse[0, 0]) and np.isfinite(lse[0, 1:]).all()


def test_shapes_leading_axes_and_empty_batch(random_tree):
    tree = random_tree(5, 20)
    scores = np.random.default_rng(5).normal(size=(2, 3, tree.n_classes))
    out = group_log_softmax(scores, tree, "sibling")
    assert out.shape == (2, 3, tree.n_classes)
    np.testing.assert_array_equal(out.reshape(6, -1), group_log_softmax(scores.reshape(6, -1), tree, "sibling"))
    one = group_log_softmax(scores[0, 0], tree, "sibling")
    np.testing.assert_array_equal(one, out[0, 0])
    assert node_log_probs(scores, tree).shape == (2, 3, tree.n_classes)
    assert group_logsumexp(scores, tree, "sibling").shape == (2, 3, tree.n_groups("sibling"))
    for x in (np.zeros((0, tree.n_classes)), torch.zeros(0, tree.n_classes)):
        assert tuple(group_log_softmax(x, tree).shape) == (0, tree.n_classes)
        assert tuple(node_log_probs(x, tree).shape) == (0, tree.n_classes)


def test_errors_name_the_input(paper_tree):
    with pytest.raises(ValueError, match=r"n_outputs\(tree, 'level', stop=True\) = 11"):
        group_log_softmax(np.zeros((2, 9)), paper_tree, stop=True)
    with pytest.raises(TypeError, match="floating"):
        group_log_softmax(np.zeros((2, 9), dtype=np.int64), paper_tree)
    with pytest.raises(ValueError, match="partition"):
        group_log_softmax(np.zeros((2, 9)), paper_tree, "depth")
    with pytest.raises(ValueError, match="stop=True"):
        node_log_probs(np.zeros((2, 9)), paper_tree, semantics="terminal")
    with pytest.raises(ValueError, match="semantics"):
        node_log_probs(np.zeros((2, 9)), paper_tree, semantics="final")


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_row_chunks_do_not_change_results(monkeypatch, kind, random_tree):
    tree = random_tree(6, 80)
    scores = np.random.default_rng(6).normal(size=(37, n_outputs(tree, "sibling", True)))
    x = scores if kind == "numpy" else torch.as_tensor(scores)
    whole = [host(f(x, tree, "sibling", True)) for f in (group_log_softmax, node_log_probs)]
    monkeypatch.setattr(array_ops_mod, "_CPU_CHUNK_BYTES", 1)  # one row per chunk ...
    monkeypatch.setattr(array_ops_mod, "_n_threads", lambda: 3)  # ... spread over 3 threads
    for fn, expected in zip((group_log_softmax, node_log_probs), whole):
        np.testing.assert_allclose(host(fn(x, tree, "sibling", True)), expected, rtol=1e-13, atol=1e-13)


def _child(queue, scores, tree):
    queue.put(group_log_softmax(scores, tree, "sibling"))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_thread_pool_survives_fork(monkeypatch, random_tree):
    """A forked child (multiprocessing, DataLoader workers) must not wait on the parent's threads."""
    import multiprocessing

    monkeypatch.setattr(array_ops_mod, "_CPU_CHUNK_BYTES", 1)
    monkeypatch.setattr(array_ops_mod, "_n_threads", lambda: 2)
    tree = random_tree(12, 60)
    scores = np.random.default_rng(12).normal(size=(8, tree.n_classes))
    expected = group_log_softmax(scores, tree, "sibling")  # starts the pool in the parent
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue, scores, tree))
    child.start()
    try:
        got = queue.get(timeout=60)
    finally:  # a child that hangs is ended, not left running
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, expected)


def test_no_dense_allocation():
    """The lean path never allocates anything of the size of (B, L, C)."""
    rng = np.random.default_rng(7)
    n, L = 3000, 30
    parents = np.concatenate([[-1], np.arange(L - 1)])  # a chain: 30 levels ...
    parents = np.concatenate([parents, rng.integers(0, L, n - L)])  # ... and a bushy rest
    tree = Tree.from_parents(parents)
    B = 64
    scores = rng.normal(size=(B, tree.n_classes))
    dense_bytes = B * tree.n_levels * tree.n_classes * 8
    for partition in ("level", "sibling"):
        group_log_softmax(scores, tree, partition)  # build the cached layout first
        tracemalloc.start()
        group_log_softmax(scores, tree, partition)
        node_log_probs(scores, tree, partition)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < dense_bytes / 6, (partition, peak, dense_bytes)


def test_layout_cache_survives_pickling(paper_tree):
    group_log_softmax(np.zeros(9), paper_tree, "sibling")
    clone = pickle.loads(pickle.dumps(paper_tree))
    np.testing.assert_array_equal(
        group_log_softmax(np.arange(9.0), clone, "sibling"), group_log_softmax(np.arange(9.0), paper_tree, "sibling")
    )


# ---------------------------------------------------------------------------- autograd
@pytest.mark.parametrize("partition, stop", CASES)
def test_gradcheck(partition, stop, random_tree):
    tree = random_tree(8, 14)
    x = torch.randn(3, n_outputs(tree, partition, stop), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: group_log_softmax(s, tree, partition, stop), (x,))
    assert torch.autograd.gradcheck(lambda s: group_logsumexp(s, tree, partition, stop), (x,))
    signed = torch.randn(3, tree.n_groups(partition), dtype=torch.float64)  # negative upstream grads
    assert torch.autograd.gradcheck(lambda s: group_logsumexp(s, tree, partition, stop) * signed, (x,))
    assert torch.autograd.gradcheck(lambda s: node_log_probs(s, tree, partition, stop), (x,))
    if stop:
        assert torch.autograd.gradcheck(lambda s: node_log_probs(s, tree, partition, stop, "terminal"), (x,))
    assert torch.autograd.gradcheck(lambda s: group_log_softmax(s, tree, partition, stop, mask_value=-2.0), (x,))


def test_gradients_match_dense_autograd(random_tree):
    tree = random_tree(9, 40)
    x = torch.randn(5, tree.n_classes, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(5, tree.n_classes, dtype=torch.float64)
    (group_log_softmax(x, tree) * weights).sum().backward()
    lean = x.grad.clone()
    x.grad = None
    dense = torch.log_softmax(partition_scores(x, tree), -1)[:, torch.as_tensor(np.array(tree.depth), dtype=torch.long), torch.arange(40)]
    (dense * weights).sum().backward()
    torch.testing.assert_close(lean, x.grad)


def test_large_scores_give_finite_gradients(random_tree):
    tree = random_tree(10, 30)
    x = (torch.randn(4, tree.n_classes) * 1e4).requires_grad_()
    for fn in (group_log_softmax, node_log_probs):
        for partition in ("level", "sibling"):
            x.grad = None
            fn(x, tree, partition).sum().backward()
            assert torch.isfinite(x.grad).all()


# ---------------------------------------------------------------------------- devices
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_cuda_matches_cpu(random_tree):
    tree = random_tree(11, 200)
    x = torch.randn(16, n_outputs(tree, "sibling", True), dtype=torch.float64)
    for fn in (group_log_softmax, node_log_probs):
        expected = fn(x, tree, "sibling", True)
        got = fn(x.cuda(), tree, "sibling", True)
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), expected)
    xg = x.cuda().requires_grad_()
    group_log_softmax(xg, tree, "sibling", True).pow(2).sum().backward()
    xc = x.clone().requires_grad_()
    group_log_softmax(xc, tree, "sibling", True).pow(2).sum().backward()
    torch.testing.assert_close(xg.grad.cpu(), xc.grad)


def test_torch_op_kernels_match(random_tree):
    """The kernels written with torch ops (what CUDA runs) agree with the NumPy route."""
    from hiclass_parallel.losses import HierarchicalCrossEntropy
    from hiclass_parallel.ops.decode import best_paths, topk_paths

    tree = random_tree(13, 70)
    x = torch.randn(9, n_outputs(tree, "sibling", True), dtype=torch.float64)
    y = torch.as_tensor(np.random.default_rng(13).integers(-1, tree.n_classes, 9))

    def run():
        xg = x.clone().requires_grad_()
        loss = HierarchicalCrossEntropy(tree, "sibling", stop=True)(xg, y)
        loss.backward()
        return (
            group_log_softmax(x, tree, "sibling", True),
            group_logsumexp(x, tree, "sibling", True),
            node_log_probs(x, tree, "sibling", True, "terminal"),
            *best_paths(x, tree, "sibling", True, "terminal"),
            *best_paths(x, tree, "sibling", True, threshold=0.2),
            *topk_paths(x, tree, 4, "sibling", True, "terminal"),
            loss.detach(),
            xg.grad,
        )

    with use_backend("numpy"):
        numpy_route = run()
    with use_backend("torch"):
        torch_route = run()
    for a, b in zip(numpy_route, torch_route):
        torch.testing.assert_close(a, b)
    xg = x.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda s: group_log_softmax(s, tree, "sibling", True), (xg,))
    assert torch.autograd.gradcheck(lambda s: group_logsumexp(s, tree, "sibling", True) * 2 - 1, (xg,))


def test_bfloat16_runs_on_torch_ops(random_tree):
    tree = random_tree(14, 40)
    x = torch.randn(5, tree.n_classes)
    got = group_log_softmax(x.to(torch.bfloat16), tree, "sibling")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), group_log_softmax(x, tree, "sibling"), atol=0.1, rtol=0.05)


def test_backend_choice_by_array_kind(random_tree):
    """One place picks the route: by the array's kind, the C kernel only for large groups."""
    from hiclass_parallel.ops.engine import _native

    small, big = random_tree(15, 30), Tree.from_parents([-1] * 100 + [0] * 100)  # 2 levels of 100
    lay_small, lay_big = layout(small, "sibling", False), layout(big, "level", False)
    assert backend_for(np.zeros((1, small.n_classes)), lay_small).name == "numpy"
    assert backend_for(np.zeros((1, big.n_classes)), lay_big).name == ("native" if _native.available() else "numpy")
    assert backend_for(torch.zeros(1, small.n_classes), lay_small).name == "numpy"  # through NumPy views
    assert backend_for(torch.zeros(1, small.n_classes, dtype=torch.bfloat16), lay_small).name == "torch"
    with use_backend("torch"):
        assert backend_for(torch.zeros(1, small.n_classes), lay_small).name == "torch"
        with pytest.raises(ValueError, match="cannot run"):
            backend_for(np.zeros((1, small.n_classes)), lay_small)
    with pytest.raises(ValueError, match="must be one of"), use_backend("fortran"):
        pass
    assert set(BACKENDS) == {"triton", "torch", "native", "numpy", "cupy", "array_api"}
