"""Path-local sibling training: equal to the full sibling cross-entropy, on shuffled-id trees."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import sparse_rows

from hiclass_parallel import Tree
from hiclass_parallel.estimators import ColumnScorer, LazyAdam, SparseMLP
from hiclass_parallel.losses import HierarchicalCrossEntropy, PathLocalCrossEntropy
from hiclass_parallel.ops.groups import n_outputs
from hiclass_parallel.ops.sibling_paths import expand_rows, path_rows, sibling_plan

OPTIONS = [(False, "partial"), (True, "partial"), (True, "terminal")]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), option=st.sampled_from(OPTIONS),
       reduction=st.sampled_from(["mean", "sum", "none"]))
def test_loss_and_gradient_equal_the_full_sibling_loss(seed, n, option, reduction, random_tree):
    stop, semantics = option
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    width = n_outputs(tree, "sibling", stop)
    scores = torch.as_tensor(rng.normal(size=(6, width)) * 3, dtype=torch.float64).requires_grad_()
    target = torch.as_tensor(rng.integers(-1, n, size=6))
    full = HierarchicalCrossEntropy(tree, "sibling", stop, reduction, semantics=semantics)(scores, target)
    (g_full,) = torch.autograd.grad(full.sum(), scores)
    local = PathLocalCrossEntropy(tree, stop, reduction, semantics=semantics)(lambda r, c: scores[r, c], target)
    (g_local,) = torch.autograd.grad(local.sum(), scores)
    torch.testing.assert_close(local, full)
    torch.testing.assert_close(g_local, g_full)


def test_only_the_path_groups_are_scored(paper_tree):
    # label 6 (happy big dog) = path 0 > 3 > 6: groups {0, 1}, {2, 3} (children of 0), {6, 7, 8}
    plan = sibling_plan(paper_tree, stop=True)
    sample, group, target = path_rows(plan, torch.tensor([6, 3]), terminal=True)
    row, column, _ = expand_rows(plan, group)
    scored = {int(s): set() for s in sample}
    for r, c in zip(row.tolist(), column.tolist()):
        scored[int(sample[r])].add(c)
    # columns 9, 10, 11: stops of the groups of nodes 0, 1, 3
    assert scored[0] == {0, 1, 2, 3, 9, 6, 7, 8, 11}
    # label 3 under terminal semantics also trains its stop (column 11) in its children's group
    assert scored[1] == {0, 1, 2, 3, 9, 6, 7, 8, 11}
    assert sorted(target[sample == 1].tolist()) == [0, 3, 11]


def test_unlabelled_batch_gives_zero_not_nan(paper_tree):
    loss = PathLocalCrossEntropy(paper_tree)(lambda r, c: torch.zeros(r.shape[0]), torch.tensor([-1, -1]))
    assert float(loss) == 0.0


def test_bad_targets_are_named(paper_tree):
    with pytest.raises(IndexError, match=r"\[9\]"):
        PathLocalCrossEntropy(paper_tree)(lambda r, c: torch.zeros(r.shape[0]), torch.tensor([9]))
    with pytest.raises(ValueError, match="integer node ids"):
        PathLocalCrossEntropy(paper_tree)(lambda r, c: torch.zeros(r.shape[0]), torch.tensor([1.0]))


def test_sparse_mlp_column_scores_match_full_scores_and_gradients(random_tree):
    rng = np.random.default_rng(0)
    tree = random_tree(rng, 30)
    width = n_outputs(tree, "sibling", True)
    torch.manual_seed(0)
    net = SparseMLP(12, width, hidden_units=8).double()
    X = torch.as_tensor(rng.random((5, 12)) * (rng.random((5, 12)) < 0.3))
    target = torch.as_tensor(rng.integers(0, 30, size=5))
    full = HierarchicalCrossEntropy(tree, "sibling", True)(net(X), target)
    full.backward()
    expected = {name: p.grad.to_dense().clone() for name, p in net.named_parameters()}
    net.zero_grad()
    local = PathLocalCrossEntropy(tree, True)(net.scorer(net.encode(X)), target)
    local.backward()
    torch.testing.assert_close(local, full)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad.to_dense(), expected[name], msg=name)


def test_column_scorer_touches_only_asked_rows():
    head = ColumnScorer(4, 10)
    h = torch.randn(3, 4)
    head.scorer(h)(torch.tensor([0, 1, 2]), torch.tensor([7, 7, 2])).sum().backward()
    assert head.weight.weight.grad.is_sparse
    assert sorted(set(head.weight.weight.grad.coalesce().indices()[0].tolist())) == [2, 7]


def test_lazy_adam_equals_adam_on_dense_and_sparse_adam_on_sparse():
    torch.manual_seed(0)
    dense_a, dense_b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    dense_b.load_state_dict(dense_a.state_dict())
    emb_a, emb_b = torch.nn.Embedding(8, 3, sparse=True), torch.nn.Embedding(8, 3, sparse=True)
    emb_b.load_state_dict(emb_a.state_dict())
    lazy = LazyAdam([*dense_a.parameters(), *emb_a.parameters()], lr=0.05)
    adam = torch.optim.Adam(dense_b.parameters(), lr=0.05)
    sparse = torch.optim.SparseAdam(emb_b.parameters(), lr=0.05)
    for step in range(4):
        x = torch.randn(5, 4)
        idx = torch.tensor([step % 3, 5, 5])
        for dense, emb, opts in ((dense_a, emb_a, [lazy]), (dense_b, emb_b, [adam, sparse])):
            for o in opts:
                o.zero_grad()
            (dense(x).pow(2).sum() + emb(idx).pow(3).sum()).backward()
            for o in opts:
                o.step()
    torch.testing.assert_close(dense_a.weight, dense_b.weight)
    torch.testing.assert_close(emb_a.weight, emb_b.weight)
    untouched = [i for i in range(8) if i not in (0, 1, 2, 5)]
    assert torch.equal(emb_a.weight[untouched], emb_b.weight[untouched])


def test_lazy_adam_rejects_bad_settings():
    with pytest.raises(ValueError, match="lr"):
        LazyAdam([torch.zeros(1, requires_grad=True)], lr=0)
    with pytest.raises(ValueError, match="betas"):
        LazyAdam([torch.zeros(1, requires_grad=True)], betas=(1.0, 0.9))


def test_text_route_defaults(one_torch_thread, random_tree):
    from hiclass_parallel.estimators import HierarchicalClassifier

    rng = np.random.default_rng(0)
    tree = random_tree(rng, 30)
    y = rng.integers(0, 30, size=1200)
    X = sparse_rows(1200, 50, density=0.1, seed=0)
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=0, batch_size=100).fit(X, y)
    assert type(clf.net_.module_).__name__ == "SparseMLP" and clf.net_.module_.head.weight.embedding_dim == 256
    assert clf.partition_ == "sibling" and clf.path_local_
    assert clf.net_.criterion_.level_contrast == 0.1  # the in-batch level term (test_level_contrast.py)
    off = HierarchicalClassifier(tree, semantics="terminal", max_epochs=1, criterion__level_contrast=0.0).fit(X, y)
    assert off.path_local_ and off.net_.criterion_.level_contrast == 0.0
    assert type(clf.net_.optimizer_).__name__ == "LazyAdam"
    assert clf.net_.max_epochs == 10 == len(clf.net_.history)  # 35 / sqrt(12 steps per epoch) = 10.1, to the nearest
    assert clf.net_.lr == 0.005 and clf.lr is None
    dense = HierarchicalClassifier(tree, semantics="terminal", random_state=0, max_epochs=None)
    dense.fit(X[:200].toarray(), y[:200])
    # dense input takes the same route with MLP, with Adam's dense defaults
    assert dense.net_.max_epochs == 10 and dense.partition_ == "sibling" and dense.path_local_
    assert dense.net_.lr == 0.003 and type(dense.net_.optimizer_) is torch.optim.Adam


def test_extra_predict_methods_through_a_pipeline(one_torch_thread):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    from hiclass_parallel.estimators import HierarchicalClassifier

    tree = Tree.from_edges([("dog", "animal"), ("cat", "animal"), ("rose", "plant"), ("tulip", "plant"),
                            ("animal", None), ("plant", None)])
    texts = ["a dog barks", "a puppy dog", "a cat purrs", "a kitten cat", "a red rose", "a rose bush",
             "a tulip bulb", "a yellow tulip"] * 4
    labels = ["dog", "dog", "cat", "cat", "rose", "rose", "tulip", "tulip"] * 4
    pipe = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(tree, semantics="terminal", random_state=0))
    pipe.fit(texts, labels)
    top = pipe[-1].predict_top_k(pipe[:-1].transform(["a dog and a puppy"]), 2)
    assert top.shape == (1, 2, 2) and top[0, 0].tolist() == ["animal", "dog"]
    assert pipe[-1].predict_labels(pipe[:-1].transform(["a yellow tulip"])).tolist() == ["tulip"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")
@pytest.mark.parametrize("class_text", [False, True])
def test_text_route_on_cuda_decodes_as_its_scores_say(random_tree, class_text):
    from hiclass_parallel.estimators import HierarchicalClassifier
    from hiclass_parallel.ops import best_paths

    rng = np.random.default_rng(0)
    tree = random_tree(rng, 60)
    y = rng.integers(0, 60, size=600)
    X = sparse_rows(600, 80, density=0.1, seed=0)
    extra = {"module__class_features": sparse_rows(60, 80, density=0.2, seed=1)} if class_text else {}
    clf = HierarchicalClassifier(tree, semantics="terminal", device="cuda", random_state=0, max_epochs=5,
                                 **extra).fit(X, y)
    assert clf.path_local_ and next(clf.net_.module_.parameters()).is_cuda
    scores = torch.as_tensor(clf.decision_function(X))
    expected, _ = best_paths(scores, tree, "sibling", True, "terminal")
    np.testing.assert_array_equal(clf._predict_ids(X), expected.numpy())
    # On the GPU predict decodes exhaustively: the same paths as the best-first search there.
    from hiclass_parallel.ops.best_first import best_first_paths

    def search(hidden):
        return best_first_paths(clf.net_.module_.scorer(hidden), hidden.shape[0], tree, stop=True,
                                semantics="terminal", like=hidden)

    searched, _ = clf._per_batch(clf._validate_X(X, reset=False), search, hidden=True)
    np.testing.assert_array_equal(searched, expected.numpy())
