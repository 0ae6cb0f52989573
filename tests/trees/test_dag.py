"""Hierarchies with several parents: unrolling into trees, and the DAG metrics.

The references here are deliberately naive (recursive path enumeration, Python sets over
label dicts) and share no code with :mod:`hiclass_parallel.dag`.
"""

from __future__ import annotations

import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiclass_parallel import Tree, TreeError, UnknownLabelError
from hiclass_parallel.exceptions import UnknownClassWarning
from hiclass_parallel.dag import Dag, UnrolledDag, unroll_dag
from hiclass_parallel.metrics import (
    hierarchical_f1_score,
    hierarchical_f1_score_dag,
    hierarchical_fbeta_score,
    hierarchical_fbeta_score_dag,
    hierarchical_precision_score,
    hierarchical_precision_score_dag,
    hierarchical_recall_score,
    hierarchical_recall_score_dag,
)


# ---------------------------------------------------------------------------- references
def parent_map(edges):
    """{label: set of parents}, None for the implicit root; a label never a child is top-level."""
    parents: dict = {}
    for child, parent in edges:
        parents.setdefault(child, set()).add(parent)
        if parent is not None:
            parents.setdefault(parent, set())
    return {k: (v or {None}) for k, v in parents.items()}


def brute_paths(parents, label):
    """Every ancestral path of ``label`` as a tuple of labels from the top level down."""
    out = []
    for p in parents[label]:
        out += [(label,)] if p is None else [path + (label,) for path in brute_paths(parents, p)]
    return out


def brute_ancestors(parents, label):
    if label is None:
        return set()
    seen = {label}
    for p in parents[label]:
        if p is not None:
            seen |= brute_ancestors(parents, p)
    return seen


def brute_prf(parents, y_true, y_pred, beta, average):
    T = [brute_ancestors(parents, t) for t in y_true]
    P = [brute_ancestors(parents, p) for p in y_pred]
    common = [len(t & p) for t, p in zip(T, P)]
    b2 = beta * beta
    if average == "micro":
        c, nt, npred = sum(common), sum(map(len, T)), sum(map(len, P))
        p = c / npred if npred else 0.0
        r = c / nt if nt else 0.0
        f = (1 + b2) * c / (b2 * nt + npred) if (b2 * nt + npred) else 0.0
        return p, r, f
    ps = [c / len(p) if p else 0.0 for c, p in zip(common, P)]
    rs = [c / len(t) if t else 0.0 for c, t in zip(common, T)]
    fs = [(1 + b2) * c / (b2 * len(t) + len(p)) if (b2 * len(t) + len(p)) else 0.0 for c, t, p in zip(common, T, P)]
    return np.mean(ps), np.mean(rs), np.mean(fs)


# ---------------------------------------------------------------------------- random DAGs
@st.composite
def dags(draw, max_nodes=9, tree=False, int_labels=None):
    """Edges of a random DAG with shuffled labels: node i may have parents among nodes < i
    (in a hidden order), the implicit root too; edges come in a shuffled order."""
    n = draw(st.integers(1, max_nodes))
    use_ints = draw(st.booleans()) if int_labels is None else int_labels
    names = draw(st.permutations(range(n)))
    label = [names[i] if use_ints else f"n{names[i]}" for i in range(n)]
    edges = []
    for i in range(n):
        if tree or i == 0:
            choice = draw(st.integers(-1, i - 1))
            edges.append((label[i], None if choice < 0 else label[choice]))
            continue
        ps = draw(st.sets(st.integers(-1, i - 1), min_size=1, max_size=3))
        edges += [(label[i], None if p < 0 else label[p]) for p in sorted(ps)]
    order = draw(st.permutations(range(len(edges))))
    return [edges[k] for k in order]


def diamond():
    # a
    # |\
    # b c        d has parents b and c; e under d; f under both a and (the root)
    #  \|
    #   d - e
    return [("b", "a"), ("c", "a"), ("d", "b"), ("d", "c"), ("e", "d"), ("f", "a"), ("f", None)]


# ---------------------------------------------------------------------------- unrolling
def test_unroll_diamond_by_hand():
    unrolled = unroll_dag(diamond())
    tree = unrolled.tree
    assert tree.labels.tolist() == ["b", "a", "c", "d[0]", "d[1]", "e[0]", "e[1]", "f[0]", "f[1]"]
    assert tree.path_labels("e[0]") == ["a", "b", "d[0]", "e[0]"]
    assert tree.path_labels("e[1]") == ["a", "c", "d[1]", "e[1]"]
    assert tree.path_labels("f[1]") == ["f[1]"]
    assert unrolled.to_original(["e[1]", "f[1]", "a"]).tolist() == ["e", "f", "a"]
    assert unrolled.copies("d").tolist() == ["d[0]", "d[1]"]
    assert unrolled.copies("a").tolist() == ["a"]
    assert isinstance(unrolled, UnrolledDag) and "9" in repr(unrolled)


@settings(max_examples=60, deadline=None)
@given(dags())
def test_copies_are_the_distinct_root_paths(edges):
    dag = Dag.from_edges(edges)
    unrolled = dag.unroll()
    parents = parent_map(edges)
    tree = unrolled.tree
    assert len(parents) == dag.n_nodes
    assert dag.n_unrolled() == tree.n_classes == sum(len(brute_paths(parents, v)) for v in parents)
    for v in parents:
        expected = sorted(brute_paths(parents, v))
        copies = unrolled.copy_ids(v)
        assert copies.size == len(expected) == dag.n_paths()[int(dag.to_ids([v])[0])]
        # the copies' paths mapped back are exactly the node's paths, each once
        got = sorted(tuple(unrolled.to_original(tree.path_labels(c)).tolist()) for c in tree.labels[copies])
        assert got == expected
        # round trips: copy -> origin -> all copies
        assert (unrolled.origin[copies] == dag.to_ids([v])[0]).all()
        assert set(unrolled.to_original(tree.labels[copies]).tolist()) == {v}
        if len(expected) == 1:
            assert tree.labels[copies].tolist() == [v]
    # copies are contiguous per origin node, in DAG node order
    assert (np.diff(unrolled.origin) >= 0).all()
    assert np.array_equal(np.bincount(unrolled.origin, minlength=dag.n_nodes), np.diff(unrolled.copy_offsets))


@settings(max_examples=30, deadline=None)
@given(dags(), st.randoms(use_true_random=False))
def test_unrolling_is_deterministic_and_ignores_edge_order(edges, rnd):
    a = unroll_dag(edges)
    b = unroll_dag(list(edges))
    assert a.tree == b.tree and np.array_equal(a.origin, b.origin)
    shuffled = list(edges)
    rnd.shuffle(shuffled)
    c = unroll_dag(shuffled)
    # node ids follow first appearance, so compare by label: same copies, same paths
    paths = lambda u: sorted(tuple(u.to_original(u.tree.path_labels(x)).tolist()) for x in u.tree.labels.tolist())
    assert paths(a) == paths(c)


@settings(max_examples=40, deadline=None)
@given(dags(tree=True))
def test_a_tree_unrolls_to_the_same_tree(edges):
    dag = Dag.from_edges(edges)
    assert dag.is_tree
    unrolled = dag.unroll()
    assert unrolled.tree == Tree.from_edges(edges)
    assert np.array_equal(unrolled.origin, np.arange(dag.n_nodes))


@settings(max_examples=60, deadline=None)
@given(dags())
def test_entries_are_the_tops_of_each_nodes_region(edges):
    """``UnrolledDag.entries``: for every node, the copies whose path meets the node or one
    of its descendants are exactly the subtrees under its entry copies, and those subtrees
    are disjoint (so their path probabilities add up)."""
    parents = parent_map(edges)
    unrolled = unroll_dag(edges)
    tree, labels = unrolled.tree, unrolled.labels.tolist()
    copy, node = unrolled.entries()
    assert not copy.flags.writeable and unrolled.entries()[0] is copy  # computed once
    for v, name in enumerate(labels):
        region = {u for u in range(tree.n_classes)  # paths that meet v or a descendant of v
                  if any(name in brute_ancestors(parents, labels[unrolled.origin[w]]) for w in tree.paths[u] if w >= 0)}
        tops = copy[node == v].tolist()
        assert tops and len(set(tops)) == len(tops)
        under = [{u for u in range(tree.n_classes) if t in tree.paths[u]} for t in tops]
        assert set().union(*under) == region
        assert sum(map(len, under)) == len(region)  # disjoint


def test_networkx_and_edges_agree():
    edges = diamond()
    graph = nx.DiGraph()
    for child, parent in edges:
        graph.add_node(child)
    graph.add_edges_from((p, c) for c, p in edges if p is not None)
    # networkx has no "root parent": f is a top-level class only through the edge list
    a = unroll_dag(graph)
    b = unroll_dag([e for e in edges if e != ("f", None)])
    key = lambda u: sorted(tuple(u.to_original(u.tree.path_labels(x)).tolist()) for x in u.tree.labels.tolist())
    assert key(a) == key(b)
    assert unroll_dag(a).tree == a.tree  # an UnrolledDag or a Dag is accepted too
    assert unroll_dag(a.dag).tree == a.tree


@pytest.mark.parametrize(
    "edges, cycle",
    [
        ([("a", "a")], "'a' -> 'a'"),
        ([("a", "b"), ("b", "a")], "'a' -> 'b' -> 'a'"),
        ([("x", None), ("a", "x"), ("a", "c"), ("b", "a"), ("c", "b"), ("d", "c")], "'c' -> 'a' -> 'b' -> 'c'"),
    ],
)
def test_cycles_are_refused_and_named(edges, cycle):
    with pytest.raises(TreeError, match="cycle") as info:
        Dag.from_edges(edges)
    message = str(info.value)
    names = cycle.split(" -> ")
    # the cycle's nodes are named, closed, in parent -> child order (any rotation)
    shown = message.split(": ", 1)[1].split(" -> ")
    assert shown[0] == shown[-1] and sorted(shown[:-1]) == sorted(names[:-1])
    parents = parent_map(edges)
    for parent, child in zip(shown, shown[1:]):
        assert parent.strip("'") in parents[child.strip("'")]


def test_max_nodes_names_the_size():
    # a ladder: every level has two nodes, each the child of both nodes above: 2**k paths
    edges = [("l0a", None), ("l0b", None)]
    for k in range(1, 12):
        for s in "ab":
            edges += [(f"l{k}{s}", f"l{k - 1}a"), (f"l{k}{s}", f"l{k - 1}b")]
    dag = Dag.from_edges(edges)
    total = sum(2 ** (k + 1) for k in range(12))
    assert dag.n_unrolled() == total
    with pytest.raises(TreeError, match=rf"would have {total} classes .*max_nodes=1000"):
        dag.unroll(max_nodes=1000)
    with pytest.raises(TreeError, match="up to 2048 paths per node"):
        unroll_dag(edges, max_nodes=10)
    assert dag.unroll(max_nodes=None).tree.n_classes == total
    assert dag.unroll(max_nodes=total).tree.n_classes == total


def test_errors_name_the_input():
    with pytest.raises(TreeError, match="pair"):
        Dag.from_edges([("a", "b", "c")])
    with pytest.raises(TreeError, match="empty"):
        Dag.from_edges([])
    with pytest.raises(TreeError, match="unhashable"):
        Dag.from_edges([(["a"], None)])
    # None pads y: it cannot name a class; as a parent it still marks the top level
    with pytest.raises(TreeError, match=r"edge \(None, 'a'\): None cannot be a class label"):
        Dag.from_edges([("b", "a"), (None, "a")])
    with pytest.raises(TreeError, match=r"label 1 is None"):
        Dag(["a", None], [[], [0]])
    assert Dag.from_edges([("b", "a"), ("b", None)]).parents_of("b") == ["a"]
    with pytest.raises(TreeError, match="DiGraph"):
        Dag.from_networkx([("a", "b")])
    with pytest.raises(TreeError, match="collide"):
        unroll_dag([("x", "a"), ("x", "b"), ("x[0]", None)])
    with pytest.raises(UnknownLabelError, match="'zz'"):
        unroll_dag(diamond()).copies("zz")
    with pytest.raises(IndexError):
        unroll_dag(diamond()).original_ids([99])
    assert unroll_dag(diamond()).original_ids([[-1, 3]]).tolist() == [[-1, 3]]


# ---------------------------------------------------------------------------- metrics
@st.composite
def dag_and_samples(draw, tree=False):
    edges = draw(dags(tree=tree))
    labels = sorted(parent_map(edges), key=repr)
    n = draw(st.integers(1, 12))
    pick = st.sampled_from(labels)
    y_true = draw(st.lists(pick, min_size=n, max_size=n))
    y_pred = draw(st.lists(st.one_of(pick, st.none()) if not tree else pick, min_size=n, max_size=n))
    return edges, y_true, y_pred


@settings(max_examples=80, deadline=None)
@given(dag_and_samples(), st.sampled_from(["micro", "macro"]), st.sampled_from([0.5, 1.0, 2.0]))
def test_dag_metrics_match_brute_force_sets(data, average, beta):
    edges, y_true, y_pred = data
    dag = Dag.from_edges(edges)
    expected = brute_prf(parent_map(edges), y_true, y_pred, beta, average)
    kw = {"average": average, "zero_division": 0.0}
    got = (
        hierarchical_precision_score_dag(y_true, y_pred, dag, **kw),
        hierarchical_recall_score_dag(y_true, y_pred, dag, **kw),
        hierarchical_fbeta_score_dag(y_true, y_pred, dag, beta=beta, **kw),
    )
    assert got == pytest.approx(expected)
    if beta == 1.0:
        assert hierarchical_f1_score_dag(y_true, y_pred, dag.unroll(), **kw) == pytest.approx(expected[2])
    # node ids give the same answer as labels
    ids = lambda ys: [-1 if y is None else int(dag.to_ids([y])[0]) for y in ys]
    assert hierarchical_recall_score_dag(ids(y_true), ids(y_pred), dag, input_type="ids", **kw) == pytest.approx(expected[1])


@settings(max_examples=40, deadline=None)
@given(dag_and_samples(tree=True), st.sampled_from(["micro", "macro"]))
def test_dag_metrics_equal_the_tree_metrics_on_trees(data, average):
    edges, y_true, y_pred = data
    dag, tree = Dag.from_edges(edges), Tree.from_edges(edges)
    for dag_metric, tree_metric in [
        (hierarchical_precision_score_dag, hierarchical_precision_score),
        (hierarchical_recall_score_dag, hierarchical_recall_score),
        (hierarchical_f1_score_dag, hierarchical_f1_score),
    ]:
        assert dag_metric(y_true, y_pred, dag, average=average) == pytest.approx(
            tree_metric(y_true, y_pred, tree, average=average, input_type="labels")
        )
    assert hierarchical_fbeta_score_dag(y_true, y_pred, dag, beta=2.0) == pytest.approx(
        hierarchical_fbeta_score(y_true, y_pred, tree, beta=2.0, input_type="labels")
    )


def test_ancestor_matrix_matches_the_sets():
    dag = Dag.from_edges(diamond())
    dense = dag.ancestor_matrix().toarray()
    for v, ancestors in enumerate(dag.ancestor_sets()):
        assert set(np.flatnonzero(dense[v]).tolist()) == set(ancestors)
    # e's ancestors come through both of d's parents, which no single path holds
    assert sorted(dag.labels[list(dag.ancestor_sets()[int(dag.to_ids(["e"])[0])])].tolist()) == ["a", "b", "c", "d", "e"]


def test_dag_metric_errors_and_warnings():
    dag = Dag.from_edges(diamond())
    with pytest.raises(ValueError, match="average"):
        hierarchical_f1_score_dag(["a"], ["a"], dag, average="weighted")
    with pytest.raises(ValueError, match="nested"):
        hierarchical_f1_score_dag([[["a"]]], [["a"]], dag)
    with pytest.raises(ValueError, match="samples"):
        hierarchical_f1_score_dag(["a", "b"], ["a"], dag)
    with pytest.raises(UnknownLabelError):
        hierarchical_f1_score_dag(["a"], ["zz"], dag, unknown="raise")
    # by default a class the hierarchy lacks is a miss of its own, with one warning
    with pytest.warns(UnknownClassWarning, match="zz"):
        assert hierarchical_f1_score_dag(["a"], ["zz"], dag) == 0.0
    with pytest.raises(ValueError, match="outside"):
        hierarchical_f1_score_dag([0], [99], dag, input_type="ids")
    with pytest.raises(TypeError, match="Dag"):
        hierarchical_f1_score_dag(["a"], ["a"], {"a": None})
    with pytest.warns(Warning, match="ill-defined"):
        assert hierarchical_precision_score_dag(["a"], [None], dag) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hierarchical_precision_score_dag(["a"], [None], dag, zero_division=1.0) == 1.0
    # sample weights: the second sample counts twice
    w = hierarchical_recall_score_dag(["e", "b"], ["d", "b"], dag, sample_weight=[1, 2], average="macro")
    assert w == pytest.approx((4 / 5 + 2 * 1) / 3)


# ---------------------------------------------------------------------------- end to end
def test_classifier_on_an_unrolled_dag():
    from hiclass_parallel import HierarchicalClassifier

    unrolled = unroll_dag(diamond())
    tree = unrolled.tree
    rng = np.random.default_rng(0)
    # one well-separated cluster per leaf copy; targets are copies of the unrolled tree
    leaves = tree.labels[tree.leaves]
    centres = rng.normal(scale=4.0, size=(leaves.size, 5))
    which = rng.integers(0, leaves.size, size=300)
    X = (centres[which] + rng.normal(size=(300, 5))).astype(np.float32)
    y = leaves[which]
    clf = HierarchicalClassifier(tree, max_epochs=30, lr=0.02, module__hidden_units=32, random_state=0).fit(X, y)
    paths = clf.predict(X)  # label paths of the unrolled tree, from the top level down
    pred = clf.predict_labels(X)  # the deepest label of each path: a copy
    assert paths.shape[0] == pred.shape[0] == X.shape[0]
    assert set(pred.tolist()) <= set(tree.labels.tolist())
    original_pred = unrolled.to_original(pred)
    original_true = unrolled.to_original(y)
    # node ids map back the same way
    assert np.array_equal(unrolled.dag.labels[unrolled.original_ids(clf.predict_node(X))], original_pred)
    assert set(original_pred.tolist()) <= set(unrolled.dag.labels.tolist())
    assert hierarchical_f1_score_dag(original_true, original_pred, unrolled) > 0.9
    # the copies' paths are valid in the DAG: each predicted path maps to one of its node's paths
    dag_paths = {v: set(brute_paths(parent_map(diamond()), v)) for v in unrolled.dag.labels.tolist()}
    for row, last in zip(paths[:20], original_pred[:20]):
        labels = tuple(unrolled.to_original([x for x in row if x != clf.pad_label_]).tolist())
        assert labels in dag_paths[last]
