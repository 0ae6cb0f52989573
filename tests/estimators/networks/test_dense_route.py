"""Dense input on the text route: MLP scores columns on demand, so the sibling partition
trains path-locally and decodes best-first, equal to full scoring, on shuffled-id trees."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import BEST_FIRST_OPTIONS as OPTIONS
from support import assert_same_paths

from hiclass_parallel.estimators import MLP, HierarchicalClassifier
from hiclass_parallel.estimators.prediction import _decode
from hiclass_parallel.losses import (
    HierarchicalCrossEntropy,
    PathLocalCrossEntropy,
    in_batch_level_loss,
)
from hiclass_parallel.ops import best_paths, topk_paths
from hiclass_parallel.ops.engine import _native_best_first
from hiclass_parallel.ops.best_first import best_first_paths
from hiclass_parallel.ops.groups import n_outputs

HIDDEN = [0, 7, (6, 5)]  # a linear model (encode is the identity), one and two hidden layers


def _net(rng, n_features, tree, stop, hidden, dtype):
    torch.manual_seed(int(rng.integers(2**31)))
    net = MLP(n_features, n_outputs(tree, "sibling", stop), hidden_units=hidden).to(dtype)
    with torch.no_grad():  # spread the scores: confident rows and flat ones, not all near 0
        net.layers[-1].weight.mul_(float(rng.uniform(0.5, 6.0)))
    return net


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), option=st.sampled_from(OPTIONS),
       hidden=st.sampled_from(HIDDEN), reduction=st.sampled_from(["mean", "sum", "none"]))
def test_path_local_loss_and_gradients_equal_full_scoring(seed, n, option, hidden, reduction, random_tree):
    stop, semantics = option
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    net = _net(rng, 5, tree, stop, hidden, torch.float64)
    X = torch.as_tensor(rng.normal(size=(6, 5)))
    target = torch.as_tensor(rng.integers(-1, n, size=6))
    full = HierarchicalCrossEntropy(tree, "sibling", stop, reduction, semantics=semantics)(net(X), target)
    full.sum().backward()
    expected = {name: p.grad.clone() for name, p in net.named_parameters()}
    net.zero_grad()
    local = PathLocalCrossEntropy(tree, stop, reduction, semantics=semantics)(net.scorer(net.encode(X)), target)
    local.sum().backward()
    torch.testing.assert_close(local, full)
    for name, p in net.named_parameters():
        assert p.grad.layout == torch.strided  # dense gradients: any torch optimizer steps them
        torch.testing.assert_close(p.grad, expected[name], msg=name)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 40), hidden=st.sampled_from(HIDDEN))
def test_in_batch_level_term_equals_full_scoring(seed, n, hidden, random_tree):
    # the level term reads the columns already scored by the loss from the same block
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    net = _net(rng, 5, tree, True, hidden, torch.float64)
    X = torch.as_tensor(rng.normal(size=(8, 5)))
    target = torch.as_tensor(rng.integers(-1, n, size=8))
    paths = torch.as_tensor(tree.paths.copy())
    scores = net(X)
    full, rows = in_batch_level_loss(lambda r, c: scores[r, c], target, paths)
    full.sum().backward()
    expected = {name: p.grad.clone() for name, p in net.named_parameters()}
    net.zero_grad()
    score = net.scorer(net.encode(X))
    local = PathLocalCrossEntropy(tree, True)(score, target)  # scores the path groups first
    contrast, local_rows = in_batch_level_loss(score, target, paths)
    torch.autograd.grad(local, [p for p in net.parameters()], retain_graph=True)
    contrast.sum().backward()
    torch.testing.assert_close(contrast, full)
    assert int(local_rows) == int(rows)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)


class _NoParts:
    """The same score function without ``linear_parts``: the batched torch search runs."""

    def __init__(self, score):
        self.score = score

    def __call__(self, rows, columns):
        return self.score(rows, columns)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 50), option=st.sampled_from(OPTIONS),
       hidden=st.sampled_from(HIDDEN), k=st.sampled_from([None, 1, 3]),
       dtype=st.sampled_from([torch.float32, torch.float64]), search=st.sampled_from(["c", "torch"]))
def test_best_first_decoding_equals_exhaustive_decoding(seed, n, option, hidden, k, dtype, search, random_tree):
    stop, semantics = option
    if search == "c" and not _native_best_first.available():
        search = "torch"  # the optional C search was not built here
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n, max_top=4)
    if k is not None:
        k = min(k, n if semantics == "terminal" else int(tree.is_leaf.sum()))
    net = _net(rng, 5, tree, stop, hidden, dtype).eval()
    X = torch.as_tensor(rng.normal(size=(7, 5)), dtype=dtype)
    with torch.no_grad():
        x = net(X)
        score = net.scorer(net.encode(X))
        if search == "torch":
            score = _NoParts(score)
        paths, log_prob = best_first_paths(score, 7, tree, stop, semantics, k=k)
    if k is None:
        expected, expected_lp = best_paths(x, tree, "sibling", stop, semantics)
    else:
        expected, expected_lp = topk_paths(x, tree, k, "sibling", stop, semantics)
    assert log_prob.dtype == dtype
    assert_same_paths(paths, log_prob, expected, expected_lp, x, tree, stop, semantics)


def test_the_output_layer_is_searched_in_c(monkeypatch, random_tree):
    if not _native_best_first.available():
        pytest.skip("the optional C search was not built (no C compiler at install time) or HICLASS_PARALLEL_NATIVE=0")
    tree = random_tree(0, 30)
    net = MLP(5, n_outputs(tree, "sibling", True), hidden_units=8).eval()
    calls = []
    real = _native_best_first.search
    monkeypatch.setattr(_native_best_first, "search", lambda *a, **kw: (calls.append(1), real(*a, **kw))[1])
    with torch.no_grad():
        best_first_paths(net.scorer(net.encode(torch.randn(4, 5))), 4, tree, True, "terminal")
    assert len(calls) == 1


def test_encode_scorer_and_forward_share_the_saved_layout():
    net = MLP(4, 9, hidden_units=(8, 6), dropout=0.1)
    # the state of a model saved before MLP scored columns: the same keys and shapes
    assert {k: tuple(v.shape) for k, v in net.state_dict().items()} == {
        "layers.0.weight": (8, 4), "layers.0.bias": (8,), "layers.3.weight": (6, 8), "layers.3.bias": (6,),
        "layers.6.weight": (9, 6), "layers.6.bias": (9,)}
    net.eval()
    X = torch.randn(3, 4)
    with torch.no_grad():
        all_columns = torch.arange(9).repeat(3)
        rows = torch.arange(3).repeat_interleave(9)
        torch.testing.assert_close(net.scorer(net.encode(X))(rows, all_columns).reshape(3, 9), net(X))
    linear = MLP(4, 9, hidden_units=0)
    X = torch.randn(2, 4)
    assert linear.encode(X) is X  # a linear model: the hidden representation is the input


def test_dense_defaults_take_the_sibling_route_and_level_stays_available(one_torch_thread, random_tree, monkeypatch):
    calls = []
    real = _decode.best_first_paths  # decoding's own name for the search
    monkeypatch.setattr(_decode, "best_first_paths", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    rng = np.random.default_rng(0)
    tree = random_tree(rng, 40)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    y = rng.integers(0, 40, size=300)
    for semantics in ("partial", "terminal"):
        clf = HierarchicalClassifier(tree, semantics=semantics, max_epochs=3, module__hidden_units=16,
                                     random_state=0, prototypes=None).fit(X, y)  # the model's own answer
        assert type(clf.net_.module_) is MLP and clf.partition_ == "sibling" and clf.path_local_
        assert type(clf.net_.optimizer_) is torch.optim.Adam and clf.net_.lr == 0.003
        calls.clear()
        ids = clf._predict_ids(X)
        assert calls  # predict decodes best-first
        scores = torch.as_tensor(clf.decision_function(X))
        expected, expected_lp = best_paths(scores, tree, "sibling", clf.stop_, semantics)
        _, log_prob = clf._decode(X, None)
        assert_same_paths(torch.as_tensor(ids), torch.as_tensor(log_prob), expected, expected_lp, scores, tree,
                          clf.stop_, semantics)
    level = HierarchicalClassifier(tree, partition="level", max_epochs=1, module__hidden_units=16).fit(X, y)
    assert level.partition_ == "level" and not level.path_local_ and level.training_ == "full"
    full = HierarchicalClassifier(tree, training="full", max_epochs=1, module__hidden_units=16).fit(X, y)
    assert full.partition_ == "sibling" and not full.path_local_
