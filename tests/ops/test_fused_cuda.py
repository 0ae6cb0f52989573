"""The fused CUDA kernels (Triton) against the CPU route, on trees with every group size class."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hiclass_parallel import Tree
from hiclass_parallel.losses import HierarchicalCrossEntropy
from hiclass_parallel.ops.engine import _triton
from hiclass_parallel.ops.engine._backends import use_backend
from hiclass_parallel.ops.decode import best_paths, topk_paths
from hiclass_parallel.ops.groups import (
    group_log_softmax,
    group_logsumexp,
    n_outputs,
    node_log_probs,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device"),
]

CASES = [("level", False), ("level", True), ("sibling", False), ("sibling", True)]


@pytest.fixture(scope="module", autouse=True)
def needs_triton():
    # Where Triton is installed, a kernel module that fails to import raises here (a failure),
    # never a skip.
    if _triton._kernels() is None:
        pytest.skip("Triton is not installed (or HICLASS_PARALLEL_TRITON=0): the fused kernels are off")


def wide_tree(seed: int, random_tree) -> Tree:
    """Shuffled ids, 1,500 top-level classes (the looping size class), one node with 300
    children, one with 40, and many small sibling groups: every launch class of the plan."""
    rng = np.random.default_rng(seed)
    n_top, n = 1500, 2600
    parents = np.full(n, -1, dtype=np.int64)
    parents[n_top:n_top + 300] = 7
    parents[n_top + 300:n_top + 340] = 11
    parents[n_top + 340:] = rng.integers(n_top, n_top + 340, n - n_top - 340)
    return Tree.from_parents(random_tree.shuffle(parents, rng))


@pytest.fixture(scope="module")
def trees(random_tree) -> dict[str, Tree]:
    return {"wide": wide_tree(0, random_tree), "random": random_tree(np.random.default_rng(1), 300)}


def scores_for(tree: Tree, partition: str, stop: bool, dtype=torch.float64, seed=0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(7, n_outputs(tree, partition, stop), generator=gen, dtype=torch.float64) * 4
    x[1, ::3] = -torch.inf  # scattered -inf
    x[2] -= 300  # a whole row far below zero
    x[3, : tree.n_classes] = -torch.inf  # every class of a row masked: groups with no mass
    return x.to(dtype)


@pytest.mark.parametrize("tree_name", ["wide", "random"])
@pytest.mark.parametrize(("partition", "stop"), CASES)
@pytest.mark.parametrize("mask_value", [None, -5.0])
def test_forward_matches_cpu(tree_name, partition, stop, mask_value, trees):
    tree = trees[tree_name]
    x = scores_for(tree, partition, stop)
    for fn in (group_logsumexp, group_log_softmax):
        expected = fn(x, tree, partition, stop, mask_value=mask_value)
        got = fn(x.cuda(), tree, partition, stop, mask_value=mask_value)
        assert got.device.type == "cuda" and got.dtype == torch.float64
        torch.testing.assert_close(got.cpu(), expected)
    semantics = ["partial", "terminal"] if stop else ["partial"]
    for sem in semantics:
        expected = node_log_probs(x, tree, partition, stop, sem, mask_value)
        got = node_log_probs(x.cuda(), tree, partition, stop, sem, mask_value)
        torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize(("partition", "stop"), CASES)
def test_gradients_and_loss_match_cpu(partition, stop, trees):
    tree = trees["wide"]
    x = scores_for(tree, partition, stop)[[0, 2, 4, 5]]
    weights = torch.randn_like(x)
    grads = []
    for dev in ("cpu", "cuda"):
        xd = x.to(dev, copy=True).requires_grad_()
        (group_log_softmax(xd, tree, partition, stop) * weights.to(dev)).sum().backward()
        grads.append(xd.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])

    y = torch.as_tensor(np.random.default_rng(3).integers(-1, tree.n_classes, x.shape[0]))
    criterion = HierarchicalCrossEntropy(tree, partition, stop=stop, reduction="none")
    results = []
    for dev in ("cpu", "cuda"):
        xd = x.to(dev, copy=True).requires_grad_()
        loss = criterion.to(dev)(xd, y.to(dev))
        (loss * torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=x.dtype, device=dev)).sum().backward()
        results.append((loss.detach().cpu(), xd.grad.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(("partition", "stop", "semantics"), [("level", True, "partial"), ("sibling", True, "terminal"),
                                                             ("sibling", False, "partial")])
def test_fused_loss_options_match_cpu(reduction, partition, stop, semantics, trees):
    tree = trees["wide"]
    x = scores_for(tree, partition, stop)
    weights = np.random.default_rng(4).uniform(0, 2, tree.n_levels)
    y = torch.as_tensor(np.random.default_rng(5).integers(-1, tree.n_classes, x.shape[0]))
    criterion = HierarchicalCrossEntropy(tree, partition, stop=stop, semantics=semantics, reduction=reduction,
                                         level_weights=weights)
    upstream = torch.linspace(-1.5, 2.0, x.shape[0], dtype=x.dtype)
    results = []
    for dev in ("cpu", "cuda"):
        xd = x.to(dev, copy=True).requires_grad_()
        loss = criterion.to(dev)(xd, y.to(dev))
        (loss * (upstream.to(dev) if loss.ndim else 1.0)).sum().backward()
        results.append((loss.detach().cpu(), xd.grad.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_dtypes(dtype, trees):
    tree = trees["wide"]
    x = scores_for(tree, "sibling", False, torch.float32)[[0, 4, 5]].to(dtype)
    got = group_log_softmax(x.cuda(), tree, "sibling")
    assert got.dtype == dtype
    expected = group_log_softmax(x.double(), tree, "sibling")
    tol = {torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
    torch.testing.assert_close(got.cpu().double(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize(("partition", "stop"), CASES)
def test_decoding_matches_cpu(partition, stop, trees):
    tree = trees["wide"]
    x = scores_for(tree, partition, stop, torch.float32)  # row 3: every class at -inf
    for sem in (["partial", "terminal"] if stop else ["partial"]):
        cpu = best_paths(x, tree, partition, stop, sem)
        gpu = best_paths(x.cuda(), tree, partition, stop, sem)
        torch.testing.assert_close(gpu[0].cpu(), cpu[0])
        torch.testing.assert_close(gpu[1].cpu(), cpu[1])
        for t in (0.05, 0.5):
            cpu_t = best_paths(x, tree, partition, stop, sem, threshold=t)
            gpu_t = best_paths(x.cuda(), tree, partition, stop, sem, threshold=t)
            torch.testing.assert_close(gpu_t[0].cpu(), cpu_t[0])
            torch.testing.assert_close(gpu_t[1].cpu(), cpu_t[1])
        cpu_k = topk_paths(x, tree, 4, partition, stop, sem)
        gpu_k = topk_paths(x.cuda(), tree, 4, partition, stop, sem)
        torch.testing.assert_close(gpu_k[0].cpu(), cpu_k[0])
        torch.testing.assert_close(gpu_k[1].cpu(), cpu_k[1])


def test_fused_and_torch_op_routes_agree(trees):
    """The torch-op route on CUDA (what runs without Triton) gives the same numbers."""
    tree = trees["wide"]
    x = scores_for(tree, "sibling", True).cuda()
    fused = [group_log_softmax(x, tree, "sibling", True), node_log_probs(x, tree, "sibling", True, "terminal")]
    with use_backend("torch"):
        plain = [group_log_softmax(x, tree, "sibling", True), node_log_probs(x, tree, "sibling", True, "terminal")]
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a, b)


def test_non_contiguous_and_empty_batches(trees):
    tree = trees["random"]
    x = scores_for(tree, "level", False, torch.float32).cuda()
    strided = x.t().contiguous().t()  # column-major: rows are not contiguous
    torch.testing.assert_close(group_log_softmax(strided, tree), group_log_softmax(x, tree))
    empty = group_log_softmax(x[:0], tree)
    assert empty.shape == (0, tree.n_classes) and empty.device.type == "cuda"
    assert group_logsumexp(x[:0], tree).shape == (0, tree.n_groups("level"))
    paths, value = best_paths(x[:0], tree)
    assert paths.shape == (0, tree.n_levels) and value.shape == (0,)
    assert node_log_probs(x[:0], tree).shape == (0, tree.n_classes)
