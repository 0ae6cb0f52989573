"""HierarchicalCrossEntropy: the paper's loss without (B, L, C), and its extensions."""

from __future__ import annotations

import copy
import io
import math
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from hiclass_parallel import (
    Tree,
    flatten_for_training,
    labels_to_paths,
    partition_scores,
)
from hiclass_parallel.losses import HierarchicalCrossEntropy
from hiclass_parallel.ops.groups import (
    group_log_softmax,
    n_outputs,
    node_log_probs,
    stop_columns,
)

CASES = [("level", False), ("level", True), ("sibling", False), ("sibling", True)]


def dense_paper_loss(scores: torch.Tensor, labels: torch.Tensor, tree: Tree, mask_value: float) -> torch.Tensor:
    """Section 3.1: partition, flatten, drop padded rows, flat cross-entropy (mean over rows)."""
    rows, targets = flatten_for_training(partition_scores(scores, tree, mask_value=mask_value), labels_to_paths(labels, tree))
    return F.cross_entropy(rows, targets)


def reference_rows(scores: np.ndarray, labels, tree: Tree, partition: str, stop: bool, terminal: bool):
    """Per-sample lists of (row loss, depth) from per-group log-probabilities, by hand."""
    logp = group_log_softmax(scores, tree, partition, stop)
    stops = stop_columns(tree, partition)
    out = []
    for b, y in enumerate(labels):
        rows = []
        if y >= 0:
            for d, node in enumerate(tree.paths[y]):
                if node >= 0:
                    rows.append((-logp[b, node], d))
            if stop and terminal and stops[y] >= 0:
                rows.append((-logp[b, stops[y]], tree.depth[y] + 1))
        out.append(rows)
    return out


# ---------------------------------------------------------------------------- the paper's loss
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask_value", [-math.inf, -4.0, 0.0])
def test_equals_dense_paper_loss_and_gradient(dtype, mask_value, random_tree):
    rng = np.random.default_rng(0)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    for seed in range(10):
        tree = random_tree(seed, int(rng.integers(1, 50)))
        x = (torch.randn(9, tree.n_classes, dtype=dtype) * 3).requires_grad_()
        labels = torch.as_tensor(rng.integers(0, tree.n_classes, 9))  # any depth, not only leaves
        expected = dense_paper_loss(x, labels, tree, mask_value)
        (grad_expected,) = torch.autograd.grad(expected, x)
        criterion = HierarchicalCrossEntropy(tree, mask_value=mask_value)
        for target in (labels, labels_to_paths(labels, tree)):
            loss = criterion(x, target)
            (grad,) = torch.autograd.grad(loss, x)
            assert loss.dtype == dtype
            torch.testing.assert_close(loss, expected, **tol)
            torch.testing.assert_close(grad, grad_expected, **tol)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 25),
    case=st.sampled_from(CASES),
    semantics=st.sampled_from(["partial", "terminal"]),
    weighted=st.booleans(),
)
def test_reductions_match_row_by_row_reference(seed, n, case, semantics, weighted, random_tree):
    partition, stop = case
    if semantics == "terminal" and not stop:
        semantics = "partial"
    tree = random_tree(seed, n)
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(6, n_outputs(tree, partition, stop))) * 3
    labels = rng.integers(-1, tree.n_classes, 6)  # -1: unlabelled
    weights = rng.uniform(0, 2, tree.n_levels) if weighted else np.ones(tree.n_levels)
    rows = reference_rows(scores, labels, tree, partition, stop, semantics == "terminal")
    per_sample = np.array([sum(weights[d] * v for v, d in r) for r in rows])
    total_weight = sum(weights[d] for r in rows for _, d in r)
    kwargs = dict(level_weights=weights if weighted else None, semantics=semantics)
    x = torch.as_tensor(scores)
    y = torch.as_tensor(labels)
    none = HierarchicalCrossEntropy(tree, partition, stop, "none", **kwargs)(x, y)
    np.testing.assert_allclose(none.numpy(), per_sample, rtol=1e-10, atol=1e-12)
    total = HierarchicalCrossEntropy(tree, partition, stop, "sum", **kwargs)(x, y)
    np.testing.assert_allclose(total.item(), per_sample.sum(), rtol=1e-10, atol=1e-12)
    mean = HierarchicalCrossEntropy(tree, partition, stop, "mean", **kwargs)(x, y)
    np.testing.assert_allclose(mean.item(), per_sample.sum() / total_weight if total_weight else 0.0, rtol=1e-10, atol=1e-12)


def test_sibling_loss_is_the_path_negative_log_likelihood(random_tree):
    tree = random_tree(1, 40)
    rng = np.random.default_rng(1)
    labels = torch.as_tensor(rng.integers(0, tree.n_classes, 8))
    x = torch.randn(8, tree.n_classes, dtype=torch.float64)
    per_sample = HierarchicalCrossEntropy(tree, "sibling", reduction="none")(x, labels)
    joint = node_log_probs(x, tree, "sibling")
    torch.testing.assert_close(per_sample, -joint[torch.arange(8), labels])
    # terminal labels with stop columns: minus the log-probability of ending exactly there
    xs = torch.randn(8, n_outputs(tree, "sibling", True), dtype=torch.float64)
    per_sample = HierarchicalCrossEntropy(tree, "sibling", stop=True, reduction="none")(xs, labels)
    joint = node_log_probs(xs, tree, "sibling", True, "terminal")
    torch.testing.assert_close(per_sample, -joint[torch.arange(8), labels])


def test_stop_rows(paper_tree):
    """An internal terminal label trains its stop; a leaf label and a partial label do not."""
    C = paper_tree.n_classes
    x = torch.zeros(1, n_outputs(paper_tree, "level", True))
    terminal = HierarchicalCrossEntropy(paper_tree, "level", stop=True, reduction="sum")
    partial = HierarchicalCrossEntropy(paper_tree, "level", stop=True, reduction="sum", semantics="partial")
    assert terminal.semantics == "terminal" and partial.semantics == "partial"
    # groups: level 0 = 2 classes (no stop), level 1 = 4 classes + stop, level 2 = 3 classes + stop
    # "big dog" (id 3, depth 1): rows at levels 0, 1 and the stop of level 2
    loss = terminal(x, torch.tensor([3]))
    np.testing.assert_allclose(loss.item(), math.log(2) + math.log(5) + math.log(4), rtol=1e-6)
    np.testing.assert_allclose(partial(x, torch.tensor([3])).item(), math.log(2) + math.log(5), rtol=1e-6)
    # "happy big dog" (id 6) is a leaf: rows at levels 0, 1, 2 and no stop row
    np.testing.assert_allclose(terminal(x, torch.tensor([6])).item(), math.log(2) + math.log(5) + math.log(4), rtol=1e-6)
    x.requires_grad_()
    terminal(x, torch.tensor([3])).backward()
    assert x.grad[0, C + 1] < 0  # the stop of level 2 is pushed up
    with pytest.raises(ValueError, match="semantics"):
        HierarchicalCrossEntropy(paper_tree, semantics="final")


# ---------------------------------------------------------------------------- targets
def test_unlabelled_samples_and_ignore_index(paper_tree):
    x = torch.randn(3, 9, requires_grad=True)
    criterion = HierarchicalCrossEntropy(paper_tree)
    loss = criterion(x, torch.tensor([6, -1, 2]))
    np.testing.assert_allclose(loss.item(), criterion(x[[0, 2]], torch.tensor([6, 2])).item(), rtol=1e-6)
    loss.backward()
    assert (x.grad[1] == 0).all()
    custom = HierarchicalCrossEntropy(paper_tree, ignore_index=-100)
    np.testing.assert_allclose(custom(x, torch.tensor([6, -100, 2])).item(), loss.item(), rtol=1e-6)
    paths = torch.tensor([[0, 3, 6], [-100, -100, -100], [0, 2, -100]])
    np.testing.assert_allclose(custom(x, paths).item(), loss.item(), rtol=1e-6)
    # a batch without labels gives 0 (not NaN) and zero gradients
    x.grad = None
    nothing = criterion(x, torch.tensor([-1, -1, -1]))
    nothing.backward()
    assert nothing.item() == 0 and (x.grad == 0).all()
    assert criterion(x[:0], torch.zeros(0, dtype=torch.long)).item() == 0


def test_short_paths_are_padded(paper_tree):
    x = torch.randn(2, 9)
    criterion = HierarchicalCrossEntropy(paper_tree)
    torch.testing.assert_close(criterion(x, torch.tensor([[0, 3], [1, -1]])), criterion(x, torch.tensor([3, 1])))


def test_invalid_targets_are_named(paper_tree):
    criterion = HierarchicalCrossEntropy(paper_tree)
    x = torch.zeros(2, 9)
    with pytest.raises(IndexError, match=r"\[9\]"):
        criterion(x, torch.tensor([0, 9]))
    with pytest.raises(IndexError, match="out of range"):
        criterion(x, torch.tensor([0, -5]))
    with pytest.raises(ValueError, match="not an ancestral path"):
        criterion(x, torch.tensor([[0, 3, 6], [1, 3, -1]]))  # big dog is not a cat
    with pytest.raises(ValueError, match="not an ancestral path"):
        criterion(x, torch.tensor([[0, -1, 6], [1, -1, -1]]))  # a gap
    with pytest.raises(ValueError, match="expected node ids"):
        criterion(x, torch.zeros(2, 3, 1, dtype=torch.long))
    with pytest.raises(TypeError, match="integer"):
        criterion(x, torch.zeros(2))
    with pytest.raises(ValueError, match=r"expected \(batch, 9\)"):
        criterion(torch.zeros(2, 11), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="samples"):
        criterion(x, torch.tensor([0]))
    with pytest.raises(ValueError, match="level_weights"):
        HierarchicalCrossEntropy(paper_tree, level_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="non-negative"):
        HierarchicalCrossEntropy(paper_tree, level_weights=[1.0, -2.0, 1.0])
    with pytest.raises(ValueError, match="reduction"):
        HierarchicalCrossEntropy(paper_tree, reduction="avg")


# ---------------------------------------------------------------------------- autograd
@pytest.mark.parametrize("partition, stop", CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck(partition, stop, reduction, random_tree):
    tree = random_tree(2, 12)
    rng = np.random.default_rng(2)
    labels = torch.as_tensor(np.append(rng.integers(0, tree.n_classes, 4), -1))
    criterion = HierarchicalCrossEntropy(tree, partition, stop, reduction, level_weights=rng.uniform(0.5, 2, tree.n_levels))
    x = torch.randn(5, criterion.n_outputs, dtype=torch.float64, requires_grad=True)
    if reduction == "none":
        signs = torch.tensor([1.0, -2.0, 0.5, -1.0, 3.0], dtype=torch.float64)  # negative upstream grads too
        assert torch.autograd.gradcheck(lambda s: criterion(s, labels) * signs, (x,))
    else:
        assert torch.autograd.gradcheck(lambda s: criterion(s, labels), (x,))
    masked = HierarchicalCrossEntropy(tree, partition, stop, reduction, mask_value=-1.0)
    assert torch.autograd.gradcheck(lambda s: masked(s, labels).sum(), (x,))


@pytest.mark.parametrize("partition, stop", CASES)
def test_large_scores_are_stable(partition, stop, random_tree):
    tree = random_tree(3, 40)
    criterion = HierarchicalCrossEntropy(tree, partition, stop)
    for dtype in (torch.float32, torch.float64):
        x = (torch.randn(6, criterion.n_outputs, dtype=dtype) * 1e4).requires_grad_()
        loss = criterion(x, torch.as_tensor(np.arange(6) % tree.n_classes))
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(x.grad).all()


def test_masked_classes_get_no_gradient_and_impossible_labels_give_inf(random_tree):
    tree = random_tree(4, 20)
    x = torch.randn(2, tree.n_classes)
    x[:, 0] = -math.inf
    x.requires_grad_()
    criterion = HierarchicalCrossEntropy(tree, "sibling")
    leaf = int(np.flatnonzero(tree.is_leaf & (np.arange(20) != 0) & (tree.paths[:, 0] != 0))[0]) if (tree.paths[:, 0] != 0).any() else None
    if leaf is not None:
        criterion(x, torch.tensor([leaf, leaf])).backward()
        assert torch.isfinite(x.grad).all() and (x.grad[:, 0] == 0).all()
    assert criterion(x.detach(), torch.tensor([0, 0])).item() == math.inf


# ---------------------------------------------------------------------------- module plumbing
def test_buffers_pickling_and_state_dict(paper_tree):
    criterion = HierarchicalCrossEntropy(paper_tree, "sibling", stop=True, level_weights=[1.0, 0.5, 0.25])
    assert criterion.state_dict() == {} or all(not k.startswith(("src", "paths")) for k in criterion.state_dict())
    assert {"src", "paths_ext", "col_group"} <= {name for name, _ in criterion.named_buffers()}
    x = torch.randn(3, criterion.n_outputs)
    y = torch.tensor([3, 6, 1])
    expected = criterion(x, y)
    clone = pickle.loads(pickle.dumps(criterion))
    torch.testing.assert_close(clone(x, y), expected)
    buffer = io.BytesIO()
    torch.save(criterion, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    torch.testing.assert_close(loaded(x, y), expected)
    torch.testing.assert_close(copy.deepcopy(criterion)(x, y), expected)
    criterion.load_state_dict(criterion.state_dict())
    doubled = criterion.to(torch.float64)
    torch.testing.assert_close(doubled(x.double(), y), expected.double(), rtol=1e-5, atol=1e-6)
    assert "partition='sibling'" in repr(criterion)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_to_cuda_moves_buffers_and_matches_cpu(random_tree):
    tree = random_tree(5, 200)
    criterion = HierarchicalCrossEntropy(tree, "sibling", stop=True)
    x = torch.randn(16, criterion.n_outputs, dtype=torch.float64, requires_grad=True)
    y = torch.as_tensor(np.random.default_rng(5).integers(0, tree.n_classes, 16))
    loss = criterion(x, y)
    loss.backward()
    cuda = criterion.to("cuda")
    assert cuda.src.device.type == "cuda"
    xc = x.detach().cuda().requires_grad_()
    loss_c = cuda(xc, y.cuda())
    loss_c.backward()
    torch.testing.assert_close(loss_c.cpu(), loss.detach())
    torch.testing.assert_close(xc.grad.cpu(), x.grad)
