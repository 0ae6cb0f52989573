"""Synthetic hierarchical classification data: :func:`make_hierarchical_classification`.

Like :func:`sklearn.datasets.make_classification`, with a class tree: every class has a mean
that drifts from its parent's mean, samples are Gaussian around their class's mean, and a
chosen fraction of labels is truncated to an ancestor (coarse labels, the paper's "labels at
any depth"). Everything is vectorised over nodes and samples (a loop over levels only), so a
100,000-class tree takes well under a second.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from ..tree import PAD, Tree

__all__ = ["make_hierarchical_classification", "random_tree"]


def _level_sizes(n_classes: int, depth: int, branching: float) -> np.ndarray:
    """Classes per level, growing by ``branching`` per level, summing to ``n_classes``."""
    if n_classes < depth:
        raise ValueError(f"n_classes={n_classes} is too small for depth={depth}: each level needs a class")
    weights = float(branching) ** np.arange(1, depth + 1, dtype=np.float64)
    sizes = np.maximum(1, np.floor(n_classes * weights / weights.sum())).astype(np.int64)
    # Fix the rounding on the deepest levels (the largest ones), keeping every level >= 1.
    level = depth - 1
    while sizes.sum() != n_classes:
        step = 1 if sizes.sum() < n_classes else -1
        if step > 0 or sizes[level] > 1:
            sizes[level] += step
        else:
            level -= 1
    return sizes


def _names(parents: np.ndarray, depth: np.ndarray, n_levels: int) -> list[str]:
    """Readable hierarchical names: ``c2`` for the third top-level class, ``c2.0`` for its
    first child, and so on (ranks among siblings in id order)."""
    n = parents.size
    order = np.lexsort((np.arange(n), parents))
    sorted_parents = parents[order]
    first = np.searchsorted(sorted_parents, sorted_parents, side="left")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - first
    names = np.empty(n, dtype=object)
    for level in range(n_levels):
        nodes = np.flatnonzero(depth == level)
        ranks = rank[nodes].astype(str)
        if level == 0:
            names[nodes] = np.char.add("c", ranks).tolist()
        else:
            prefix = names[parents[nodes]].astype(str)
            names[nodes] = np.char.add(np.char.add(prefix, "."), ranks).tolist()
    return names.tolist()


def random_tree(
    n_classes: int | None = None,
    branching: float = 3,
    depth: int = 3,
    labels: str = "str",
    random_state: Any = None,
) -> Tree:
    """A random class tree with ``depth`` levels.

    Parameters
    ----------
    n_classes : int, default=None
        Number of classes. ``None``: a complete tree, ``branching`` classes at the top
        level and ``branching`` children under every other internal class
        (``branching + branching**2 + ... + branching**depth`` classes).
        Otherwise level sizes grow by a factor ``branching`` and each class picks its parent
        uniformly at random among the classes of the level above, so the number of children
        varies and some classes above the deepest level are leaves.
    branching : float, default=3
        Children per class (complete tree; an int) or growth factor per level.
    depth : int, default=3
        Number of levels.
    labels : {"str", "int"}, default="str"
        ``"str"``: names such as ``"c1.0.2"`` (path of sibling ranks); ``"int"``: node ids.
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    tree : Tree

    Examples
    --------
    >>> from hiclass_parallel.datasets import random_tree
    >>> random_tree(branching=2, depth=2).labels.tolist()
    ['c0', 'c1', 'c0.0', 'c0.1', 'c1.0', 'c1.1']
    >>> random_tree(n_classes=100_000, depth=6, random_state=0)
    Tree(n_classes=100000, n_levels=6, n_leaves=66761)
    """
    rng = check_random_state(random_state)
    if n_classes is None:
        if int(branching) != branching or branching < 1:
            raise ValueError(f"a complete tree needs an integer branching >= 1, got {branching!r}")
        b = int(branching)
        sizes = b ** np.arange(1, depth + 1, dtype=np.int64)
        parents = [np.full(b, PAD, dtype=np.int64)]
        start = 0
        for level in range(1, depth):
            parents.append(np.repeat(np.arange(start, start + sizes[level - 1]), b))
            start += sizes[level - 1]
    else:
        sizes = _level_sizes(int(n_classes), depth, branching)
        parents = [np.full(sizes[0], PAD, dtype=np.int64)]
        start = 0
        for level in range(1, depth):
            above = sizes[level - 1]
            # Every class above gets a child while there are enough children, then the rest
            # pick parents at random: the depth is exactly `depth`, branching varies.
            n_spread = min(above, sizes[level])
            chosen = np.concatenate([
                rng.permutation(above)[:n_spread],
                rng.randint(0, above, size=sizes[level] - n_spread),
            ])
            parents.append(np.sort(chosen) + start)
            start += above
    parents = np.concatenate(parents)
    if labels == "int":
        return Tree.from_parents(parents)
    if labels != "str":
        raise ValueError(f"labels must be 'str' or 'int', got {labels!r}")
    depth_of = np.repeat(np.arange(depth), sizes)
    return Tree.from_parents(parents, labels=_names(parents, depth_of, depth))


@validate_params(
    {
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "n_features": [Interval(Integral, 1, None, closed="left")],
        "tree": [Tree, None],
        "n_classes": [Interval(Integral, 1, None, closed="left"), None],
        "branching": [Interval(Real, 1, None, closed="left")],
        "depth": [Interval(Integral, 1, None, closed="left")],
        "class_sep": [Interval(Real, 0, None, closed="left")],
        "drift": [Interval(Real, 0, None, closed="left")],
        "noise": [Interval(Real, 0, None, closed="left")],
        "truncate_fraction": [Interval(Real, 0, 1, closed="both")],
        "terminal_fraction": [Interval(Real, 0, 1, closed="both")],
        "labels": [StrOptions({"str", "int"})],
        "return_truth": ["boolean"],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def make_hierarchical_classification(
    n_samples: int = 1000,
    n_features: int = 20,
    *,
    tree: Tree | None = None,
    n_classes: int | None = None,
    branching: float = 3,
    depth: int = 3,
    class_sep: float = 1.0,
    drift: float = 0.5,
    noise: float = 1.0,
    truncate_fraction: float = 0.0,
    terminal_fraction: float = 0.0,
    labels: str = "str",
    return_truth: bool = False,
    random_state: Any = None,
) -> tuple:
    """Generate a random hierarchical classification problem.

    Each class ``c`` has a mean ``mu[c] = mu[parent(c)] + offset[c]`` (top-level classes
    start from the origin), with ``offset[c]`` normal with standard deviation
    ``class_sep * drift**depth(c)`` per feature: classes drift away from their parent, less
    at every level, so siblings deep in the tree are harder to tell apart. Each sample gets a
    true class -- a leaf, or with probability ``terminal_fraction`` an internal class (the
    sample *is* that coarse class) -- and features ``mu[true] + noise * N(0, I)``. Then a
    fraction ``truncate_fraction`` of the labels below the top level is replaced by an
    ancestor at a uniformly chosen shallower depth (a coarse label of a finer truth).

    Parameters
    ----------
    n_samples : int, default=1000
        Number of samples.
    n_features : int, default=20
        Number of features (all informative).
    tree : Tree, default=None
        The class tree; ``None`` draws one with :func:`random_tree` from ``n_classes``,
        ``branching``, ``depth`` and ``labels``.
    n_classes : int, default=None
        Number of classes of the random tree; ``None``: a complete tree.
    branching : float, default=3
        Children per class (complete tree) or growth of level sizes (``n_classes`` given).
    depth : int, default=3
        Number of levels of the random tree.
    class_sep : float, default=1.0
        Spread of the top-level class means (per feature); larger is easier.
    drift : float, default=0.5
        Factor by which the spread of class means shrinks at each level.
    noise : float, default=1.0
        Standard deviation of the features around a sample's class mean.
    truncate_fraction : float, default=0.0
        Fraction of samples (below the top level) whose label is cut to an ancestor.
    terminal_fraction : float, default=0.0
        Fraction of samples whose true class is an internal class rather than a leaf.
    labels : {"str", "int"}, default="str"
        Labels of a random tree: names such as ``"c1.0.2"``, or node ids.
    return_truth : bool, default=False
        Also return the true (untruncated) label of each sample.
    random_state : int, RandomState instance or None, default=None
        Seed for the tree, the means, the samples and the truncation.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        Features.
    y : ndarray of shape (n_samples,)
        Labels at any depth (an object array of str, or int64 for ``labels="int"``).
    tree : Tree
        The class tree.
    y_true : ndarray of shape (n_samples,)
        The true class of each sample; only when ``return_truth``.

    Examples
    --------
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=6, n_features=4, branching=2, depth=3, truncate_fraction=0.5, random_state=0)
    >>> X.shape, tree
    ((6, 4), Tree(n_classes=14, n_levels=3, n_leaves=8))
    >>> y.tolist()
    ['c1.0.1', 'c0', 'c1.1.1', 'c1.0', 'c0.0.1', 'c1.1.1']

    At WordNet's scale:

    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=10_000, n_features=32, n_classes=100_000, depth=8, random_state=0)
    >>> tree.n_classes, X.shape
    (100000, (10000, 32))
    """
    rng = check_random_state(random_state)
    if tree is None:
        tree = random_tree(n_classes=n_classes, branching=branching, depth=depth, labels=labels, random_state=rng)
    C = tree.n_classes

    # Class means, one level at a time (a parent's mean is ready before its children's).
    means = np.empty((C, n_features), dtype=np.float64)
    for level in range(tree.n_levels):
        nodes = np.flatnonzero(tree.depth == level)
        offset = rng.normal(scale=class_sep * drift**level, size=(nodes.size, n_features))
        if level == 0:
            means[nodes] = offset
        else:
            means[nodes] = means[tree.parents[nodes]] + offset

    # True classes: leaves, or internal classes for a `terminal_fraction` of the samples.
    leaves = tree.leaves
    internal = np.flatnonzero(~tree.is_leaf)
    true = leaves[rng.randint(0, leaves.size, size=n_samples)]
    if terminal_fraction > 0 and internal.size:
        coarse = rng.random_sample(n_samples) < terminal_fraction
        true[coarse] = internal[rng.randint(0, internal.size, size=int(coarse.sum()))]

    X = means[true] + rng.normal(scale=noise, size=(n_samples, n_features)) if noise > 0 else means[true].copy()

    # Labels truncated to a uniformly chosen shallower ancestor.
    label = true.copy()
    depth_true = tree.depth[true].astype(np.int64)
    if truncate_fraction > 0:
        cut = (rng.random_sample(n_samples) < truncate_fraction) & (depth_true > 0)
        new_depth = np.floor(rng.random_sample(int(cut.sum())) * depth_true[cut]).astype(np.int64)
        label[cut] = tree.paths[true[cut], new_depth]

    y = tree.labels[label]
    if return_truth:
        return X, y, tree, tree.labels[true]
    return X, y, tree
