"""Exact decoding: best_paths and topk_paths against brute-force enumeration of every path."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import renumbered

from hiclass_parallel import PAD, Tree
from hiclass_parallel._backend import to_numpy as host
from hiclass_parallel.ops.decode import best_paths, topk_paths
from hiclass_parallel.ops.groups import (
    group_log_softmax,
    group_logsumexp,
    n_outputs,
    node_log_probs,
    stop_columns,
)

PAPER = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])  # the paper's tree, for the probes below

MODES = [
    ("level", False, "partial"),
    ("level", True, "partial"),
    ("level", True, "terminal"),
    ("sibling", False, "partial"),
    ("sibling", True, "partial"),
    ("sibling", True, "terminal"),
]


def enumerate_paths(scores: np.ndarray, tree: Tree, partition: str, stop: bool, semantics: str):
    """Every candidate path of every sample, scored from scratch: ``[(score, node), ...]`` per row."""
    logp = group_log_softmax(scores, tree, partition, stop)
    stops = stop_columns(tree, partition)
    rows = []
    for b in range(scores.shape[0]):
        cands = []
        for c in range(tree.n_classes):
            if semantics == "partial" and not tree.is_leaf[c]:
                continue
            path = tree.paths[c][tree.paths[c] >= 0]
            value = logp[b, path].sum() + (logp[b, stops[c]] if semantics == "terminal" and stops[c] >= 0 else 0.0)
            cands.append((value, c))
        rows.append(cands)
    return rows


def ranked(joint: np.ndarray, tree: Tree, semantics: str) -> list[list[int]]:
    """Candidates of every row ranked by (score desc, node id asc) on exactly computed scores."""
    out = []
    for row in joint:
        cands = [c for c in range(tree.n_classes) if semantics == "terminal" or tree.is_leaf[c]]
        out.append(sorted(cands, key=lambda c: (-row[c], c)))
    return out


def scores_with_ties(rng: np.random.Generator, tree: Tree, partition: str, stop: bool, n: int = 5) -> np.ndarray:
    """Small integer scores: many exactly equal siblings, hence many exact ties."""
    return rng.integers(-2, 3, size=(n, n_outputs(tree, partition, stop))).astype(np.float64)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 24), mode=st.sampled_from(MODES))
def test_best_and_topk_equal_brute_force(seed, n, mode, random_tree):
    partition, stop, semantics = mode
    tree = random_tree(seed, n)
    rng = np.random.default_rng(seed)
    scores = scores_with_ties(rng, tree, partition, stop)
    paths, log_prob = best_paths(scores, tree, partition, stop, semantics)
    # 1. against an independent enumeration (scores summed from scratch): same best score,
    #    and the returned path is one of the best
    for b, cands in enumerate(enumerate_paths(scores, tree, partition, stop, semantics)):
        best = max(v for v, _ in cands)
        node = int(paths[b][paths[b] >= 0][-1])
        np.testing.assert_allclose(log_prob[b], best, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dict((c, v) for v, c in cands)[node], best, rtol=1e-12, atol=1e-12)
    # 2. exact ties: ranking the engine's own per-node scores by (score desc, id asc) gives
    #    exactly best_paths and topk_paths
    joint = node_log_probs(scores, tree, partition, stop, semantics)
    order = ranked(joint, tree, semantics)
    np.testing.assert_array_equal(paths, tree.paths[[o[0] for o in order]])
    k = min(4, len(order[0]))
    top, top_lp = topk_paths(scores, tree, k, partition, stop, semantics)
    assert top.shape == (scores.shape[0], k, tree.n_levels)
    for b in range(scores.shape[0]):
        np.testing.assert_array_equal(top[b], tree.paths[order[b][:k]])
        np.testing.assert_array_equal(top_lp[b], joint[b, order[b][:k]])
    np.testing.assert_array_equal(top[:, 0], paths)


def test_ties_go_to_the_lowest_node_id():
    # two top-level classes with two leaves each; ids interleaved across depths
    tree = Tree.from_parents([3, -1, 3, -1, 1, 1])  # leaves 0, 2 under 3; leaves 4, 5 under 1
    zeros = np.zeros((1, 6))
    for partition in ("level", "sibling"):
        paths, _ = best_paths(zeros, tree, partition)
        np.testing.assert_array_equal(paths, [[3, 0]])
        top, _ = topk_paths(zeros, tree, 4, partition)
        np.testing.assert_array_equal(top[0, :, 1], [0, 2, 4, 5])
    # every candidate at -inf: still the lowest id, never an internal node
    minus_inf = np.full((1, 6), -np.inf)
    paths, lp = best_paths(minus_inf, tree, "sibling")
    np.testing.assert_array_equal(paths, [[3, 0]])


def test_ids_not_sorted_by_depth(paper_tree):
    """The anchor's path search orders classes by (level, id): wrong for shuffled ids."""
    perm = np.random.default_rng(0).permutation(9)  # node i is called perm[i]
    tree = Tree.from_parents(renumbered(paper_tree.parents, perm))
    scores = np.zeros((1, 9))
    scores[0, perm[3]] = 5.0  # big dog
    scores[0, perm[8]] = 5.0  # Hound of Hades
    scores[0, perm[1]] = -5.0  # not a cat
    paths, _ = best_paths(scores, tree, "level")
    assert paths[0].tolist() == [perm[0], perm[3], perm[8]]


def test_shallow_leaves_are_not_favoured_by_padding():
    # a shallow leaf against a deep path: the level partition scores each level it uses; the
    # sibling partition compares proper probabilities. Padded levels never add 0 to a path.
    tree = Tree.from_parents([-1, -1, 1, 2])  # 0 is a top-level leaf; 1 -> 2 -> 3 a chain
    scores = np.array([[0.0, 3.0, 0.0, 0.0]])
    assert best_paths(scores, tree, "sibling")[0][0].tolist() == [1, 2, 3]
    assert np.isclose(np.exp(best_paths(scores, tree, "sibling")[1][0]), 1 / (1 + np.exp(-3)))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 24),
    partition=st.sampled_from(["level", "sibling"]),
    threshold=st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0]),
)
def test_threshold_cuts_at_the_deepest_likely_node(seed, n, partition, threshold, random_tree):
    tree = random_tree(seed, n)
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(4, tree.n_classes)) * 2
    paths, log_prob = best_paths(scores, tree, partition, threshold=threshold)
    joint = node_log_probs(scores, tree, partition)
    log_t = math.log(threshold) if threshold > 0 else -math.inf
    for b in range(scores.shape[0]):
        ok = [c for c in range(tree.n_classes) if joint[b, c] >= log_t]
        if not ok:
            assert (paths[b] == -1).all() and log_prob[b] == 0
            continue
        deepest = max(tree.depth[c] for c in ok)
        winner = min((c for c in ok if tree.depth[c] == deepest), key=lambda c: (-joint[b, c], c))
        np.testing.assert_array_equal(paths[b], tree.paths[winner])
        assert log_prob[b] == joint[b, winner]
        # the qualifying nodes are closed under taking ancestors
        for c in ok:
            assert all(joint[b, a] >= log_t for a in tree.paths[c][tree.paths[c] >= 0])


def test_sibling_threshold_half_is_the_majority_subtree():
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    # P(dog) = 0.9, P(big dog) = 0.9 * 0.6 = 0.54; below big dog nothing reaches 0.5
    scores = np.log([[0.9, 0.1, 0.4, 0.6, 0.5, 0.5, 0.4, 0.3, 0.3]])
    paths, log_prob = best_paths(scores, tree, "sibling", threshold=0.5)
    assert paths[0].tolist() == [0, 3, -1]
    np.testing.assert_allclose(np.exp(log_prob), [0.54])
    # the best single leaf is a different answer: small dog (0.36) beats happy big dog (0.216)
    assert best_paths(scores, tree, "sibling")[0][0].tolist() == [0, 2, -1]


@pytest.mark.parametrize("partition, stop, semantics", MODES)
def test_namespaces_agree(partition, stop, semantics, to_xp, random_tree):
    tree = random_tree(3, 40)
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(6, n_outputs(tree, partition, stop))).astype(np.float32)
    expected = best_paths(scores, tree, partition, stop, semantics)
    got = best_paths(to_xp(scores), tree, partition, stop, semantics)
    np.testing.assert_array_equal(host(got[0]), expected[0])
    assert host(got[0]).dtype == np.int64
    np.testing.assert_allclose(host(got[1]), expected[1], rtol=1e-5, atol=1e-5)
    top = topk_paths(to_xp(scores), tree, 3, partition, stop, semantics)
    expected_top = topk_paths(scores, tree, 3, partition, stop, semantics)
    np.testing.assert_array_equal(host(top[0]), expected_top[0])
    np.testing.assert_allclose(host(top[1]), expected_top[1], rtol=1e-5, atol=1e-5)
    cut = best_paths(to_xp(scores), tree, partition, stop, threshold=0.3)
    np.testing.assert_array_equal(host(cut[0]), best_paths(scores, tree, partition, stop, threshold=0.3)[0])


def test_topk_with_mass_ties_and_large_k(random_tree):
    tree = random_tree(4, 200)
    scores = np.zeros((3, tree.n_classes))
    n_leaves = int(tree.is_leaf.sum())
    for x in (scores, torch.as_tensor(scores)):
        top, lp = topk_paths(x, tree, n_leaves, "sibling")
        joint = node_log_probs(scores, tree, "sibling")
        order = ranked(joint, tree, "partial")
        for b in range(3):
            np.testing.assert_array_equal(host(top)[b], tree.paths[order[b]])


def test_leading_axes_and_errors(paper_tree):
    scores = np.random.default_rng(5).normal(size=(2, 3, 9))
    paths, lp = best_paths(scores, paper_tree)
    assert paths.shape == (2, 3, 3) and lp.shape == (2, 3)
    flat_paths, _ = best_paths(scores.reshape(6, 9), paper_tree)
    np.testing.assert_array_equal(paths.reshape(6, 3), flat_paths)
    top, top_lp = topk_paths(scores, paper_tree, 2)
    assert top.shape == (2, 3, 2, 3) and top_lp.shape == (2, 3, 2)
    one, one_lp = best_paths(scores[0, 0], paper_tree)
    assert one.shape == (3,) and one_lp.shape == ()
    empty, empty_lp = best_paths(np.zeros((0, 9)), paper_tree)
    assert empty.shape == (0, 3) and empty_lp.shape == (0,)
    with pytest.raises(ValueError, match="stop=True"):
        best_paths(scores, paper_tree, semantics="terminal")
    with pytest.raises(ValueError, match="k must be in"):
        topk_paths(scores, paper_tree, 7)
    with pytest.raises(ValueError, match="threshold"):
        best_paths(scores, paper_tree, threshold=1.5)


def test_torch_inputs_with_grad_are_decoded(random_tree):
    tree = random_tree(6, 30)
    x = torch.randn(4, tree.n_classes, requires_grad=True)
    paths, lp = best_paths(x, tree, "sibling")
    assert not lp.requires_grad
    np.testing.assert_array_equal(paths.numpy(), best_paths(x.detach().numpy(), tree, "sibling")[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_cuda_matches_cpu(random_tree):
    tree = random_tree(7, 300)
    x = torch.randn(32, n_outputs(tree, "sibling", True))
    for semantics in ("partial", "terminal"):
        cpu = best_paths(x, tree, "sibling", True, semantics)
        gpu = best_paths(x.cuda(), tree, "sibling", True, semantics)
        assert gpu[0].device.type == "cuda"
        torch.testing.assert_close(gpu[0].cpu(), cpu[0])
        torch.testing.assert_close(gpu[1].cpu(), cpu[1])
        top_cpu = topk_paths(x, tree, 5, "sibling", True, semantics)
        top_gpu = topk_paths(x.cuda(), tree, 5, "sibling", True, semantics)
        torch.testing.assert_close(top_gpu[0].cpu(), top_cpu[0])


# ---------------------------------------------------------------------------- bad and extreme input
# Regression probes: each once gave a wrong result, a bare crash or a misleading error; each
# asserts the correct result or the named error now.
@pytest.mark.parametrize("native", ["1", "0"])
def test_plus_inf_same_on_c_kernel_and_numpy(native):
    code = """
import numpy as np
from hiclass_parallel import Tree
from hiclass_parallel.ops import groups, group_logsumexp, group_log_softmax
groups._NATIVE_MIN_MEAN_GROUP = 1  # let the C kernel serve this small tree when it is built
tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
x = np.zeros((3, 9), dtype=np.float32); x[0, 0] = np.inf; x[1, 2] = np.nan; x[2, :] = -np.inf
with np.errstate(all="ignore"):
    print(group_logsumexp(x, tree).tolist()); print(group_log_softmax(x, tree).tolist())
"""
    env = dict(os.environ, HICLASS_PARALLEL_NATIVE=native)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         timeout=300).stdout
    lse, lsm = (eval(line, {"inf": math.inf, "nan": math.nan}) for line in out.splitlines())
    assert lse[0][0] == math.inf and math.isnan(lse[1][1]) and lse[2] == [-math.inf] * 3
    assert math.isnan(lsm[0][0]) and lsm[0][1] == -math.inf  # inf - inf; the other member -inf
    assert all(math.isnan(v) for v in lsm[1][2:6])  # the whole NaN group
    assert lsm[2] == [-math.inf] * 9


def test_plus_inf_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    x = np.zeros((1, 9))
    x[0, 3] = np.inf
    with np.errstate(all="ignore"):
        for partition in ("level", "sibling"):
            a = group_logsumexp(x, PAPER, partition)
            b = group_logsumexp(torch.tensor(x), PAPER, partition).numpy()
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(
                group_log_softmax(x, PAPER, partition), group_log_softmax(torch.tensor(x), PAPER, partition).numpy()
            )


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_decoding_nan_rows_are_empty_paths(bad):
    big = Tree.from_parents([-1] + [0] * 200)  # wide: the sparse top-k route that crashed
    x = np.random.default_rng(0).normal(size=(3, 201))
    x[1, 7] = bad
    with np.errstate(all="ignore"):
        paths, lp = best_paths(x, big)
        tpaths, tlp = topk_paths(x, big, 3)
    assert paths[1].tolist() == [PAD, PAD] and math.isnan(lp[1])
    assert (tpaths[1] == PAD).all() and np.isnan(tlp[1]).all()
    assert (paths[[0, 2]] >= 0).all() and np.isfinite(tlp[[0, 2]]).all()


def test_decoding_nan_rows_torch():
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, 9)
    x[0, 2] = float("nan")
    paths, lp = best_paths(x, PAPER, "sibling")
    tpaths, tlp = topk_paths(x, PAPER, 2, "sibling")
    assert paths[0].tolist() == [-1, -1, -1] and torch.isnan(lp[0])
    assert (tpaths[0] == -1).all() and torch.isnan(tlp[0]).all() and (tpaths[1] >= -1).all()


def test_decoding_minus_inf_is_probability_zero():
    x = np.zeros((1, 9))
    x[0, [0, 2, 3]] = -np.inf  # dog's subtree masked: the answer must be under cat
    paths, lp = best_paths(x, PAPER, "sibling")
    assert paths[0, 0] == 1 and np.isfinite(lp[0])


@pytest.mark.parametrize("k", [1.5, "2", True])
def test_topk_refuses_non_integer_k(k):
    with pytest.raises(TypeError, match="k must be an integer"):
        topk_paths(np.zeros((1, 9)), PAPER, k)


@pytest.mark.parametrize("kind", ["linear32", "linear64", "linear_half", "function", "sibling_full", "level",
                                  "threshold"])
def test_the_decoding_route_reported_is_the_route_that_runs(kind, decoding_routes_ran):
    from hiclass_parallel.ops.engine import _native_best_first
    from hiclass_parallel.ops.best_first import best_first_paths
    from hiclass_parallel.ops.decode import DECODING_ROUTES, decoding_route
    from hiclass_parallel.ops.sibling_paths import LinearScores

    rng = np.random.default_rng(0)
    tree = PAPER
    partition = "level" if kind == "level" else "sibling"
    dtype = {"linear64": torch.float64, "linear_half": torch.bfloat16}.get(kind, torch.float32)
    h = torch.as_tensor(rng.normal(size=(3, 4)), dtype=dtype)
    weight = torch.as_tensor(rng.normal(size=(n_outputs(tree, partition), 4)), dtype=dtype)
    bias = torch.zeros(weight.shape[0], dtype=dtype)
    linear = LinearScores(h, weight, bias)
    scores = torch.addmm(bias, h, weight.t())
    score = (lambda r, c: scores[r, c]) if kind == "function" else linear
    on_demand = kind not in ("sibling_full",)
    threshold = 0.5 if kind == "threshold" else None
    route = decoding_route(partition, on_demand=on_demand, threshold=threshold, score=score)
    assert route in DECODING_ROUTES
    expected = {"linear32": "best_first_c", "linear64": "best_first_c", "linear_half": "best_first_torch",
                "function": "best_first_torch"}.get(kind, "exhaustive")
    if expected == "best_first_c" and not _native_best_first.available():
        expected = "best_first_torch"  # the optional C search was not built here
    assert route == expected
    ran = decoding_routes_ran
    if route == "exhaustive":
        from hiclass_parallel.ops import decode

        decode.best_paths(scores, tree, partition, threshold=threshold)
    else:
        assert decoding_route(partition, on_demand=True) == "best_first"  # the search is chosen per batch
        best_first_paths(score, 3, tree)
    assert ran == [route]
