"""Training on DAGs with deep unrolling stays finite with the default settings.

A DAG label's copies whose paths the model rules out (a copy deep under wide sibling groups
next to one near the top starts some tens of nats less probable) take a tiny share of the
label's gradient, so the output rows only they train get gradient entries of 1e-21 to 1e-18
and second moments below float32's smallest normal number. LazyAdam's C row update took their
square roots with the approximation that -ffast-math vectorises ``sqrtf`` into, which reads a
subnormal as 0: the weights turned NaN and the next batch that scored them raised
``NonFiniteLossError`` (WordNet's nouns with every hypernym diverged so). These tests fail
without ``moment_root`` (``estimators/networks/_path_step.c``).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import sparse_rows

from hiclass_parallel.dag import Dag
from hiclass_parallel.estimators import LazyAdam, MultiLabelHierarchicalClassifier
from hiclass_parallel.estimators.networks import _native_path_step

needs_kernel = pytest.mark.skipif(not _native_path_step.available(),
                                  reason="the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")


def _tiny_gradient_steps(scale: float, first_moment: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Five LazyAdam steps of an embedding whose gradient entries are ``scale`` times O(1):
    the weights and the second moment."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(40, 64, sparse=True)
    direction = torch.randn(40, 64)
    opt = LazyAdam(emb.parameters(), lr=0.005, first_moment=first_moment)
    for step in range(5):
        idx = torch.randint(0, 40, (10,), generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        (scale * (emb(idx) * direction[idx]).sum()).backward()
        opt.step()
    return emb.weight.detach().clone(), opt.state[emb.weight]["exp_avg_sq"].clone()


@needs_kernel
@pytest.mark.parametrize("first_moment", ["float32", "bfloat16"])
@pytest.mark.parametrize("scale", [1e-15, 1e-18, 1e-19, 1e-20, 1e-21, 1e-23])
def test_the_c_row_update_takes_subnormal_second_moments(monkeypatch, scale, first_moment):
    native, v = _tiny_gradient_steps(scale, first_moment)
    if 1e-20 <= scale <= 1e-18:  # the case under test: squares below the smallest normal float32
        subnormal = (v > 0) & (v < torch.finfo(torch.float32).tiny)
        assert subnormal.any()
    assert torch.isfinite(native).all()
    monkeypatch.setattr("hiclass_parallel.estimators.networks._optim._native_rows", lambda *a: False)
    torch_route, torch_v = _tiny_gradient_steps(scale, first_moment)
    torch.testing.assert_close(v, torch_v, rtol=1e-4, atol=1e-44)  # fast-math rounding; a subnormal's last bit
    # the tolerance of the test of the two routes on ordinary gradients (test_optim.py)
    torch.testing.assert_close(native, torch_route, rtol=1e-4, atol=1e-5 if first_moment == "float32" else 5e-4)


def _chain_dag(rng: np.random.Generator, depth: int = 14, width: int = 20, n_targets: int = 60,
               levels: int = 4, max_parents: int = 3) -> tuple[Dag, np.ndarray]:
    """A deep chain of wide sibling groups (never labelled), and a layered DAG of labelled nodes
    whose nodes take parents at random depths of the chain and in the layer above: a label's
    copies lie at many depths, and copies multiply down the layers. Returns the DAG and the ids
    of the labelled nodes."""
    labels: list[str] = []
    parents: list[list[int]] = []
    hubs: list[int] = []  # the chain: the first node of each level is the parent of the next level
    for d in range(depth):
        for k in range(width):
            labels.append(f"c{d}_{k}")
            parents.append([hubs[-1]] if hubs else [])
        hubs.append(len(labels) - width)
    previous: list[int] = []
    per_level = n_targets // levels
    for level in range(levels):
        here = []
        for i in range(per_level):
            chosen = set()
            if previous and rng.random() < 0.7:
                chosen.add(int(rng.choice(previous)))
            for _ in range(int(rng.integers(1, max_parents))):
                d = int(rng.integers(depth))
                chosen.add(hubs[d] + (0 if rng.random() < 0.5 else int(rng.integers(width))))
            labels.append(f"t{level}_{i}")
            parents.append(sorted(chosen))
            here.append(len(labels) - 1)
        previous = here
    return Dag(labels, parents), np.arange(depth * width, len(labels))


def _long_texts(rng: np.random.Generator, dag: Dag, targets: np.ndarray, n: int, n_features: int = 2000,
                noise: int = 150) -> tuple[sp.csr_matrix, list[list[str]]]:
    """One or two labels per sample; its text: six words of each label and of each of their
    ancestors (through every parent), and ``noise`` random words, L2-normalised."""
    words = rng.integers(0, n_features, size=(dag.n_nodes, 6))
    ancestors = dag.ancestor_sets()
    rows, cols, y = [], [], []
    for s in range(n):
        chosen = rng.choice(targets, int(rng.integers(1, 3)), replace=False)
        y.append([str(dag.labels[i]) for i in chosen])
        nodes = set(chosen.tolist()).union(*(ancestors[i] for i in chosen))
        present = np.unique(np.concatenate([words[sorted(nodes)].ravel(), rng.integers(0, n_features, noise)]))
        rows.append(np.full(present.size, s))
        cols.append(present)
    rows_a, cols_a = np.concatenate(rows), np.concatenate(cols)
    values = rng.random(rows_a.size).astype(np.float32) + 0.5
    X = sp.csr_matrix((values, (rows_a, cols_a)), shape=(n, n_features))
    X.data /= np.repeat(np.sqrt(X.multiply(X).sum(1).A1), np.diff(X.indptr)).astype(np.float32)
    return X, y


def _assert_finite(clf: MultiLabelHierarchicalClassifier) -> None:
    for name, p in clf.net_.module_.named_parameters():
        assert torch.isfinite(p).all(), f"{name} holds non-finite weights"


def test_a_label_with_a_copy_deep_under_wide_groups_trains():
    # x is a top-level class's child and the end of a 12-level chain of 40-wide groups: the deep
    # copy starts about 40 nats less probable; the rows only it trains went NaN at the first step
    edges = [("a", None), ("x", "a")]
    parent = None
    for d in range(12):
        edges += [(f"c{d}_{k}", parent) for k in range(40)]
        parent = f"c{d}_0"
    edges.append(("x", parent))
    dag = Dag.from_edges(edges)
    rng = np.random.default_rng(0)
    X = sparse_rows(300, 2000, density=0.1, seed=0)
    y = [["x"] if i % 2 == 0 else [str(dag.labels[rng.integers(dag.n_nodes)])] for i in range(300)]
    clf = MultiLabelHierarchicalClassifier(dag, semantics="terminal", random_state=0, max_epochs=3).fit(X, y)
    _assert_finite(clf)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_dags_with_deep_unrolling_train_with_the_defaults(seed):
    rng = np.random.default_rng(seed)
    dag, targets = _chain_dag(rng)
    assert max(dag.n_paths()) >= 4 and dag.n_unrolled() > 1.2 * dag.n_nodes
    X, y = _long_texts(rng, dag, targets, n=200)
    assert X.nnz / X.shape[0] > 150
    clf = MultiLabelHierarchicalClassifier(dag, semantics="terminal", random_state=seed, max_epochs=4).fit(X, y)
    _assert_finite(clf)
    loss = clf.net_.history[:, "train_loss"]
    assert np.all(np.isfinite(loss)) and loss[-1] < 0.7 * loss[0]
    assert clf.score(X, y) > 0.3
