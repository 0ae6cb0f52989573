"""Several labels per sample and DAG hierarchies: the reader, the path-local DAG loss, the
multi-label metrics and ``MultiLabelHierarchicalClassifier``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import random_dag

from hiclass_parallel import Tree, UnknownLabelError
from hiclass_parallel.dag import Dag
from hiclass_parallel.labels._sets import read_label_sets
from hiclass_parallel.estimators import (
    HierarchicalClassifier,
    MultiLabelHierarchicalClassifier,
)
from hiclass_parallel.losses import DagCrossEntropy
from hiclass_parallel.metrics import (
    get_scorer,
    hierarchical_f1_score_dag,
    hierarchical_precision_score_dag,
    hierarchical_recall_score_dag,
)
from hiclass_parallel.ops.groups import n_outputs, node_log_probs

FAST = {"max_epochs": 60, "lr": 0.01, "batch_size": 32, "random_state": 0}


def ids_of(labels):
    index = {v: i for i, v in enumerate(labels)}
    return lambda values: np.asarray([index[v] for v in values], dtype=np.int64)


# ---------------------------------------------------------------------------- the loss
OPTIONS = [(False, "partial"), (True, "partial"), (True, "terminal")]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9), option=st.sampled_from(OPTIONS),
       reduction=st.sampled_from(["mean", "sum", "none"]))
def test_path_local_dag_loss_and_gradient_equal_the_full_one(seed, n, option, reduction):
    stop, semantics = option
    rng = np.random.default_rng(seed)
    unrolled = random_dag(rng, n).unroll()
    width = n_outputs(unrolled.tree, "sibling", stop)
    scores = torch.as_tensor(rng.normal(size=(6, width)) * 3, dtype=torch.float64).requires_grad_()
    target = torch.as_tensor(rng.integers(-1, n, size=6))
    criterion = DagCrossEntropy(unrolled, "sibling", stop, semantics, reduction)
    full = criterion(scores, target)
    (g_full,) = torch.autograd.grad(full.sum(), scores)
    local = criterion(lambda rows, cols: scores[rows, cols], target)
    (g_local,) = torch.autograd.grad(local.sum(), scores)
    torch.testing.assert_close(local, full)
    torch.testing.assert_close(g_local, g_full)


def test_path_local_dag_loss_refuses_the_level_partition():
    unrolled = Dag.from_edges([("c", "a"), ("c", "b")]).unroll()
    criterion = DagCrossEntropy(unrolled, "level", True, "terminal")
    with pytest.raises(ValueError, match="partition='sibling'"):
        criterion(lambda rows, cols: torch.zeros(rows.shape[0]), torch.tensor([0]))


# ---------------------------------------------------------------------------- metrics
def brute_label_sets(dag, y_true, y_pred, average):
    """hP, hR, hF1 from Python sets: a sample's set is the union of its labels' ancestors."""
    ancestors = dag.ancestor_sets()
    def node_set(labels):
        out = set()
        for v in labels:
            out |= ancestors[int(dag.to_ids([v])[0])]
        return out
    T = [node_set(t) for t in y_true]
    P = [node_set(p) for p in y_pred]
    common = [len(t & p) for t, p in zip(T, P)]
    if average == "micro":
        hp = sum(common) / max(sum(map(len, P)), 1)
        hr = sum(common) / max(sum(map(len, T)), 1)
        return hp, hr, 0.0 if hp + hr == 0 else 2 * hp * hr / (hp + hr)
    ps = [c / len(p) if p else 0.0 for c, p in zip(common, P)]
    rs = [c / len(t) if t else 0.0 for c, t in zip(common, T)]
    fs = [0.0 if a + b == 0 else 2 * a * b / (a + b) for a, b in zip(ps, rs)]
    return np.mean(ps), np.mean(rs), np.mean(fs)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9), average=st.sampled_from(["micro", "macro"]))
def test_multilabel_dag_metrics_match_python_sets(seed, n, average):
    rng = np.random.default_rng(seed)
    dag = random_dag(rng, n)
    labels = dag.labels.tolist()
    draw = lambda: [list(rng.choice(labels, size=int(rng.integers(0, 4)), replace=True)) for _ in range(7)]
    y_true, y_pred = draw(), draw()
    y_true[0] = [labels[0]]  # at least one true node
    kw = {"average": average, "zero_division": 0.0}
    got = (hierarchical_precision_score_dag(y_true, y_pred, dag, **kw),
           hierarchical_recall_score_dag(y_true, y_pred, dag, **kw),
           hierarchical_f1_score_dag(y_true, y_pred, dag, **kw))
    assert got == pytest.approx(brute_label_sets(dag, y_true, y_pred, average))
    # the indicator forms give the same figures
    to_ind = lambda ys: read_label_sets(ys, dag.n_nodes, dag.to_ids)[0]
    assert hierarchical_f1_score_dag(to_ind(y_true), to_ind(y_pred).toarray().astype(int), dag, **kw) == pytest.approx(got[2])


# ---------------------------------------------------------------------------- the estimator
def toy(n_per=40, seed=0):
    """Four well-separated clusters; the second has two labels under different parents."""
    dag = Dag.from_edges([("dog", "pet"), ("dog", "canine"), ("cat", "pet"), ("wolf", "canine"),
                          ("puppy", "dog")])
    rng = np.random.default_rng(seed)
    X = np.repeat(np.eye(4), n_per, axis=0) * 3 + 0.3 * rng.standard_normal((4 * n_per, 4))
    y = [["dog"]] * n_per + [["cat", "wolf"]] * n_per + [["pet"]] * n_per + [["puppy"]] * n_per
    return dag, X.astype(np.float32), y


@pytest.mark.parametrize("sparse", [False, True])
def test_learns_label_sets_on_a_dag(sparse):
    dag, X, y = toy()
    Xf = sp.csr_matrix(X) if sparse else X
    clf = MultiLabelHierarchicalClassifier(dag, semantics="terminal", threshold=0.3, **FAST).fit(Xf, y)
    # SparseMLP (sparse X) and MLP (dense X) both score columns on demand: path-local on the unrolled tree
    assert clf.path_local_ and clf.module_class_.__name__ == ("SparseMLP" if sparse else "MLP")
    assert clf.n_pairs_ == 200 and clf.label_form_ == "sets"
    centres = np.eye(4, dtype=np.float32) * 3
    pred = clf.predict(sp.csr_matrix(centres) if sparse else centres)
    assert pred.tolist() == [("dog",), ("cat", "wolf"), ("pet",), ("puppy",)]
    proba = clf.predict_proba(centres if not sparse else sp.csr_matrix(centres))
    assert proba.shape == (4, dag.n_nodes)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)  # terminal: one distribution over answers
    # dog has two paths (pet > dog, canine > dog): its probability is their sum
    assert clf.score(Xf, y) > 0.95
    assert clf.score(Xf, y) == pytest.approx(hierarchical_f1_score_dag(y, clf.predict(Xf), dag))


def test_outputs_follow_the_form_of_y():
    dag, X, y = toy(n_per=20)
    indicator = read_label_sets(y, dag.n_nodes, dag.to_ids)[0]
    dense = MultiLabelHierarchicalClassifier(dag, semantics="terminal", threshold=0.3, **FAST).fit(X, indicator.toarray().astype(int))
    out = dense.predict(X[:3])
    assert isinstance(out, np.ndarray) and out.shape == (3, dag.n_nodes) and out.dtype == np.int64
    sparse = MultiLabelHierarchicalClassifier(dag, semantics="terminal", threshold=0.3, **FAST).fit(X, indicator)
    out = sparse.predict(X[:3])
    assert sp.issparse(out) and out.shape == (3, dag.n_nodes)
    np.testing.assert_array_equal(out.toarray(), dense.predict(X[:3]))


def test_partial_semantics_predicts_the_deepest_labels_at_the_threshold():
    dag, X, y = toy()
    clf = MultiLabelHierarchicalClassifier(dag, threshold=0.3, **FAST)
    clf.fit(X, [["puppy"]] * 40 + [["cat"]] * 40 + [["wolf"]] * 40 + [["puppy"]] * 40)
    proba = clf.predict_proba(np.eye(4, dtype=np.float32) * 3)
    # partial: the probability of lying on the path; an ancestor's covers its descendants'
    dog, puppy = dag.to_ids(["dog", "puppy"])
    assert (proba[:, dog] >= proba[:, puppy] - 1e-6).all()
    assert clf.predict(np.eye(4, dtype=np.float32)[:1] * 3).tolist() == [("puppy",)]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 4), threshold=st.sampled_from([0.0, 0.2, 0.5]),
       semantics=st.sampled_from(["partial", "terminal"]))
def test_label_selection_matches_a_reference(seed, k, threshold, semantics):
    rng = np.random.default_rng(seed)
    dag = random_dag(rng, 8)
    clf = MultiLabelHierarchicalClassifier(dag, threshold=threshold, top_k=k, semantics=semantics)
    clf.hierarchy_ = dag
    proba = rng.dirichlet(np.ones(8), size=5)
    chosen = clf._select(torch.as_tensor(proba)).numpy()
    for row, p in zip(chosen, proba):
        cand = range(8)
        if semantics == "partial":  # classes none of whose descendants reaches the threshold
            ancestors = dag.ancestor_sets()
            cand = [v for v in cand if not any(p[c] >= threshold and c != v and v in ancestors[c] for c in range(8))]
        ranked = sorted(cand, key=lambda v: (-p[v], v))[:k]
        expected = [v for v in ranked if p[v] >= threshold] or [int(np.argmax(p))]
        assert sorted(int(v) for v in row if v >= 0) == sorted(expected)


def test_on_a_tree_it_trains_as_the_single_label_classifier():
    """Same data, seed, summed loss and level term: the DAG loss of a tree is the tree loss, so
    the weights, the answer probabilities and the best labels are the single-label model's.
    (The two classifiers' default level-term weights differ, each measured on its own task.)"""
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3])
    rng = np.random.default_rng(1)
    X = rng.standard_normal((120, 5)).astype(np.float32)
    y = tree.labels[rng.integers(0, 8, size=120)]
    kw = dict(semantics="terminal", max_epochs=3, lr=0.01, batch_size=16, random_state=0, criterion__reduction="sum",
              criterion__level_contrast=0.3)
    single = HierarchicalClassifier(tree, partition="sibling", prototypes=None, **kw).fit(X, y)  # its own answer
    multi = MultiLabelHierarchicalClassifier(tree, **kw).fit(X, y)
    for a, b in zip(single.net_.module_.parameters(), multi.net_.module_.parameters()):
        torch.testing.assert_close(a, b)
    np.testing.assert_allclose(multi.predict_proba(X), single.predict_answer_proba(X), rtol=1e-5, atol=1e-6)
    top1 = MultiLabelHierarchicalClassifier(tree, top_k=1, threshold=0.0, **kw).fit(X, y)
    assert [p[0] for p in top1.predict(X)] == single.predict_labels(X).tolist()
    # paths inherited from the single-label classifier come back in the hierarchy's labels
    assert multi.predict(X[:2]).dtype == object and multi.predict_top_k(X[:2], k=2).shape == (2, 2, tree.n_levels)


def test_errors_name_the_problem():
    dag, X, y = toy(n_per=5)
    with pytest.raises(Exception, match="tree"):
        MultiLabelHierarchicalClassifier(None).fit(X, y)
    with pytest.raises(Exception, match="partition"):
        MultiLabelHierarchicalClassifier(dag, partition="level").fit(X, y)
    with pytest.raises(UnknownLabelError, match="lion"):
        MultiLabelHierarchicalClassifier(dag).fit(X, [["lion"]] * len(X))
    with pytest.raises(ValueError, match="no label at all"):
        MultiLabelHierarchicalClassifier(dag).fit(X, [[]] * len(X))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        MultiLabelHierarchicalClassifier(dag).fit(X, y[:-1])
    from torch.utils.data import TensorDataset

    with pytest.raises(TypeError, match="does not train from a torch Dataset"):
        MultiLabelHierarchicalClassifier(dag).fit(TensorDataset(torch.as_tensor(X), torch.zeros(len(X))))


def test_terminal_semantics_without_stop_scores_says_so_as_the_single_label_classifier_does():
    """Both classifiers refuse terminal semantics on a model fitted with stop=False, with one message."""
    dag, X, y = toy(n_per=5)
    multi = MultiLabelHierarchicalClassifier(dag, stop=False, max_epochs=1, random_state=0).fit(X, y)
    single = HierarchicalClassifier(Tree.from_edges([("dog", "pet"), ("cat", "pet")]), stop=False, prototypes=None,
                                    max_epochs=1, random_state=0).fit(X[:6], ["dog", "cat", "pet"] * 2)
    message = "semantics='terminal' needs a model trained with stop scores; this one was fitted with stop=False"
    for clf in (multi, single):
        clf.set_params(semantics="terminal")
        with pytest.raises(ValueError, match=message):
            clf.predict(X[:2])


def test_pickles_and_refuses_the_tree_only_format(tmp_path):
    import pickle

    from hiclass_parallel.estimators import save_classifier

    dag, X, y = toy(n_per=10)
    clf = MultiLabelHierarchicalClassifier(dag, semantics="terminal", threshold=0.3, **FAST).fit(X, y)
    again = pickle.loads(pickle.dumps(clf))
    assert again.predict(X).tolist() == clf.predict(X).tolist()
    with pytest.raises(TypeError, match="pickle it instead"):
        save_classifier(clf, tmp_path / "model")


def test_scorers_and_cross_validation_use_the_dag_metrics():
    from sklearn.model_selection import KFold, cross_validate

    dag, X, y = toy(n_per=15)
    clf = MultiLabelHierarchicalClassifier(dag, semantics="terminal", threshold=0.3, **FAST).fit(X, y)
    expected = hierarchical_f1_score_dag(y, clf.predict(X), dag)
    assert get_scorer("hierarchical_f1")(clf, X, y) == pytest.approx(expected)
    assert get_scorer("hierarchical_recall_macro")(clf, X, y) == pytest.approx(
        hierarchical_recall_score_dag(y, clf.predict(X), dag, average="macro"))
    result = cross_validate(MultiLabelHierarchicalClassifier(dag, semantics="terminal", **FAST), X, y,
                            cv=KFold(3, shuffle=True, random_state=0),
                            scoring={"hierarchical_f1": get_scorer("hierarchical_f1")})
    assert result["test_hierarchical_f1"].mean() > 0.8
    # an indicator y works with the default (stratified-or-not) splitter of a search
    from sklearn.model_selection import GridSearchCV

    Y = read_label_sets(y, dag.n_nodes, dag.to_ids)[0]
    search = GridSearchCV(MultiLabelHierarchicalClassifier(dag, semantics="terminal", **FAST), {"threshold": [0.3, 0.9]}, cv=2)
    assert search.fit(X, Y).best_params_ == {"threshold": 0.3}  # the two-label cluster needs both


def test_class_text_of_a_dag_class_reaches_every_copy():
    from hiclass_parallel.ops.groups import stop_columns

    dag, X, y = toy(n_per=10)
    Xs = sp.csr_matrix(X)
    text = sp.csr_matrix(np.eye(dag.n_nodes, 4, dtype=np.float32) + 0.5)  # one row per DAG class
    kw = dict(semantics="terminal", max_epochs=2, random_state=0, module__hidden_units=8)
    short = MultiLabelHierarchicalClassifier(dag, module__class_features=text, **kw).fit(Xs, y)
    tree, origin = short.tree_, short.unrolled_.origin
    stop_col = stop_columns(tree, "sibling")
    internal = np.flatnonzero(stop_col >= 0)
    full = sp.vstack([text[origin], sp.csr_matrix((internal.size, 4), dtype=np.float32)]).tolil()
    full[stop_col[internal]] = text[origin[internal]]
    # the module given the rows spelled out per score column (every copy its class's row) scores identically
    from hiclass_parallel.estimators import SparseMLP
    from hiclass_parallel.estimators.networks._data import csr_tensor

    spelled = SparseMLP(n_features=4, n_outputs=short.n_scores_, hidden_units=8, class_features=full.tocsr())
    spelled.load_state_dict(short.net_.module_.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(short.decision_function(Xs), spelled(csr_tensor(Xs)).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match=rf"has {full.shape[0]} rows, but the classifier has {dag.n_nodes} classes"):
        MultiLabelHierarchicalClassifier(dag, module__class_features=full.tocsr(), **kw).fit(Xs, y)


# ---------------------------------------------------------------------------- partial semantics on DAGs
M02_EDGES = [("b", "a"), ("c", "a"), ("d", "b"), ("d", "c"), ("e", "d"), ("f", "c"), ("g", None)]


def brute_partial_proba(clf, scores: np.ndarray) -> np.ndarray:
    """P(class) under partial semantics from scratch: the mass of the unrolled tree's end nodes
    (P(end at e) = P(pass e) - its children's) whose path meets a copy of the class or of any
    of its DAG descendants. Python sets over the DAG's ancestors; no code shared with the fix."""
    tree, origin = clf.tree_, clf.unrolled_.origin
    through = np.exp(node_log_probs(torch.as_tensor(scores, dtype=torch.float64), tree,
                                    **clf._decode_kwargs()).numpy())
    end = through.copy()
    for c, p in enumerate(tree.parents.tolist()):
        if p >= 0:
            end[:, p] -= through[:, c]
    ancestors = clf.hierarchy_.ancestor_sets()  # itself included
    out = np.zeros((scores.shape[0], clf.hierarchy_.n_nodes))
    for e in range(tree.n_classes):
        reached = set().union(*(ancestors[origin[u]] for u in tree.paths[e] if u >= 0))
        out[:, sorted(reached)] += end[:, [e]]
    return out


def random_label_sets(rng, dag, n):
    return [list(dag.labels[rng.choice(dag.n_nodes, size=int(rng.integers(1, 3)), replace=False)]) for _ in range(n)]


def assert_monotone(proba: np.ndarray, dag: Dag) -> None:
    child, parent = dag.edges()
    gap = proba[:, child] - proba[:, parent]  # P(child) - P(parent) for every edge and row
    assert (gap <= 1e-6).all(), f"P(child) > P(parent) by {gap.max():.3g} on an edge"


@pytest.mark.parametrize("stop", [False, True])
def test_partial_proba_is_the_probability_of_lying_under_the_class(stop):
    """M02: on this DAG all 90 rows had P(b) < P(d) though every d is a b. P(class) is now the
    probability that the path meets a copy of the class or of one of its descendants."""
    dag = Dag.from_edges(M02_EDGES)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((90, 4)).astype(np.float32)
    y = [["e"], ["f"], ["d"], ["g"], ["b"]] * 18
    clf = MultiLabelHierarchicalClassifier(dag, stop=stop, max_epochs=3, random_state=0).fit(X, y)
    proba = clf.predict_proba(X)
    assert_monotone(proba, dag)
    b, d, e, c, a = dag.to_ids(["b", "d", "e", "c", "a"])
    assert (proba[:, b] >= proba[:, d] - 1e-6).all() and (proba[:, c] >= proba[:, d] - 1e-6).all()
    assert (proba[:, d] >= proba[:, e] - 1e-6).all() and (proba[:, a] >= proba[:, b] - 1e-6).all()
    np.testing.assert_allclose(proba, brute_partial_proba(clf, clf.decision_function(X)), rtol=1e-4, atol=1e-6)
    # the top-level classes cover every path once: a (with b..f) and g split the mass
    np.testing.assert_allclose(proba[:, a] + proba[:, dag.to_ids(["g"])[0]], 1.0, rtol=1e-5)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 9), stop=st.booleans())
def test_partial_proba_is_monotone_on_random_dags(seed, n, stop):
    """P(parent) >= P(child) on every edge and row, for random DAGs and random scores, and the
    value is the brute-force one."""
    rng = np.random.default_rng(seed)
    dag = random_dag(rng, n)
    X = rng.standard_normal((12, 3)).astype(np.float32)
    clf = MultiLabelHierarchicalClassifier(dag, stop=stop, max_epochs=1, random_state=0)
    clf.fit(X, random_label_sets(rng, dag, 12))
    scores = rng.normal(scale=3.0, size=(20, n_outputs(clf.tree_, "sibling", clf.stop_))).astype(np.float32)
    proba = clf._node_proba(torch.as_tensor(scores)).numpy()
    assert_monotone(proba, dag)
    np.testing.assert_allclose(proba, brute_partial_proba(clf, scores), rtol=1e-4, atol=1e-6)
    assert_monotone(clf.predict_proba(X), dag)


def test_partial_predict_drops_every_ancestor_of_a_kept_label():
    """M03: P(a)=0.9, P(b)=P(c)=0.25, P(d)=0.35 at threshold 0.3 gave ('a', 'd'): a is an
    ancestor of d through b and c, though none of a's children reaches the threshold."""
    dag = Dag.from_edges(M02_EDGES)
    clf = MultiLabelHierarchicalClassifier(dag, threshold=0.3, top_k=5)
    clf.hierarchy_ = dag
    p = dict.fromkeys(dag.labels.tolist(), 0.0)
    p.update(a=0.9, b=0.25, c=0.25, d=0.35)
    chosen = clf._select(torch.tensor([[p[v] for v in dag.labels.tolist()]]))
    assert dag.labels[chosen[0][chosen[0] >= 0].numpy()].tolist() == ["d"]
    p.update(g=0.5, e=0.31)  # e is under d: only e (and the unrelated g) remain
    chosen = clf._select(torch.tensor([[p[v] for v in dag.labels.tolist()]]))
    assert sorted(dag.labels[chosen[0][chosen[0] >= 0].numpy()].tolist()) == ["e", "g"]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 9), threshold=st.sampled_from([0.05, 0.2, 0.4]))
def test_partial_predictions_never_hold_an_ancestor_of_another_member(seed, n, threshold):
    rng = np.random.default_rng(seed)
    dag = random_dag(rng, n)
    X = rng.standard_normal((40, 3)).astype(np.float32)
    clf = MultiLabelHierarchicalClassifier(dag, threshold=threshold, top_k=4, max_epochs=2, random_state=0)
    clf.fit(X, random_label_sets(rng, dag, 40))
    ancestors = dag.ancestor_sets()
    index = {v: i for i, v in enumerate(dag.labels.tolist())}
    sets = clf.predict(X).tolist()
    assert all(sets)
    for labels in sets:
        ids = [index[v] for v in labels]
        assert not any(u != v and u in ancestors[v] for u in ids for v in ids), labels
    # the same rule on raw probabilities, not monotone ones: descendants, not children, decide
    proba = torch.as_tensor(rng.dirichlet(np.ones(n) * 0.3, size=30))
    for row in clf._select(proba).numpy():
        ids = [int(v) for v in row if v >= 0]
        assert ids and not any(u != v and u in ancestors[v] for u in ids for v in ids), ids
