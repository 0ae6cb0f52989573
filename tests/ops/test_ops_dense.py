"""The dense level tensors of ``ops.dense`` (the paper's tensor methods) on NumPy, torch, array-api-strict (and CUDA/CuPy when present)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiclass_parallel import (
    Tree,
    flatten_for_training,
    labels_to_paths,
    partition_scores,
)
from hiclass_parallel._backend import to_numpy as host

MU = -99.0  # a finite masking value keeps the paper's matrices comparable with ==


def symbolic_scores(n_samples: int, n_classes: int) -> np.ndarray:
    """score[b, c] = 10 * (b + 1) + (c + 1): the paper's y_hat_{bc}, readable in failures."""
    return 10.0 * np.arange(1, n_samples + 1)[:, None] + np.arange(1, n_classes + 1)[None, :]


def test_paper_masked_scores_and_flattened_rows(paper_tree, to_xp):
    scores = symbolic_scores(5, 9)
    partitioned = partition_scores(to_xp(scores), paper_tree, mask_value=MU)
    got = host(partitioned)
    assert got.shape == (5, 3, 9)
    # eq. (transformed_scores): each slice b holds y_hat_{bc} at the class's level, mu elsewhere.
    mask = paper_tree.mask
    for b in range(5):
        expected = np.where(mask, MU, scores[b][None, :])
        np.testing.assert_array_equal(got[b], expected)
    # eq. (transformed_labels): labels (4, 7, 2, 6, 3) in the paper, shifted to 0-based.
    labels = np.array([3, 6, 1, 5, 2])
    paths = labels_to_paths(to_xp(labels), paper_tree)
    np.testing.assert_array_equal(host(paths), [[0, 3, -1], [0, 3, 6], [1, -1, -1], [1, 5, -1], [0, 2, -1]])
    # Section 3.1: flattening and removing padded rows leaves 10 rows, in the paper's order.
    rows, targets = flatten_for_training(partitioned, paths)
    assert host(targets).tolist() == [0, 3, 0, 3, 6, 1, 1, 5, 0, 2]
    sample_of_row = [0, 0, 1, 1, 1, 2, 3, 3, 4, 4]
    level_of_row = [0, 1, 0, 1, 2, 0, 0, 1, 0, 1]
    for row, b, level in zip(host(rows), sample_of_row, level_of_row):
        np.testing.assert_array_equal(row, np.where(mask[level], MU, scores[b]))


def test_results_stay_in_namespace_and_dtype(paper_tree, to_xp):
    from hiclass_parallel._backend import array_namespace, device

    for dtype in (np.float32, np.float64):
        scores = to_xp(symbolic_scores(2, 9).astype(dtype))
        out = partition_scores(scores, paper_tree)
        assert array_namespace(out) is array_namespace(scores)
        assert device(out) == device(scores)
        assert host(out).dtype == dtype
    for dtype in (np.int32, np.int64):
        labels = to_xp(np.array([8, 0], dtype=dtype))
        paths = labels_to_paths(labels, paper_tree)
        assert array_namespace(paths) is array_namespace(labels)
        assert host(paths).dtype == dtype


@pytest.mark.parametrize("mask_value", [-math.inf, math.nan, 0.0, -1e9])
def test_mask_values(paper_tree, mask_value):
    got = partition_scores(symbolic_scores(1, 9), paper_tree, mask_value=mask_value)[0]
    masked = got[paper_tree.mask]
    if math.isnan(mask_value):
        assert np.isnan(masked).all()
    else:
        assert (masked == mask_value).all()
    assert (got[~paper_tree.mask] == np.arange(11.0, 20.0)).all()


def test_broadcasting_over_leading_axes(paper_tree, to_xp):
    scores = np.random.default_rng(0).normal(size=(2, 3, 9))
    got = host(partition_scores(to_xp(scores), paper_tree))
    assert got.shape == (2, 3, 3, 9)
    np.testing.assert_array_equal(got[1, 2], np.where(paper_tree.mask, -np.inf, scores[1, 2][None]))
    one = host(partition_scores(to_xp(scores[0, 0]), paper_tree))
    assert one.shape == (3, 9)
    assert host(labels_to_paths(to_xp(np.array([[6, 2]])), paper_tree)).shape == (1, 2, 3)


def test_preallocated_out(paper_tree, to_xp):
    scores = to_xp(symbolic_scores(5, 9))
    out = to_xp(np.full((5, 3, 9), 123.0))
    result = partition_scores(scores, paper_tree, mask_value=MU, out=out)
    assert result is out
    np.testing.assert_array_equal(host(out), host(partition_scores(scores, paper_tree, mask_value=MU)))
    with pytest.raises(ValueError, match=r"out has shape \(5, 3, 8\)"):
        partition_scores(scores, paper_tree, out=to_xp(np.zeros((5, 3, 8))))


def test_torch_autograd_flows_through_partition():
    torch = pytest.importorskip("torch")
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    scores = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    paths = labels_to_paths(torch.tensor([3, 6, 1, 5]), tree)
    rows, targets = flatten_for_training(partition_scores(scores, tree), paths)
    torch.nn.functional.cross_entropy(rows, targets).backward()
    assert torch.isfinite(scores.grad).all() and scores.grad.abs().sum() > 0


def test_bad_inputs_name_the_problem(paper_tree):
    with pytest.raises(ValueError, match=r"scores have shape \(5, 8\).*9"):
        partition_scores(np.zeros((5, 8)), paper_tree)
    with pytest.raises(ValueError, match="mask_value -inf cannot be stored in scores of dtype int64"):
        partition_scores(np.zeros((5, 9), dtype=np.int64), paper_tree)
    with pytest.raises(IndexError, match="label id 9 is out of range"):
        labels_to_paths(np.array([0, 9]), paper_tree)
    with pytest.raises(IndexError, match="label id -1 is out of range"):
        labels_to_paths(np.array([-1]), paper_tree)
    with pytest.raises(TypeError, match="integer node ids"):
        labels_to_paths(np.array([1.0]), paper_tree)
    with pytest.raises(ValueError, match="do not match paths"):
        flatten_for_training(np.zeros((2, 3, 9)), np.zeros((3, 3), dtype=np.int64))


def test_device_buffers_are_cached(paper_tree):
    torch = pytest.importorskip("torch")
    labels = torch.tensor([1, 2])
    labels_to_paths(labels, paper_tree)
    cached = dict(paper_tree._device_cache)
    labels_to_paths(labels, paper_tree)
    assert paper_tree._device_cache.keys() == cached.keys()
    assert all(paper_tree._device_cache[k] is v for k, v in cached.items())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), batch=st.integers(0, 6))
def test_random_trees_with_shuffled_ids(seed, n, batch, random_tree):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    scores = rng.normal(size=(batch, n)).astype(np.float32)
    labels = rng.integers(0, n, size=batch)
    partitioned = partition_scores(scores, tree)
    for b in range(batch):
        for c in range(n):
            assert partitioned[b, tree.depth[c], c] == scores[b, c]
            assert np.isneginf(np.delete(partitioned[b, :, c], tree.depth[c])).all()
    paths = labels_to_paths(labels, tree)
    rows, targets = flatten_for_training(partitioned, paths)
    assert rows.shape == (int((paths >= 0).sum()), n)
    # Every target is unmasked in its own row, so a cross-entropy over the row is finite.
    assert np.isfinite(rows[np.arange(rows.shape[0]), targets]).all()
