"""SparseMLP's class_features: the lexical match of the input with each class's own text."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import sparse_rows

from hiclass_parallel import Tree
from hiclass_parallel.estimators import HierarchicalClassifier, SparseMLP
from hiclass_parallel.estimators.networks._data import csr_tensor
from hiclass_parallel.losses import HierarchicalCrossEntropy, PathLocalCrossEntropy
from hiclass_parallel.ops.groups import n_outputs
from hiclass_parallel.ops.sibling_paths import score_matrix


def _csr(X: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # torch calls sparse CSR tensors beta
        warnings.simplefilter("ignore")
        return X.to_sparse_csr()


@pytest.mark.parametrize("stop_rows", [False, True])
def test_scores_equal_the_dense_formula_and_path_local_equals_full(stop_rows, random_tree):
    rng = np.random.default_rng(1)
    tree = random_tree(rng, 30)
    width = n_outputs(tree, "sibling", True)
    rows = width if stop_rows else tree.n_classes
    F = sparse_rows(rows, 20, density=0.15, seed=2, dtype=np.float64)
    torch.manual_seed(0)
    net = SparseMLP(20, width, hidden_units=8, class_features=F, class_feature_scale=3.0).double()
    torch.nn.init.normal_(net.match_weight)
    X = torch.as_tensor(rng.random((6, 20)) * (rng.random((6, 20)) < 0.4))
    # The formula: h W^T + b, plus sum_j x_j (scale w_j) f_cj for the columns with a text row.
    w = torch.zeros(20, dtype=torch.float64)
    w[net.vocabulary] = 3.0 * net.match_weight.detach()
    expected = net.input(X) @ net.head.weight.weight.t() + net.head.bias.weight.t()
    expected[:, :rows] += (X * w) @ torch.as_tensor(F.toarray()).t()
    with torch.no_grad():
        torch.testing.assert_close(net(X), expected.detach())
        torch.testing.assert_close(net(_csr(X)), expected.detach())
        # sparse batches carry only the vocabulary features they hold; rows and blocks agree
        batch = net.encode(_csr(X))
        assert batch.present.tolist() == sorted(set(net.vocabulary_position[torch.nonzero(X)[:, 1]].tolist()) - {-1})
        cols = torch.as_tensor(rng.permutation(width)[:7])
        torch.testing.assert_close(score_matrix(net.scorer(batch), torch.tensor([5, 0]), cols),
                                   expected[[5, 0]][:, cols].detach())
        # a batch with no vocabulary feature at all matches nothing
        empty = torch.zeros_like(X)
        empty[:, [j for j in range(20) if j not in set(net.vocabulary.tolist())][:2]] = 1.0
        base = net.input(empty) @ net.head.weight.weight.t() + net.head.bias.weight.t()
        assert net.encode(_csr(empty)).present.numel() == 0
        torch.testing.assert_close(net(_csr(empty)), base)
    target = torch.as_tensor(rng.integers(0, 30, size=6))
    HierarchicalCrossEntropy(tree, "sibling", True)(net(X), target).backward()
    full = {name: p.grad.to_dense().clone() for name, p in net.named_parameters()}
    net.zero_grad()
    loss = PathLocalCrossEntropy(tree, True)(net.scorer(net.encode(_csr(X))), target)
    torch.testing.assert_close(loss, HierarchicalCrossEntropy(tree, "sibling", True)(net(X), target))
    loss.backward()
    assert full["match_weight"].abs().sum() > 0
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad.to_dense(), full[name], msg=name)


def test_bad_class_features_are_named():
    F = sparse_rows(5, 10, density=0.3, seed=0, dtype=np.float64)
    with pytest.raises(TypeError, match="scipy sparse"):
        SparseMLP(10, 7, class_features=F.toarray())
    with pytest.raises(ValueError, match=r"\(5, 10\).*7 rows.*\(11\)"):
        SparseMLP(11, 7, class_features=F)
    with pytest.raises(ValueError, match=r"\(5, 10\).*at most 4 rows"):
        SparseMLP(10, 4, class_features=F)
    bad = F.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SparseMLP(10, 7, class_features=bad)


def test_names_in_the_input_place_classes_never_seen_in_training():
    # 2 x 20 leaves under two roots. Leaf k's class text is a pair of words out of 10 (its
    # name); a sample of leaf k holds both words plus a feature of its root. Half the leaves
    # are never training targets, but every word occurs in the names of trained leaves, so
    # its match weight is learnt: only the class text can point to an untrained leaf.
    tree = Tree.from_parents([-1, -1] + [0] * 20 + [1] * 20)
    leaves = np.arange(2, 42)
    pairs = [(i, j) for i in range(10) for j in range(i + 1, 10)][:40]
    names = sp.lil_matrix((tree.n_classes, 12), dtype=np.float32)
    for leaf, (i, j) in zip(leaves, pairs):
        names[leaf, [2 + i, 2 + j]] = 1.0
    names = names.tocsr()
    rng = np.random.default_rng(0)
    y = rng.choice(leaves, size=600)
    X = names[y].tolil()
    X[np.arange(600), np.where(y < 22, 0, 1)] = 1.0
    X = X.tocsr()
    seen = np.isin(y, leaves[::2])
    assert np.asarray(names[leaves[::2]][:, 2:].sum(0)).min() > 0  # every word is in a trained name
    accuracy = {}
    for text in (None, names):
        model = HierarchicalClassifier(
            tree, semantics="terminal", module__hidden_units=16, module__class_features=text,
            max_epochs=30, batch_size=64, random_state=0,
        ).fit(X[seen], y[seen])
        accuracy[text is not None] = float((model.predict_node(X[~seen]) == y[~seen]).mean())
    assert accuracy[False] < 0.1, accuracy  # never a training target: the plain model cannot name it
    assert accuracy[True] > 0.9, accuracy


def test_best_first_decoding_with_class_text_equals_exhaustive(random_tree, decoding_routes_ran):
    # With class text the score function is no plain linear layer (linear_parts is None); it
    # offers the layer plus the match as a sparse term (matched_linear_parts), which the C
    # search scores: its answers and top-k equal the exhaustive route's and the torch search's.
    from hiclass_parallel.ops import best_paths, topk_paths

    tree = random_tree(3, 30)
    rng = np.random.default_rng(3)
    X = sparse_rows(200, 25, density=0.3, seed=3)
    text = sparse_rows(tree.n_classes, 25, density=0.2, seed=4)
    y = tree.labels[rng.integers(0, tree.n_classes, size=200)]
    # prototypes=None: the model's own decoding is what is compared here
    model = HierarchicalClassifier(tree, semantics="terminal", module__hidden_units=8, module__class_features=text,
                                   max_epochs=3, random_state=0, prototypes=None).fit(X, y)
    assert model.path_local_
    hidden = model.net_.module_.encode(torch.as_tensor(X[:2].toarray()))
    assert model.net_.module_.scorer(hidden).linear_parts is None
    assert model.net_.module_.scorer(hidden).matched_linear_parts is not None
    assert float(model.net_.module_.match_weight.detach().abs().max()) > 0  # the match takes part
    scores = torch.as_tensor(model.decision_function(X))
    paths, _ = best_paths(scores, tree, partition="sibling", stop=True, semantics="terminal")
    decoding_routes_ran.clear()
    np.testing.assert_array_equal(model._predict_ids(X), paths.numpy())
    assert decoding_routes_ran == ["best_first_c"]
    top, top_lp = topk_paths(scores, tree, 3, partition="sibling", stop=True, semantics="terminal")
    got, got_lp = model.predict_top_k(X, 3, return_log_prob=True)
    np.testing.assert_array_equal(got, model._label_lookup()[top.numpy()])
    np.testing.assert_allclose(np.asarray(got_lp), top_lp.numpy(), rtol=1e-5, atol=1e-5)
    # the torch search, which scores through the module, agrees
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("hiclass_parallel.ops.decode._c_searchable", lambda *a, **k: False)
        decoding_routes_ran.clear()
        np.testing.assert_array_equal(model._predict_ids(X), paths.numpy())
        assert decoding_routes_ran == ["best_first_torch"]


def test_one_row_per_class_gives_each_stop_column_its_nodes_row(random_tree):
    from hiclass_parallel.dag import Dag
    from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier
    from hiclass_parallel.ops.groups import stop_columns

    tree = random_tree(5, 25)
    X = sparse_rows(120, 20, density=0.3, seed=5)
    text = sparse_rows(tree.n_classes, 20, density=0.2, seed=6)
    y = tree.labels[np.random.default_rng(5).integers(0, tree.n_classes, size=120)]
    stop_col = stop_columns(tree, "sibling")
    internal = np.flatnonzero(stop_col >= 0)
    full = sp.vstack([text, sp.csr_matrix((internal.size, 20), dtype=np.float32)]).tolil()
    full[stop_col[internal]] = text[internal]
    # one batch of every row: the two classifiers draw their batches' rows apart
    kw = dict(semantics="terminal", module__hidden_units=8, max_epochs=2, random_state=0, batch_size=256)
    # without the in-batch level term, the single-label loss is the multi-label one on a tree;
    # float32 first moments: the two losses' float rounding differs by ulps, and a bfloat16
    # moment an ulp from a rounding boundary rounds the other way (scores 1e-4 apart)
    exact = dict(kw, criterion__level_contrast=0.0, optimizer__first_moment="float32")
    short = HierarchicalClassifier(tree, module__class_features=text, **exact).fit(X, y)
    # the module itself, given the rows spelled out per score column, scores identically
    spelled = SparseMLP(n_features=20, n_outputs=short.n_scores_, hidden_units=8, class_features=full.tocsr())
    spelled.load_state_dict(short.net_.module_.state_dict())
    with torch.no_grad():
        scores = spelled(csr_tensor(X)).numpy()
    np.testing.assert_allclose(short.decision_function(X), scores, rtol=1e-6)
    # the classifier takes one row per class, never rows per score column (they would land on stops)
    with pytest.raises(ValueError, match=rf"has {full.shape[0]} rows, but the classifier has {tree.n_classes} classes"):
        HierarchicalClassifier(tree, module__class_features=full.tocsr(), **exact).fit(X, y)
    with pytest.raises(ValueError, match=rf"has {tree.n_classes - 2} rows, but the classifier has {tree.n_classes}"):
        HierarchicalClassifier(tree, module__class_features=text[:-2], **exact).fit(X, y)
    # on a tree the multi-label classifier reads the same rows (its copies are the classes)
    multi = MultiLabelHierarchicalClassifier(Dag.from_tree(tree), module__class_features=text, **exact).fit(X, y)
    np.testing.assert_allclose(multi.decision_function(X), short.decision_function(X), rtol=1e-4, atol=1e-5)


def test_the_class_text_example_of_the_docs_runs(one_torch_thread, capsys):
    """docs/class-text.md's class-text example, as written there (on the shipped glosses)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "class-text.md").read_text()
    section = text[text.index("# Class text"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/class-text.md", "exec"), namespace)
    clf = namespace["clf"]
    assert clf.path_local_ and clf.net_.module_.head.has_text
    assert clf.net_.module_.match_weight.abs().sum() > 0  # the lexical match was trained
    hf1 = float(re.search(r"hF1 (\d\.\d+)", capsys.readouterr().out).group(1))
    X_test = namespace["vectorizer"].transform(namespace["X_test"])
    assert hf1 == round(clf.score(X_test, namespace["y_test"]), 3)
