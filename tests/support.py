"""Helpers shared by tests in several folders (pytest puts ``tests/`` on the path with its conftest)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from hiclass_parallel.dag import Dag
from hiclass_parallel.ops.groups import node_log_probs

#: (stop, semantics) settings every best-first route is checked under.
BEST_FIRST_OPTIONS = [(False, "partial"), (True, "partial"), (True, "terminal")]


def assert_same_paths(paths, log_prob, expected, expected_lp, x, tree, stop, semantics):
    """Equal paths, except where candidates tie up to rounding.

    Both routes break exact ties by the lowest node id; but two paths through different
    groups that tie mathematically can differ in the last ulp, and the two routes sum each
    group's exponentials in different orders (so do the exhaustive NumPy and CUDA routes).
    There, any path whose exhaustive value equals the best up to rounding is accepted.
    """
    torch.testing.assert_close(log_prob, expected_lp)
    joint = node_log_probs(x, tree, "sibling", stop, semantics)
    last = lambda p: p.gather(-1, ((p >= 0).sum(-1, keepdim=True) - 1).clamp_min(0)).squeeze(-1)
    differ = (paths != expected).any(-1)
    for index in differ.nonzero().tolist():
        row = index[0]
        mine, theirs = joint[row, last(paths[tuple(index)])], joint[row, last(expected[tuple(index)])]
        assert torch.isclose(mine, theirs, rtol=1e-5, atol=1e-6), (index, paths[tuple(index)], expected[tuple(index)])


def complete_tree(arity: int, depth: int):
    """A complete ``arity``-ary tree of ``depth`` levels (``arity`` top-level classes), ids
    breadth-first: 4 and 6 give 5,460 nodes."""
    from hiclass_parallel import Tree

    parents = [-1] * arity
    frontier = list(range(arity))
    for _ in range(depth - 1):
        start = len(parents)
        parents.extend(p for p in frontier for _ in range(arity))
        frontier = list(range(start, len(parents)))
    return Tree.from_parents(parents)


def random_dag(rng: np.random.Generator, n: int) -> Dag:
    """Labels v0..v{n-1} in shuffled order; each node gets 1-3 parents among earlier nodes."""
    order = rng.permutation(n)
    edges = []
    for i in range(n):
        k = 0 if i == 0 else int(rng.integers(0, min(3, i) + 1))
        parents = rng.choice(i, size=k, replace=False) if k else []
        if k == 0:
            edges.append((f"v{order[i]}", None))
        edges += [(f"v{order[i]}", f"v{order[p]}") for p in parents]
    return Dag.from_edges(edges)


def renumbered(parents, perm: np.ndarray) -> np.ndarray:
    """The parent array of the same tree with node ``i`` called ``perm[i]``: shuffled ids, so that
    node order says nothing about depth."""
    parents = np.asarray(parents)
    out = np.full(len(parents), -1, dtype=np.int64)
    has_parent = parents >= 0
    out[perm[has_parent]] = perm[parents[has_parent]]
    return out


def shuffled_ids(tree, rng: np.random.Generator):
    """``tree`` with its node ids permuted by one draw of ``rng``, labels kept with their nodes."""
    from hiclass_parallel import Tree

    perm = rng.permutation(tree.n_classes)
    labels = np.asarray(tree.labels)[np.argsort(perm)]
    return Tree.from_parents(renumbered(tree.parents, perm), labels=labels.tolist())


def sparsify(X, keep: float, rng: np.random.Generator):
    """Rows like TF-IDF from dense ``X``: ``|X|`` where a uniform draw of ``rng`` is below
    ``keep``, else zero; a float32 CSR matrix."""
    import scipy.sparse as sp

    return sp.csr_matrix(np.where(rng.uniform(size=X.shape) < keep, np.abs(X), 0.0).astype(np.float32))


def sparse_rows(n_rows: int, n_features: int, density: float, seed: int, dtype=np.float32, format: str = "csr"):
    """Random sparse rows (``scipy.sparse.random``: ``density`` of the entries uniform in [0, 1))."""
    import scipy.sparse as sp

    return sp.random(n_rows, n_features, density=density, random_state=seed, format=format, dtype=dtype)


def text_like(n_samples: int = 300, n_features: int = 40, seed: int = 0, fingerprints: bool = False,
              keep: float = 0.4, shuffle_ids: bool = False, **make_kwargs):
    """Sparse non-negative rows (like TF-IDF) of a 3-level tree, labels at any depth: ``(X, y,
    tree)``; ``make_kwargs`` change :func:`~hiclass_parallel.datasets.make_hierarchical_classification`'s
    settings (3 branches, 3 levels, 30% of the labels at internal nodes). ``keep``: the share of
    entries kept (:func:`sparsify`). ``shuffle_ids``: the tree's node ids shuffled
    (:func:`shuffled_ids`, drawn after ``X``). ``fingerprints``: each row gets one more feature of
    its own (column ``n_features + row``), so that what a model trained on can be read off its
    weights."""
    import scipy.sparse as sp

    from hiclass_parallel.datasets import make_hierarchical_classification

    settings = {"branching": 3, "depth": 3, "terminal_fraction": 0.3, **make_kwargs}
    X, y, tree = make_hierarchical_classification(n_samples=n_samples, n_features=n_features, random_state=seed,
                                                  **settings)
    rng = np.random.default_rng(seed)
    Xs = sparsify(X, keep, rng)
    if shuffle_ids:
        tree = shuffled_ids(tree, rng)
    if fingerprints:
        Xs = sp.hstack([Xs, sp.identity(n_samples, dtype=np.float32, format="csr")], format="csr")
    return Xs, y, tree


class Pairs(Dataset):
    """A torch dataset of ``(X[i], y[i])`` pairs, as a user's streamed data would give them."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return self.X[i], self.y[i]
