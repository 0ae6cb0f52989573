"""Class hierarchies with several parents (DAGs), unrolled into trees.

A :class:`Dag` is a directed acyclic class hierarchy: a class may have several parents (in
WordNet 3.0, ``person.n.01`` is both an ``organism.n.01`` and a ``causal_agent.n.01``). The
tree methods need one ancestral path per class, so :meth:`Dag.unroll` turns the DAG into a
:class:`~hiclass_parallel.tree.Tree` of *node copies*: one copy per distinct ancestral path
from the top level down. Every tree method, loss, decoder and tree metric then applies
unchanged to the unrolled tree, and :class:`UnrolledDag` maps copies back to the DAG's nodes.

Conventions:

- Like :class:`~hiclass_parallel.tree.Tree`, the root is implicit and is not a class. A class
  without a parent is a top-level class; an edge ``(child, None)`` makes ``child`` a
  top-level class *as well as* a child of its other parents (one more path).
- Copy labels: a node with one ancestral path keeps its label, so a DAG that is a tree
  unrolls to exactly the :class:`~hiclass_parallel.tree.Tree` built from the same edges. A
  node with ``m > 1`` paths becomes ``m`` copies labelled ``f"{label}[{k}]"``, ``k = 0..m-1``,
  in the order of their paths (tuples of the DAG's node ids from the top level down).
  ``unrolled.tree.path_labels(copy_label)`` shows the path of a copy.
- Copy ids run in the order of the DAG's nodes (the order labels first appear), the copies
  of one node contiguous and sorted by their paths: the ids of the copies of node ``v`` are
  ``copy_offsets[v]:copy_offsets[v + 1]``.
- The number of paths can grow exponentially with depth; :meth:`Dag.n_unrolled` counts them
  without building anything, and ``max_nodes`` refuses an unrolled tree that is too big.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from .exceptions import TreeError, UnknownLabelError, describe_some
from .tree import PAD, Tree
from .tree._arrays import readonly
from .tree._labels import check_label, edge_pair

__all__ = ["Dag", "UnrolledDag", "unroll_dag"]

#: Default refusal size of :meth:`Dag.unroll`: past this the unrolled tree is refused.
MAX_NODES = 10_000_000


class Dag:
    """A class hierarchy in which a class may have several parents (a DAG).

    Build one with :meth:`from_edges` or :meth:`from_networkx`; cycles are refused with a
    :class:`~hiclass_parallel.exceptions.TreeError` naming the cycle.

    Parameters
    ----------
    labels : sequence of hashable of length n_nodes
        The label of every node (unique).
    parents : sequence of sequences of int
        ``parents[v]`` lists the node ids of the parents of node ``v``; ``-1`` stands for the
        implicit root, and an empty list means ``[-1]`` (a top-level class).

    Attributes
    ----------
    labels : ndarray of shape (n_nodes,)
        Label of each node id (int64 for integer labels, else object).
    parent_offsets : ndarray of int64 of shape (n_nodes + 1,)
    parent_ids : ndarray of int64 of shape (n_edges,)
        The parents of node ``v`` are ``parent_ids[parent_offsets[v]:parent_offsets[v + 1]]``,
        ascending and distinct; ``-1`` is the implicit root.
    depth : ndarray of int64 of shape (n_nodes,)
        Length of the *longest* path from the top level minus one (top-level classes: 0).

    Examples
    --------
    >>> from hiclass_parallel.dag import Dag
    >>> dag = Dag.from_edges([("person", "organism"), ("person", "causal agent"),
    ...                       ("organism", "living thing"), ("child", "person")])
    >>> dag
    Dag(n_nodes=5, n_edges=6, n_unrolled=7)
    >>> dag.n_unrolled()
    7
    >>> dag.unroll().tree.labels.tolist()
    ['person[0]', 'person[1]', 'organism', 'causal agent', 'living thing', 'child[0]', 'child[1]']
    """

    def __init__(self, labels: Sequence[Hashable], parents: Sequence[Sequence[int]]):
        # The Tree's label rules (unique, hashable, no NaN; ints as int64) apply unchanged.
        self._labels = Tree(np.full(len(labels), PAD, dtype=np.int64), list(labels)).labels if len(labels) else None
        if self._labels is None:
            raise TreeError("the hierarchy is empty: it needs at least one class")
        n = len(self._labels)
        if len(parents) != n:
            raise TreeError(f"got {len(parents)} parent lists for {n} labels")
        lists = [np.unique(np.asarray(list(p) if len(p) else [PAD], dtype=np.int64)) for p in parents]
        counts = np.fromiter((p.size for p in lists), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        ids = np.concatenate(lists)
        bad = np.flatnonzero((ids < -1) | (ids >= n))
        if bad.size:
            raise TreeError(f"parent ids {describe_some(ids[bad].tolist())} are not in [-1, {n})")
        self._offsets = readonly(offsets)
        self._parent_ids = readonly(ids)
        child = np.repeat(np.arange(n), counts)
        real = ids >= 0
        self._edges = (readonly(child[real]), readonly(ids[real]))
        self._order = self._topological_order()
        self._depth = readonly(self._longest_depth())
        self._index: dict | None = None
        self._closure: Any = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, edges: Iterable[tuple[Hashable, Hashable | None]]) -> Dag:
        """Build a DAG from ``(child, parent)`` label pairs; a child may have several parents.

        A parent of ``None`` marks a top-level class (and can be given besides other
        parents); a label that is never a child is a top-level class. A child of ``None`` is
        refused (``None`` pads ``y``). Node ids follow the order in which labels first appear,
        as in :meth:`Tree.from_edges`. Repeated edges count once.

        Examples
        --------
        >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
        >>> dag.labels.tolist(), dag.parents_of("c")
        (['c', 'a', 'b', 'd'], ['a', 'b'])
        """
        order: dict = {}
        parent_lists: list[list[int]] = []

        def node(label: Hashable) -> int:
            check_label(label)
            if label not in order:
                order[label] = len(order)
                parent_lists.append([])
            return order[label]

        for edge in edges:
            child, parent = edge_pair(edge)
            c = node(child)
            parent_lists[c].append(PAD if parent is None else node(parent))
        if not order:
            raise TreeError("the hierarchy is empty: it needs at least one class")
        return cls(list(order), parent_lists)

    @classmethod
    def from_tree(cls, tree: Tree) -> Dag:
        """The DAG of a :class:`~hiclass_parallel.tree.Tree`: same labels and node ids, one parent each.

        Examples
        --------
        >>> from hiclass_parallel import Tree
        >>> dag = Dag.from_tree(Tree.from_parents([-1, 0, 0], labels=["a", "b", "c"]))
        >>> dag.is_tree, dag.parents_of("c")
        (True, ['a'])
        """
        if not isinstance(tree, Tree):
            raise TypeError(f"from_tree expects a Tree, got {type(tree).__name__}")
        return cls(tree.labels.tolist(), [[int(p)] for p in tree.parents.tolist()])

    @classmethod
    def from_networkx(cls, graph: Any) -> Dag:
        """Build a DAG from a ``networkx.DiGraph`` whose edges point from parent to child.

        Nodes without a predecessor are top-level classes. networkx itself is not imported.

        Examples
        --------
        >>> import networkx as nx
        >>> dag = Dag.from_networkx(nx.DiGraph([("a", "c"), ("b", "c")]))
        >>> dag.n_unrolled()
        4
        """
        if not (hasattr(graph, "predecessors") and hasattr(graph, "nodes")):
            raise TreeError(f"from_networkx expects a networkx.DiGraph, got {type(graph).__name__}")
        labels = list(graph.nodes)
        index = {label: i for i, label in enumerate(labels)}
        return cls(labels, [[index[p] for p in graph.predecessors(label)] for label in labels])

    def _topological_order(self) -> np.ndarray:
        """Kahn's algorithm over parent -> child edges; a cycle is named with its labels."""
        n = self.n_nodes
        child, parent = self._edges
        pending = np.bincount(child, minlength=n)
        # children of each parent, as CSR, to release them when the parent is placed
        by_parent = np.argsort(parent, kind="stable")
        kids = child[by_parent]
        kid_offsets = np.searchsorted(parent[by_parent], np.arange(n + 1))
        order = np.empty(n, dtype=np.int64)
        frontier = np.flatnonzero(pending == 0)
        done = 0
        # One vectorised step per longest-path level, not per node.
        while frontier.size:
            order[done:done + frontier.size] = frontier
            done += frontier.size
            starts, stops = kid_offsets[frontier], kid_offsets[frontier + 1]
            lengths = stops - starts
            ends = np.cumsum(lengths)
            released = kids[np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1])]
            np.subtract.at(pending, released, 1)
            released = np.unique(released)
            frontier = released[pending[released] == 0]
        if done < n:
            left = np.ones(n, dtype=bool)
            left[order[:done]] = False
            raise TreeError(f"the edges form a cycle (parent -> child): {self._cycle(left)}")
        return order

    def _cycle(self, left: np.ndarray) -> str:
        """A cycle among the nodes Kahn's algorithm could not place, as 'a' -> 'b' -> 'a'.

        Every such node has a parent that is also left, so following those parents must
        come back to a node already seen.
        """
        node = int(np.flatnonzero(left)[0])
        seen: dict[int, int] = {}
        while node not in seen:
            seen[node] = len(seen)
            node = next(int(p) for p in self.parent_ids_of(node) if p >= 0 and left[p])
        cycle = list(seen)[seen[node]:]
        # walked child -> parent; show it parent -> child, closed
        cycle = cycle[::-1] + [cycle[-1]]
        return " -> ".join(repr(self._labels[v].item() if isinstance(self._labels[v], np.generic) else self._labels[v]) for v in cycle)

    def _longest_depth(self) -> np.ndarray:
        depth = np.zeros(self.n_nodes, dtype=np.int64)
        for v in self._order.tolist():
            parents = self.parent_ids_of(v)
            parents = parents[parents >= 0]
            if parents.size:
                depth[v] = depth[parents].max() + 1
        return depth

    # ------------------------------------------------------------------ accessors
    @property
    def n_nodes(self) -> int:
        return int(self._labels.size)

    @property
    def n_edges(self) -> int:
        """Number of parent links, the implicit root's included."""
        return int(self._parent_ids.size)

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    @property
    def parent_offsets(self) -> np.ndarray:
        return self._offsets

    @property
    def parent_ids(self) -> np.ndarray:
        return self._parent_ids

    @property
    def depth(self) -> np.ndarray:
        return self._depth

    @property
    def is_tree(self) -> bool:
        """True when every node has exactly one parent (the implicit root counts as one)."""
        return bool((np.diff(self._offsets) == 1).all())

    def parent_ids_of(self, node: int) -> np.ndarray:
        """Node ids of the parents of node id ``node`` (``-1``: the implicit root)."""
        return self._parent_ids[self._offsets[node]:self._offsets[node + 1]]

    def parents_of(self, label: Hashable) -> list:
        """Labels of the parents of ``label`` (the implicit root left out)."""
        ids = self.parent_ids_of(int(self.to_ids([label])[0]))
        return self._labels[ids[ids >= 0]].tolist()

    def to_ids(self, labels: Any) -> np.ndarray:
        """Node ids (int64) of labels, any shape; unknown labels raise :class:`UnknownLabelError`.

        Examples
        --------
        >>> Dag.from_edges([("c", "a"), ("c", "b")]).to_ids(["b", "c"])
        array([2, 0])
        """
        if self._index is None:
            self._index = {label: i for i, label in enumerate(self._labels.tolist())}
        values = np.asarray(labels, dtype=object)
        flat = values.reshape(-1)
        ids = np.fromiter((self._index.get(v.item() if isinstance(v, np.generic) else v, -1) for v in flat),
                          dtype=np.int64, count=flat.size)
        if (ids < 0).any():
            raise UnknownLabelError.of(flat[ids < 0].tolist())
        return ids.reshape(values.shape)

    def n_paths(self) -> list[int]:
        """Number of distinct ancestral paths of every node (exact Python ints, no overflow).

        A node's count is the sum of its parents' counts (the implicit root counts 1).

        Examples
        --------
        >>> Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")]).n_paths()
        [2, 1, 1, 2]
        """
        count = [0] * self.n_nodes
        offsets, ids = self._offsets.tolist(), self._parent_ids.tolist()
        for v in self._order.tolist():
            count[v] = sum(1 if p < 0 else count[p] for p in ids[offsets[v]:offsets[v + 1]])
        return count

    def n_unrolled(self) -> int:
        """Number of classes of the unrolled tree (the sum of :meth:`n_paths`), built from nothing."""
        return sum(self.n_paths())

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(child, parent)``: the node ids of every parent link, the implicit root's left out,
        in child order (read-only; computed once, with the DAG).

        Examples
        --------
        >>> [e.tolist() for e in Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")]).edges()]
        [[0, 0, 3], [1, 2, 0]]
        """
        return self._edges

    def ancestor_sets(self) -> list[frozenset[int]]:
        """For every node, the ids of its ancestors through every parent, itself included.

        Plain Python sets: the reference the vectorised metrics are tested against, and
        handy for small hierarchies.

        Examples
        --------
        >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
        >>> sorted(dag.ancestor_sets()[3])
        [0, 1, 2, 3]
        """
        sets: list[frozenset[int]] = [frozenset()] * self.n_nodes
        for v in self._order.tolist():
            acc = {v}
            for p in self.parent_ids_of(v).tolist():
                if p >= 0:
                    acc |= sets[p]
            sets[v] = frozenset(acc)
        return sets

    def ancestor_matrix(self) -> Any:
        """Sparse ``(n_nodes, n_nodes)`` bool CSR matrix: ``A[v, u]`` when ``u`` is ``v`` or
        an ancestor of ``v`` through any parent. One sparse product per longest-path level;
        computed once and kept (do not modify it).

        Examples
        --------
        >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
        >>> dag.ancestor_matrix().toarray().astype(int)[3].tolist()
        [1, 1, 1, 1]
        """
        if self._closure is not None:
            return self._closure
        import scipy.sparse as sp

        n = self.n_nodes
        child, parent = self._edges
        parent_of = sp.csr_matrix((np.ones(child.size, dtype=bool), (child, parent)), shape=(n, n))
        closure = sp.identity(n, dtype=bool, format="csr")
        for level in range(1, int(self._depth.max()) + 1 if n else 1):
            rows = np.flatnonzero(self._depth == level)
            select = sp.csr_matrix((np.ones(rows.size, dtype=bool), (rows, rows)), shape=(n, n))
            # rows at this level: themselves plus the closure of their parents (all shallower)
            closure = closure + select @ parent_of @ closure
        closure = closure.tocsr()
        closure.sum_duplicates()
        closure.sort_indices()
        self._closure = closure
        return closure

    def subgraph(self, nodes: Any) -> Dag:
        """The DAG of some of the nodes: links to parents left out are dropped.

        Parameters
        ----------
        nodes : array-like of int, or of bool of shape (n_nodes,)
            The node ids to keep (any order, repeats allowed), or a mask over the node ids.

        Returns
        -------
        Dag
            The kept nodes, in ascending id order, with their labels. Each keeps the parents
            that are kept too (the implicit root included); a node none of whose parents is
            kept becomes a top-level class.

        Raises
        ------
        TreeError
            When no node is kept, an id is out of range or not an integer (the error names it).

        Examples
        --------
        >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c"), ("b", "e")])
        >>> sub = dag.subgraph(dag.to_ids(["c", "b", "d"]))
        >>> sub.labels.tolist(), sub.parents_of("c"), sub.parents_of("b")
        (['c', 'b', 'd'], ['b'], [])
        """
        n = self.n_nodes
        keep = np.asarray(nodes)
        if keep.dtype == bool:
            if keep.shape != (n,):
                raise TreeError(f"a node mask must have shape ({n},), got {keep.shape}")
            keep = np.flatnonzero(keep)
        elif not keep.size:
            keep = keep.reshape(-1).astype(np.int64)  # [] reads as float64: empty, not a bad dtype
        else:
            try:
                keep = keep.astype(np.int64, casting="same_kind").reshape(-1)
            except TypeError:
                raise TreeError(
                    f"node ids must be integers (or a bool mask), got dtype {keep.dtype}: "
                    f"{describe_some(keep.reshape(-1).tolist())}"
                ) from None
            bad = keep[(keep < 0) | (keep >= n)]
            if bad.size:
                raise TreeError(f"node ids {describe_some(bad.tolist())} are not in [0, {n})")
            keep = np.unique(keep)
        if not keep.size:
            raise TreeError("the subgraph is empty: keep at least one node")
        new_id = np.full(n + 1, PAD, dtype=np.int64)  # slot -1 keeps the implicit root's -1
        new_id[keep] = np.arange(keep.size)
        child = new_id[np.repeat(np.arange(n), np.diff(self._offsets))]
        parent = new_id[self._parent_ids]
        # an edge stays when its child does and its parent does (or is the implicit root)
        stays = (child >= 0) & ((self._parent_ids < 0) | (parent >= 0))
        counts = np.bincount(child[stays], minlength=keep.size)
        # a node left with no parent gets an empty list: a top-level class
        lists = np.split(parent[stays], np.cumsum(counts)[:-1])
        return Dag(self._labels[keep].tolist(), lists)

    def unroll(self, max_nodes: int | None = MAX_NODES) -> UnrolledDag:
        """Unroll into a tree with one node copy per distinct ancestral path.

        Parameters
        ----------
        max_nodes : int or None, default=10_000_000
            Refuse (with a :class:`~hiclass_parallel.exceptions.TreeError` that gives the
            size) an unrolled tree with more classes than this. The size is counted first,
            so nothing big is built. ``None`` never refuses.

        Returns
        -------
        UnrolledDag

        Examples
        --------
        >>> dag = Dag.from_edges([("c", "a"), ("c", "b"), ("d", "c")])
        >>> unrolled = dag.unroll()
        >>> unrolled.tree.path_labels("d[1]")
        ['b', 'c[1]', 'd[1]']
        >>> dag.unroll(max_nodes=5)
        Traceback (most recent call last):
        ...
        hiclass_parallel.exceptions.TreeError: the unrolled tree would have 6 classes (4 nodes in the DAG, 2 with several paths, up to 2 paths per node), more than max_nodes=5
        """
        counts = self.n_paths()
        total = sum(counts)
        if max_nodes is not None and total > max_nodes:
            several = sum(c > 1 for c in counts)
            raise TreeError(
                f"the unrolled tree would have {total} classes ({self.n_nodes} nodes in the DAG, "
                f"{several} with several paths, up to {max(counts)} paths per node), more than max_nodes={max_nodes}"
            )
        offsets = np.zeros(self.n_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # paths[v]: the sorted ancestral paths of v, as tuples of DAG ids; the parent copy of
        # path k of v is the copy of its prefix, found by the prefix's rank among its node's paths.
        paths: list[list[tuple[int, ...]] | None] = [None] * self.n_nodes
        rank: list[dict[tuple[int, ...], int] | None] = [None] * self.n_nodes
        parents = np.empty(total, dtype=np.int64)
        for v in self._order.tolist():
            mine: list[tuple[int, ...]] = []
            for p in self.parent_ids_of(v).tolist():
                mine += [(v,)] if p < 0 else [path + (v,) for path in paths[p]]
            mine.sort()
            paths[v] = mine
            rank[v] = {path: k for k, path in enumerate(mine)}
            start = int(offsets[v])
            for k, path in enumerate(mine):
                parents[start + k] = PAD if len(path) == 1 else offsets[path[-2]] + rank[path[-2]][path[:-1]]
        origin = np.repeat(np.arange(self.n_nodes, dtype=np.int64), counts)
        labels = []
        for label, k in zip(self._labels.tolist(), counts):
            labels += [label] if k == 1 else [f"{label}[{i}]" for i in range(k)]
        try:
            tree = Tree(parents, labels)
        except TreeError as exc:  # a copy label equal to an original label, e.g. "x[0]"
            raise TreeError(f"copy labels collide with the DAG's labels: {exc}") from None
        return UnrolledDag(self, tree, origin, offsets)

    def __repr__(self) -> str:
        return f"Dag(n_nodes={self.n_nodes}, n_edges={self.n_edges}, n_unrolled={self.n_unrolled()})"

    def __len__(self) -> int:
        return self.n_nodes


class UnrolledDag:
    """A :class:`Dag` unrolled into a :class:`~hiclass_parallel.tree.Tree` of node copies.

    Made by :meth:`Dag.unroll` or :func:`unroll_dag`; read-only.

    Attributes
    ----------
    dag : Dag
        The original hierarchy.
    tree : Tree
        The unrolled tree: one class per distinct ancestral path of a DAG node. Fit and
        predict with it like any tree.
    origin : ndarray of int64 of shape (n_copies,)
        ``origin[c]`` is the DAG node id of copy ``c``.
    copy_offsets : ndarray of int64 of shape (n_nodes + 1,)
        The copies of DAG node ``v`` are ``copy_offsets[v]:copy_offsets[v + 1]``.

    Examples
    --------
    >>> from hiclass_parallel.dag import unroll_dag
    >>> unrolled = unroll_dag([("c", "a"), ("c", "b"), ("d", "c")])
    >>> unrolled.tree.labels.tolist()
    ['c[0]', 'c[1]', 'a', 'b', 'd[0]', 'd[1]']
    >>> unrolled.copies("d").tolist(), unrolled.to_original(["d[1]", "a"]).tolist()
    (['d[0]', 'd[1]'], ['d', 'a'])
    """

    def __init__(self, dag: Dag, tree: Tree, origin: np.ndarray, copy_offsets: np.ndarray):
        self._dag = dag
        self._tree = tree
        self._origin = readonly(origin)
        self._copy_offsets = readonly(copy_offsets)
        self._entries: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def dag(self) -> Dag:
        return self._dag

    @property
    def tree(self) -> Tree:
        return self._tree

    @property
    def origin(self) -> np.ndarray:
        return self._origin

    @property
    def copy_offsets(self) -> np.ndarray:
        return self._copy_offsets

    @property
    def labels(self) -> np.ndarray:
        """The DAG's (original) labels."""
        return self._dag.labels

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """``(copy, node)``: where a path of the unrolled tree enters each DAG node's region.

        A path *lies under* DAG node ``v`` when it passes through a copy of ``v`` or of any
        descendant of ``v`` (through any parent): a ``d`` is a ``b`` whichever of its paths
        the model takes. Those copies form whole subtrees of the unrolled tree; ``copy``
        lists the top copy of each subtree (its origin is ``v`` or a descendant, its parent
        copy's is not), so a path lies under ``v`` through exactly one of them and

            P(path lies under v) = sum over the pairs (u, v) of P(path passes through u),

        which can never be less for a parent than for its child. A copy ``u`` enters the
        ancestors of its origin that are not ancestors of its parent copy's origin; on a DAG
        that is a tree, the pairs are each copy with its own origin. Computed once from
        :meth:`Dag.ancestor_matrix` (sparse row differences, no loop) and kept; read-only,
        sorted by copy.

        Returns
        -------
        copy : ndarray of int64 of shape (n_pairs,)
            Node ids of the unrolled tree.
        node : ndarray of int64 of shape (n_pairs,)
            DAG node ids.

        Examples
        --------
        >>> unrolled = unroll_dag([("b", "a"), ("c", "a"), ("d", "b"), ("d", "c")])
        >>> copy, node = unrolled.entries()
        >>> [(str(unrolled.tree.labels[u]), str(unrolled.labels[v])) for u, v in zip(copy, node)]
        [('b', 'b'), ('a', 'a'), ('c', 'c'), ('d[0]', 'c'), ('d[0]', 'd'), ('d[1]', 'b'), ('d[1]', 'd')]
        """
        if self._entries is not None:
            return self._entries
        import scipy.sparse as sp

        closure = self._dag.ancestor_matrix().astype(np.int8)
        parents = self._tree.parents
        below = np.flatnonzero(parents >= 0)
        n_copies, n = parents.size, self._dag.n_nodes
        # the row of each copy's origin minus the row of its parent copy's origin (none at the top)
        pick = sp.csr_matrix((np.ones(below.size, dtype=np.int8), (below, self._origin[parents[below]])),
                             shape=(n_copies, n))
        entered = (closure[self._origin] - pick @ closure).tocoo()
        keep = entered.data > 0  # the parent's ancestors are all the child's: the rest is 0
        copy, node = entered.row[keep].astype(np.int64), entered.col[keep].astype(np.int64)
        order = np.lexsort((node, copy))
        self._entries = (readonly(copy[order]), readonly(node[order]))
        return self._entries

    def copy_ids(self, label: Hashable) -> np.ndarray:
        """Tree node ids of all copies of an original label, in the order of their paths."""
        v = int(self._dag.to_ids([label])[0])
        return np.arange(self._copy_offsets[v], self._copy_offsets[v + 1])

    def copies(self, label: Hashable) -> np.ndarray:
        """Tree labels of all copies of an original label, in the order of their paths."""
        return self._tree.labels[self.copy_ids(label)]

    def original_ids(self, copy_ids: Any) -> np.ndarray:
        """DAG node ids of tree node ids (copies); any shape, ``-1`` (a pad) stays ``-1``."""
        ids = np.asarray(copy_ids, dtype=np.int64)
        if ids.size and (ids.max() >= self._origin.size or ids.min() < PAD):
            raise IndexError(f"copy ids must be in [-1, {self._origin.size})")
        return np.where(ids < 0, PAD, self._origin[np.maximum(ids, 0)])

    def to_original(self, copy_labels: Any) -> np.ndarray:
        """Original labels of labels of the unrolled tree (e.g. predictions); any shape.

        Examples
        --------
        >>> unrolled = unroll_dag([("c", "a"), ("c", "b")])
        >>> unrolled.to_original([["c[0]", "c[1]"]]).tolist()
        [['c', 'c']]
        """
        return self._dag.labels[self._origin[self._tree.to_ids(copy_labels)]]

    def __repr__(self) -> str:
        return f"UnrolledDag({self._dag.n_nodes} nodes -> {self._tree!r})"


def unroll_dag(hierarchy: Any, *, max_nodes: int | None = MAX_NODES) -> UnrolledDag:
    """Unroll a class hierarchy with several parents per class into a tree of node copies.

    Parameters
    ----------
    hierarchy : Dag, networkx.DiGraph or iterable of (child, parent) pairs
        The hierarchy: a :class:`Dag`, a graph whose edges point from parent to child, or
        ``(child, parent)`` label pairs (``parent=None`` for a top-level class).
    max_nodes : int or None, default=10_000_000
        Refuse an unrolled tree with more classes than this (see :meth:`Dag.unroll`).

    Returns
    -------
    UnrolledDag
        ``.tree`` is the unrolled :class:`~hiclass_parallel.tree.Tree`; ``.origin`` maps its
        node ids back to the DAG's.

    Examples
    --------
    >>> import networkx as nx
    >>> unrolled = unroll_dag(nx.DiGraph([("a", "c"), ("b", "c"), ("c", "d")]))
    >>> unrolled.tree
    Tree(n_classes=6, n_levels=3, n_leaves=2)
    >>> unrolled.origin.tolist()
    [0, 1, 1, 2, 3, 3]
    """
    if isinstance(hierarchy, UnrolledDag):
        hierarchy = hierarchy.dag
    if not isinstance(hierarchy, Dag):
        if hasattr(hierarchy, "predecessors") and hasattr(hierarchy, "nodes"):
            hierarchy = Dag.from_networkx(hierarchy)
        else:
            hierarchy = Dag.from_edges(hierarchy)
    return hierarchy.unroll(max_nodes=max_nodes)
