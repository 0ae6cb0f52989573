"""The optional C kernel of the lean engine (ops/engine/_segment.c) against the NumPy route."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hiclass_parallel import partition_scores
from hiclass_parallel.losses import HierarchicalCrossEntropy
from hiclass_parallel.ops.engine import _native
from hiclass_parallel.ops.engine._backends import backend_for, use_backend
from hiclass_parallel.ops.engine._layout import layout
from hiclass_parallel.ops.groups import group_log_softmax, group_logsumexp, n_outputs

pytestmark = pytest.mark.skipif(
    not _native.available(),
    reason="the optional C kernel was not built (no C compiler at install time) or HICLASS_PARALLEL_NATIVE=0",
)


@pytest.fixture
def every_partition():
    """Let the kernel serve small trees and the sibling partition too (normally the NumPy
    layout does: their groups are small)."""
    with use_backend("native"):
        yield


def numpy_route(fn, *args, **kwargs):
    with use_backend("numpy"):
        return fn(*args, **kwargs)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), rows=st.integers(0, 6),
       partition=st.sampled_from(["level", "sibling"]), stop=st.booleans(), dtype=st.sampled_from(["float32", "float64"]))
def test_matches_numpy_route(seed, n, rows, partition, stop, dtype, random_tree):
    tree = random_tree(seed, n, max_top=5)
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows, n_outputs(tree, partition, stop))) * 5).astype(dtype)
    x[rng.random(x.shape) < 0.2] = -np.inf  # scattered -inf, and whole groups of it
    tol = 1e-5 if dtype == "float32" else 1e-12
    for fn in (group_log_softmax, group_logsumexp):
        with use_backend("native"):
            got = fn(x, tree, partition, stop)
        expected = numpy_route(fn, x, tree, partition, stop)
        assert got.dtype == x.dtype
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_level_partition_equals_the_papers_dense_softmax(random_tree):
    """A tree whose levels are large enough for the default rule to pick the kernel."""
    tree = random_tree(3, 400, max_top=5)
    x = np.random.default_rng(0).normal(size=(5, tree.n_classes)) * 3
    assert backend_for(x, layout(tree, "level", False)).name == "native", "a large tree's levels take the C kernel"
    got = group_log_softmax(x, tree)
    dense = torch.log_softmax(partition_scores(torch.as_tensor(x), tree), -1).numpy()
    np.testing.assert_allclose(got, dense[:, tree.depth, np.arange(tree.n_classes)], rtol=1e-10, atol=1e-10)


def test_torch_tensors_gradients_and_loss(every_partition, random_tree):
    tree = random_tree(5, 200, max_top=5)
    for partition in ("level", "sibling"):
        x = torch.randn(6, tree.n_classes, dtype=torch.float64, requires_grad=True)
        w = torch.randn(6, tree.n_classes, dtype=torch.float64)
        (group_log_softmax(x, tree, partition) * w).sum().backward()
        grad = x.grad.clone()
        x.grad = None
        (numpy_route(group_log_softmax, x, tree, partition) * w).sum().backward()
        torch.testing.assert_close(grad, x.grad)
        y = torch.as_tensor(np.random.default_rng(1).integers(-1, tree.n_classes, 6))
        criterion = HierarchicalCrossEntropy(tree, partition)
        torch.testing.assert_close(criterion(x, y), numpy_route(criterion, x, y))


def test_strided_and_batched_inputs(every_partition, random_tree):
    tree = random_tree(7, 120, max_top=5)
    x = np.random.default_rng(2).normal(size=(3, 4, tree.n_classes)).astype(np.float32)
    strided = np.asfortranarray(x[0])
    np.testing.assert_allclose(group_log_softmax(strided, tree), numpy_route(group_log_softmax, strided, tree), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(group_log_softmax(x, tree), numpy_route(group_log_softmax, x, tree), rtol=1e-5, atol=1e-5)


def test_finite_mask_values_and_other_dtypes_use_numpy(every_partition, monkeypatch, random_tree):
    """The kernel computes float32/float64 without a finite mask value; the rest runs on NumPy."""
    tree = random_tree(8, 50, max_top=5)
    x = np.random.default_rng(3).normal(size=(2, tree.n_classes))
    calls = []
    real = _native.group_lse
    monkeypatch.setattr(_native, "group_lse", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    group_log_softmax(x, tree)
    assert len(calls) == 1
    for args in ((x, tree, "level", False, -5.0), (x.astype(np.float16), tree)):
        got = group_log_softmax(*args)
        np.testing.assert_allclose(got, numpy_route(group_log_softmax, *args), rtol=1e-3)
    assert len(calls) == 1


def test_loading_keeps_denormals():
    """-ffast-math must not reach the link: GCC would add code that makes the whole process
    flush denormal numbers to zero when the library loads."""
    assert _native.available()
    tiny = np.float32(1e-38) / np.float32(1000)
    assert tiny != 0 and tiny < np.finfo(np.float32).tiny
