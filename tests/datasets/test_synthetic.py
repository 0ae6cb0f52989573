"""make_hierarchical_classification and random_tree."""

from __future__ import annotations

import time

import numpy as np
import pytest

from hiclass_parallel import Tree
from hiclass_parallel.datasets import make_hierarchical_classification, random_tree


def test_complete_tree_shape_and_names():
    tree = random_tree(branching=3, depth=3)
    assert (tree.n_classes, tree.n_levels) == (39, 3)
    assert np.bincount(tree.depth).tolist() == [3, 9, 27]
    assert tree.is_leaf[tree.depth == 2].all() and not tree.is_leaf[tree.depth < 2].any()
    # Names spell the path of sibling ranks; a child's name extends its parent's.
    child = tree.to_ids(["c2.1.0"])[0]
    assert tree.to_labels(tree.paths[child]).tolist() == ["c2", "c2.1", "c2.1.0"]
    assert random_tree(branching=2, depth=2, labels="int").has_default_labels


@pytest.mark.parametrize("n_classes,depth", [(5, 5), (50, 3), (1000, 6)])
def test_random_tree_has_exact_size_and_depth(n_classes, depth):
    tree = random_tree(n_classes=n_classes, depth=depth, branching=2.5, random_state=0)
    assert tree.n_classes == n_classes and tree.n_levels == depth
    assert (np.bincount(tree.depth) >= 1).all()


def test_random_tree_is_seeded():
    a = random_tree(n_classes=300, depth=4, random_state=1)
    assert a == random_tree(n_classes=300, depth=4, random_state=1)
    assert a != random_tree(n_classes=300, depth=4, random_state=2)


def test_shapes_types_and_determinism():
    X, y, tree = make_hierarchical_classification(n_samples=50, n_features=7, random_state=3)
    assert X.shape == (50, 7) and X.dtype == np.float64
    assert y.shape == (50,) and y.dtype == object and isinstance(tree, Tree)
    X2, y2, _ = make_hierarchical_classification(n_samples=50, n_features=7, random_state=3)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    _, y_int, tree_int = make_hierarchical_classification(n_samples=20, labels="int", random_state=0)
    assert y_int.dtype == np.int64 and tree_int.has_default_labels


def test_without_truncation_labels_are_leaves():
    _, y, tree = make_hierarchical_classification(n_samples=300, random_state=0)
    assert tree.is_leaf[tree.to_ids(y)].all()


def test_truncation_fraction_and_ancestry():
    X, y, tree, truth = make_hierarchical_classification(
        n_samples=4000, branching=3, depth=3, truncate_fraction=0.4, return_truth=True, random_state=0
    )
    label, true = tree.to_ids(y), tree.to_ids(truth)
    cut = label != true
    assert abs(cut.mean() - 0.4) < 0.03  # every true class is a leaf at depth 2 here
    # A truncated label is a proper ancestor of the truth, at every shallower depth.
    assert (tree.paths[true[cut], tree.depth[label[cut]]] == label[cut]).all()
    assert set(np.unique(tree.depth[label[cut]])) == {0, 1}


def test_terminal_fraction_gives_internal_truths():
    _, y, tree = make_hierarchical_classification(n_samples=3000, terminal_fraction=0.3, random_state=0)
    internal = ~tree.is_leaf[tree.to_ids(y)]
    assert abs(internal.mean() - 0.3) < 0.03


def test_means_drift_down_the_tree():
    # Without noise every sample sits on its class mean: children are closer to their
    # parent than the top-level classes are to each other.
    X, y, tree, truth = make_hierarchical_classification(
        n_samples=2000, n_features=50, noise=0.0, terminal_fraction=0.5, return_truth=True, random_state=0
    )
    ids = tree.to_ids(truth)
    means = {int(i): X[ids == i][0] for i in np.unique(ids)}
    top = [c for c in means if tree.depth[c] == 0]
    child_gap = [
        np.linalg.norm(means[c] - means[tree.parents[c]])
        for c in means
        if tree.depth[c] == 1 and tree.parents[c] in means
    ]
    top_gap = [np.linalg.norm(means[a] - means[b]) for a in top for b in top if a < b]
    assert np.mean(child_gap) < 0.7 * np.mean(top_gap)


def test_given_tree_is_used():
    tree = Tree.from_dict({"animal": ["dog", "cat"], "plant": None})
    X, y, out = make_hierarchical_classification(n_samples=30, n_features=3, tree=tree, random_state=0)
    assert out is tree and set(y) <= {"dog", "cat", "plant"}


def test_bad_parameters():
    with pytest.raises(ValueError, match="too small"):
        make_hierarchical_classification(n_classes=2, depth=3)
    with pytest.raises(ValueError, match="truncate_fraction"):
        make_hierarchical_classification(truncate_fraction=1.5)
    with pytest.raises(ValueError, match="integer branching"):
        random_tree(branching=2.5)


def test_scales_to_100k_classes_quickly():
    start = time.perf_counter()
    X, y, tree = make_hierarchical_classification(
        n_samples=20_000, n_features=16, n_classes=100_000, depth=10, truncate_fraction=0.3, random_state=0
    )
    elapsed = time.perf_counter() - start
    assert tree.n_classes == 100_000 and tree.n_levels == 10 and X.shape == (20_000, 16)
    assert elapsed < 30  # about a second here; a generous bound, not a benchmark
