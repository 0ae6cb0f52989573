"""``Dag.subgraph``: keeping some nodes of a DAG, checked against plain Python sets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiclass_parallel import TreeError
from hiclass_parallel.dag import Dag


@st.composite
def dag_and_keep(draw):
    """A random DAG with shuffled labels (node i's parents among nodes < i in a hidden order,
    or the implicit root) and the ids of the nodes to keep, in any order, with repeats."""
    n = draw(st.integers(1, 10))
    names = draw(st.permutations(range(n)))
    labels = [f"n{names[i]}" for i in range(n)]
    edges = []
    for i in range(n):
        ps = draw(st.sets(st.integers(-1, i - 1), min_size=1, max_size=3)) if i else {-1}
        edges += [(labels[i], None if p < 0 else labels[p]) for p in sorted(ps)]
    edges = [edges[k] for k in draw(st.permutations(range(len(edges))))]
    dag = Dag.from_edges(edges)
    keep = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n))
    return dag, keep


def reference(dag: Dag, keep: list[int]) -> dict:
    """{label: set of parent labels (None: the implicit root)} of the kept nodes."""
    kept = set(keep)
    out = {}
    for v in sorted(kept):
        parents = {None if p < 0 else dag.labels[p] for p in dag.parent_ids_of(v).tolist() if p < 0 or p in kept}
        out[dag.labels[v]] = parents or {None}
    return out


@settings(max_examples=80, deadline=None)
@given(dag_and_keep())
def test_subgraph_keeps_the_links_among_kept_nodes(data):
    dag, keep = data
    sub = dag.subgraph(keep)
    expected = reference(dag, keep)
    assert sub.labels.tolist() == list(expected)  # ascending id order of the original
    got = {label: {None if p < 0 else sub.labels[p] for p in sub.parent_ids_of(i).tolist()}
           for i, label in enumerate(sub.labels.tolist())}
    assert got == expected
    mask = np.zeros(dag.n_nodes, dtype=bool)
    mask[keep] = True
    by_mask = dag.subgraph(mask)
    assert by_mask.labels.tolist() == sub.labels.tolist()
    np.testing.assert_array_equal(by_mask.parent_ids, sub.parent_ids)
    np.testing.assert_array_equal(by_mask.parent_offsets, sub.parent_offsets)


def test_subgraph_of_everything_is_the_same_dag_and_errors_name_the_input():
    dag = Dag.from_edges([("b", "a"), ("c", "a"), ("d", "b"), ("d", "c"), ("e", "d"), ("f", None), ("f", "a")])
    whole = dag.subgraph(np.arange(dag.n_nodes))
    assert whole.labels.tolist() == dag.labels.tolist()
    np.testing.assert_array_equal(whole.parent_ids, dag.parent_ids)
    np.testing.assert_array_equal(whole.depth, dag.depth)
    # d loses b, keeps c; e keeps d; f keeps the implicit root only
    sub = dag.subgraph(dag.to_ids(["e", "d", "c", "f"]))
    assert sub.labels.tolist() == ["c", "d", "e", "f"]
    assert [sub.parents_of(x) for x in ("c", "d", "e", "f")] == [[], ["c"], ["d"], []]
    assert sub.n_unrolled() == 4 and sub.is_tree
    with pytest.raises(TreeError, match=r"node ids 6, -1 are not in \[0, 6\)"):
        dag.subgraph([0, 6, -1])
    with pytest.raises(TreeError, match="empty"):
        dag.subgraph(np.zeros(dag.n_nodes, dtype=bool))
    with pytest.raises(TreeError, match=r"mask must have shape \(6,\), got \(3,\)"):
        dag.subgraph(np.ones(3, dtype=bool))


def test_subgraph_of_no_ids_or_of_non_integer_ids_is_a_tree_error():
    """``subgraph([])`` read ``[]`` as float64 and NumPy's casting raised a
    TypeError; the docstring promises a TreeError."""
    dag = Dag.from_edges([("b", "a")])
    for empty in ([], (), np.array([], dtype=np.float64), np.array([], dtype=np.int64)):
        with pytest.raises(TreeError, match="the subgraph is empty"):
            dag.subgraph(empty)
    with pytest.raises(TreeError, match=r"node ids must be integers .*dtype float64: 0\.5"):
        dag.subgraph([0.5])
    assert dag.subgraph([1]).labels.tolist() == ["a"]
