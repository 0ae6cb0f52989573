"""The encoded class tree: the paper's "encoding and storing the tree", done once.

A :class:`Tree` holds, as read-only NumPy arrays, everything the tensor methods need:
the parent of every class, its depth, the paper's mask ``M_lc`` and paths ``P_cl``, and
the partition groups. It is immutable and framework-free; the tensor methods copy its
buffers to a device once and cache them there (see :mod:`hiclass_parallel._backend`).

Vocabulary (paper -> code): classes ``c = 1..C`` are node ids ``0..C-1``; levels
``l = 1..L`` are depths ``0..L-1``; the root is implicit and is not a class, so a tree may
have many top-level classes; the padding value is ``-1`` (:data:`PAD`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from ._tree_file import read_tree, write_tree
from .exceptions import TreeError, UnknownLabelError, describe_some

__all__ = ["PAD", "PARTITIONS", "Tree"]

#: Padding value of ``paths``: "this path already reached its class".
PAD = -1

#: Supported partitions of the classes into mutually exclusive groups (subspaces).
PARTITIONS = ("level", "sibling")


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _as_label_array(labels: Sequence[Hashable]) -> np.ndarray:
    """Integer labels become int64 (fast search); anything else an object array. Read-only.

    NaN is refused (``nan != nan``, so a NaN label could never be looked up again), and so are
    unhashable labels (lists, arrays): both with a :class:`TreeError` naming the label.
    """
    if isinstance(labels, (str, bytes)):
        raise TreeError(f"labels must be a sequence of labels, got a single {type(labels).__name__} {labels!r}")
    values = [_hashable(v) for v in labels]
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        if all(-(2**63) <= v < 2**63 for v in values):
            return _readonly(np.asarray(values, dtype=np.int64))
    for i, v in enumerate(values):
        if isinstance(v, float) and v != v:
            raise TreeError(f"label {i} is NaN: NaN is never equal to itself, so it cannot name a class")
        if v is None:
            raise TreeError(f"label {i} is None: {_NONE_IS_PAD}")
        try:
            hash(v)
        except TypeError:
            raise TreeError(
                f"label {i} ({v!r}) is unhashable ({type(v).__name__}): labels must be hashable, e.g. str or int"
            ) from None
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # one by one: a tuple label (a path) must stay one element
        out[i] = v
    return _readonly(out)


#: Why ``None`` cannot name a class: targets use it for "no label at this level".
_NONE_IS_PAD = "None cannot be a class label, it is the padding of y (a missing level); name the class, e.g. 'none'"


def check_edge_child(edge: Any, child: Any) -> None:
    """A :class:`TreeError` naming an edge whose child is ``None`` (the padding of ``y``).

    A ``None`` parent marks a top-level class and is fine; a ``None`` child would be a class
    that ``y`` could never name apart from a missing level.
    """
    if child is None:
        raise TreeError(f"edge {tuple(edge)!r}: {_NONE_IS_PAD}")


def _check_label(value: Any) -> None:
    """A :class:`TreeError` naming an unhashable label (a list, an array...)."""
    try:
        hash(value)
    except TypeError:
        raise TreeError(
            f"label {value!r} is unhashable ({type(value).__name__}): labels must be hashable, e.g. str or int"
        ) from None



class Tree:
    """A class tree encoded as arrays, with an explicit label <-> node id mapping.

    Build one with a constructor: :meth:`from_parents`, :meth:`from_edges`,
    :meth:`from_paths`, :meth:`from_dict`, :meth:`from_networkx`, or :meth:`load`.

    Parameters
    ----------
    parents : array-like of int of shape (n_classes,)
        ``parents[c]`` is the node id of the parent of class ``c``, or ``-1`` when ``c`` is a
        top-level class (a child of the implicit root).
    labels : sequence of hashable of length n_classes, default=None
        The user's name of each class (``str`` or ``int``, unique). ``None`` means the node
        ids themselves, ``0..n_classes-1``, or with ``names`` each class's path of names.
    names : sequence of hashable of length n_classes, default=None
        The name of each class as it appears in label paths (a 2-D ``y``, predicted paths),
        where it differs from its label: in a taxonomy that repeats a name under different
        parents (an "Accessories" under "Electronics" and another under "Clothing") a name
        does not tell classes apart, but a path of names does. Siblings need different names.
        With ``labels=None`` each class's label is then its path of names, a tuple
        (``("Clothing", "Accessories")``). ``None``: the names are the labels.
        :meth:`from_paths` sets both.

    Attributes
    ----------
    n_classes : int
        Number of classes ``C`` (the root is not a class).
    n_levels : int
        Number of levels ``L``: one more than the largest depth.
    labels : ndarray of shape (n_classes,)
        Label of each node id.
    names : ndarray of shape (n_classes,)
        Name of each node id in label paths (the labels, unless ``names`` was given).
    parents, depth : ndarray of int32 of shape (n_classes,)
    mask : ndarray of bool of shape (n_levels, n_classes)
        The paper's ``M_lc``: True where class ``c`` is excluded from level ``l``.
    paths : ndarray of int32 of shape (n_classes, n_levels)
        The paper's ``P_cl``: the ancestral path of every class, right-padded with ``-1``.

    Examples
    --------
    The paper's tree of Figure 1, with node ids shifted to start at 0:

    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> tree
    Tree(n_classes=9, n_levels=3, n_leaves=6)
    >>> tree.paths[6]
    array([0, 3, 6], dtype=int32)
    >>> tree.mask.astype(int)[1]
    array([1, 1, 0, 0, 0, 0, 1, 1, 1])
    """

    def __init__(
        self,
        parents: Sequence[int] | np.ndarray,
        labels: Sequence[Hashable] | None = None,
        *,
        names: Sequence[Hashable] | None = None,
    ):
        parents_in = np.asarray(parents)
        if parents_in.ndim != 1:
            raise TreeError(f"parents must be 1-D, got shape {parents_in.shape}")
        if parents_in.size == 0:
            raise TreeError("the tree is empty: it needs at least one class")
        if not np.issubdtype(parents_in.dtype, np.integer):
            raise TreeError(f"parents must be integer node ids, got dtype {parents_in.dtype}")
        n = parents_in.size
        self._labels = None if labels is None else _as_label_array(labels)
        if self._labels is not None and self._labels.size != n:
            raise TreeError(f"got {self._labels.size} labels for {n} parents")
        self._node_names = None if names is None else _as_label_array(names)
        if self._node_names is not None and self._node_names.size != n:
            raise TreeError(f"got {self._node_names.size} names for {n} parents")
        bad = np.flatnonzero((parents_in < -1) | (parents_in >= n))
        if bad.size:
            raise TreeError(
                f"unknown parent for {self._names(bad)}: parent ids "
                f"{describe_some(parents_in[bad].tolist())} are not in [-1, {n})"
            )
        self._parents = _readonly(parents_in.astype(np.int32))
        self._check_unique_labels()
        self._depth = _readonly(self._compute_depth())
        self._n_levels = int(self._depth.max()) + 1
        self._paths = _readonly(self._compute_paths())
        #: Whether the labels are the paths of names (tuples), made here from ``names``.
        self._path_labels = self._node_names is not None and self._labels is None
        if self._node_names is not None:
            self._check_sibling_names()
            if self._labels is None:
                self._labels = _as_label_array(
                    [tuple(self._node_names[p[p >= 0]].tolist()) for p in self._paths])
        self._mask = _readonly(self._depth[None, :] != np.arange(self._n_levels, dtype=np.int32)[:, None])
        self._label_index: dict | None = None
        self._groups: dict[str, np.ndarray] = {}
        self._children: tuple[np.ndarray, np.ndarray] | None = None
        # Arrays derived from the tree (layouts, device copies), filled through `cached`.
        self._device_cache: dict = {}

    # ------------------------------------------------------------------ construction
    def _names(self, ids: Iterable[int]) -> str:
        """Readable names of node ids for error messages: label (id N)."""
        ids = list(np.asarray(list(ids)).tolist())
        if self._labels is None:
            return "node " + describe_some(ids)
        return describe_some([f"{self._labels[i]!r} (id {i})" for i in ids]).replace('"', "")

    def _check_unique_labels(self) -> None:
        if self._labels is None:
            return
        if self._labels.dtype == object:
            seen: dict = {}
            dups = []
            for label in self._labels:
                if label in seen and label not in dups:
                    dups.append(label)
                seen[label] = True
        else:
            values, counts = np.unique(self._labels, return_counts=True)
            dups = values[counts > 1].tolist()
        if dups:
            raise TreeError(f"duplicate labels: {describe_some(dups)}; every class needs its own label")

    def _check_sibling_names(self) -> None:
        """Siblings need different names, so that a path of names finds one class."""
        seen: dict = {}
        for node, key in enumerate(zip(self._parents.tolist(), self._node_names.tolist())):
            other = seen.setdefault(key, node)
            if other != node:
                parent = "the top level" if key[0] < 0 else self._names_of([key[0]])
                raise TreeError(
                    f"nodes {other} and {node} are both named {key[1]!r} under {parent}: "
                    "siblings need different names, or a path of names would not tell them apart"
                )

    def _names_of(self, ids: list[int]) -> str:
        """Readable classes for error messages: their paths of names."""
        return describe_some(
            [" > ".join(map(str, self._node_names[self._paths[i][self._paths[i] >= 0]].tolist())) for i in ids]
        )

    def _compute_depth(self) -> np.ndarray:
        """Depth by pointer chasing, one vectorised step per level: O(C * L)."""
        self._check_acyclic()
        depth = np.zeros(self._parents.size, dtype=np.int32)
        ancestor = self._parents.astype(np.int64)
        while True:
            alive = ancestor >= 0
            if not alive.any():
                return depth
            depth[alive] += 1
            ancestor[alive] = self._parents[ancestor[alive]]

    def _check_acyclic(self) -> None:
        """Pointer doubling: after 2**k >= C jumps every node must have reached the root.

        O(C log C), so a cycle in a 100,000-class tree is found in milliseconds rather than
        by climbing C levels.
        """
        n = self._parents.size
        jump = np.where(self._parents < 0, n, self._parents).astype(np.int64)
        jump = np.append(jump, n)  # the implicit root (index n) is its own parent
        for _ in range(max(1, int(np.ceil(np.log2(n + 1))))):
            jump = jump[jump]
        stuck = np.flatnonzero(jump[:n] != n)
        if stuck.size:
            cycle = self._find_cycle(int(stuck[0]))
            raise TreeError(f"the parents form a cycle through {self._names(cycle)}")

    def _find_cycle(self, start: int) -> list[int]:
        seen: dict[int, int] = {}
        node = start
        while node not in seen:
            seen[node] = len(seen)
            node = int(self._parents[node])
        order = list(seen)
        return order[seen[node]:]

    def _compute_paths(self) -> np.ndarray:
        n = self._parents.size
        paths = np.full((n, self._n_levels), PAD, dtype=np.int32)
        rows = np.arange(n)
        node = rows.copy()
        for _ in range(self._n_levels):
            alive = node >= 0
            paths[rows[alive], self._depth[node[alive]]] = node[alive]
            node[alive] = self._parents[node[alive]]
        return paths

    @classmethod
    def from_parents(
        cls,
        parents: Sequence[int] | np.ndarray,
        labels: Sequence[Hashable] | None = None,
        *,
        names: Sequence[Hashable] | None = None,
    ) -> Tree:
        """Build a tree from the parent id of every class (``-1`` for top-level classes).

        ``labels`` and ``names`` are as in :class:`Tree`.

        Examples
        --------
        >>> Tree.from_parents([-1, 0, 0], labels=["animal", "dog", "cat"]).n_levels
        2
        >>> Tree.from_parents([-1, 0, -1, 2], names=["Electronics", "Other", "Clothing", "Other"]).labels[3]
        ('Clothing', 'Other')
        """
        return cls(parents, labels, names=names)

    @classmethod
    def from_edges(cls, edges: Iterable[tuple[Hashable, Hashable | None]]) -> Tree:
        """Build a tree from ``(child, parent)`` label pairs.

        A parent of ``None`` marks a top-level class; a parent that is never a child is a
        top-level class too. A child of ``None`` is refused (``None`` pads ``y``). Node ids
        follow the order in which labels first appear.

        A label is a class here, so a label given two parents is a :class:`TreeError`. When
        the two are different classes that share a name ("Accessories" under "Electronics"
        and under "Clothing"), build the tree from their paths with :meth:`from_paths`, which
        tells them apart; when one class truly has two parents, the hierarchy is a DAG
        (:class:`~hiclass_parallel.dag.Dag`).

        Examples
        --------
        >>> tree = Tree.from_edges([("dog", "animal"), ("cat", "animal")])
        >>> tree.labels.tolist(), tree.parents.tolist()
        (['dog', 'animal', 'cat'], [1, -1, 1])
        >>> Tree.from_edges([("Accessories", "Electronics"), ("Accessories", "Clothing")])
        Traceback (most recent call last):
        ...
        hiclass_parallel.exceptions.TreeError: node 'Accessories' has two parents: 'Electronics' and 'Clothing'; ...
        """
        parent_of: dict = {}
        order: dict = {}
        for edge in edges:
            try:
                child, parent = edge
            except (TypeError, ValueError):
                raise TreeError(f"an edge must be a (child, parent) pair, got {edge!r}") from None
            check_edge_child(edge, child)
            _check_label(child)
            _check_label(parent)
            order.setdefault(child, len(order))
            if parent is not None:
                order.setdefault(parent, len(order))
            if child in parent_of and parent_of[child] != parent:
                raise TreeError(
                    f"node {child!r} has two parents: {parent_of[child]!r} and {parent!r}; a tree allows one. "
                    f"If these are two classes that share the name {child!r}, build the tree from label paths, "
                    "which tell them apart: Tree.from_paths([[..., "
                    f"{parent_of[child]!r}, {child!r}], [..., {parent!r}, {child!r}]]) (the classifier and "
                    "PathEncoder do so when they learn the tree from label paths). If it is one class with two "
                    "parents, the hierarchy is a DAG: hiclass_parallel.dag.Dag.from_edges"
                )
            parent_of[child] = parent
        return cls._from_parent_map(parent_of, order)

    @classmethod
    def _from_parent_map(cls, parent_of: Mapping, order: Mapping) -> Tree:
        labels = list(order)
        parents = [PAD if parent_of.get(label) is None else order[parent_of[label]] for label in labels]
        if not labels:
            raise TreeError("the tree is empty: it needs at least one class")
        return cls(np.asarray(parents, dtype=np.int64), labels)

    @classmethod
    def from_paths(cls, paths: Iterable[Sequence[Hashable] | str], pad: Any = None, sep: str | None = None) -> Tree:
        """Build a tree from ancestral paths of labels, each from the top level down.

        A class is its path: two rows that end in the same name under different parents
        (``["Electronics", "Accessories"]``, ``["Clothing", "Accessories"]``) are two classes.

        Parameters
        ----------
        paths : iterable of sequences of hashable, or of str with ``sep``
            One path per row, from the top level down. Entries equal to ``pad`` (and
            ``None``, NaN) are ignored, so padded 2-D arrays and DataFrame rows work.
        pad : hashable, default=None
            The padding value of the paths.
        sep : str, default=None
            The separator of path strings: with it, a path may be one string such as
            ``"Electronics/Accessories/Cables"`` (split on ``sep`` exactly, spaces included:
            pass ``" > "`` for ``"Electronics > Cables"``), and every class's label is its
            path string (``"Electronics/Accessories"``), its name the last part.

        Returns
        -------
        Tree
            Labels are the names when no name repeats (and ``sep`` is None); the path strings
            with ``sep``; otherwise each class's path of names, a tuple such as
            ``("Clothing", "Accessories")``. In every case ``names`` holds the names, which
            label paths (2-D ``y``, predicted paths) are read and written in.

        Raises
        ------
        TreeError
            No path at all, a string path without ``sep``, an empty name in a path string, or
            a name holding ``sep``.

        Examples
        --------
        >>> tree = Tree.from_paths([["dog", "small dog"], ["dog", "big dog", "happy big dog"], ["cat"]])
        >>> tree.n_classes, tree.n_levels
        (5, 3)

        A name under two parents is two classes, labelled by their paths:

        >>> tree = Tree.from_paths([["Electronics", "Accessories"], ["Clothing", "Accessories"]])
        >>> tree.labels.tolist()
        [('Electronics',), ('Electronics', 'Accessories'), ('Clothing',), ('Clothing', 'Accessories')]
        >>> tree.names.tolist()
        ['Electronics', 'Accessories', 'Clothing', 'Accessories']

        Path strings, with ``sep``:

        >>> tree = Tree.from_paths(["Electronics/Accessories", "Clothing/Accessories"], sep="/")
        >>> tree.labels.tolist()
        ['Electronics', 'Electronics/Accessories', 'Clothing', 'Clothing/Accessories']
        """
        if sep is not None and (not isinstance(sep, str) or not sep):
            raise TreeError(f"sep must be a non-empty string, got {sep!r}")
        index: dict = {}  # path of names (a tuple) -> node id
        parents: list[int] = []
        names: list = []
        for i, path in enumerate(paths):
            parts = _path_parts(path, i, pad, sep)
            parent, prefix = PAD, ()
            for name in parts:
                _check_label(name)
                prefix = (*prefix, name)
                node = index.get(prefix)
                if node is None:
                    node = index[prefix] = len(parents)
                    parents.append(parent)
                    names.append(name)
                parent = node
        if not parents:
            raise TreeError("the tree is empty: it needs at least one class")
        parent_ids = np.asarray(parents, dtype=np.int64)
        if sep is not None:
            labels: list = []
            for name, parent in zip(names, parents):
                labels.append(name if parent < 0 else labels[parent] + sep + name)
            return cls(parent_ids, labels, names=names)
        if len(set(names)) == len(names):
            return cls(parent_ids, names)
        return cls(parent_ids, names=names)

    @classmethod
    def from_dict(cls, nested: Mapping) -> Tree:
        """Build a tree from a nested mapping ``{label: children}``.

        ``children`` is another mapping, a list/tuple/set of leaf labels (or of mappings), or
        ``None`` / an empty container for a leaf.

        Examples
        --------
        >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy", "moody"]}, "cat": []})
        >>> tree.labels.tolist()
        ['dog', 'small dog', 'big dog', 'happy', 'moody', 'cat']
        """
        if not isinstance(nested, Mapping):
            raise TreeError(f"from_dict expects a mapping, got {type(nested).__name__}")

        def entries(children: Any, parent: Hashable | None) -> Iterator[tuple[bool, Any, Any]]:
            if children is None:
                return iter(())
            if isinstance(children, Mapping):
                return iter([(True, label, sub) for label, sub in children.items()])
            if isinstance(children, (list, tuple, set, frozenset)):
                return iter([(False, item, None) for item in children])
            raise TreeError(
                f"children of {parent!r} must be a mapping, a list of labels or None, got {type(children).__name__}"
            )

        edges: list[tuple[Hashable, Hashable | None]] = []
        # Depth first with an explicit stack, not recursion: a chain thousands of levels deep
        # must not hit Python's recursion limit.
        stack = [(entries(nested, None), None)]
        while stack:
            it, parent = stack[-1]
            entry = next(it, None)
            if entry is None:
                stack.pop()
                continue
            is_key, item, sub = entry
            if is_key:
                edges.append((item, parent))
                stack.append((entries(sub, item), item))
            elif isinstance(item, Mapping):
                stack.append((entries(item, parent), parent))
            else:
                edges.append((item, parent))
        return cls.from_edges(edges)

    @classmethod
    def from_networkx(cls, graph: Any) -> Tree:
        """Build a tree from a ``networkx.DiGraph`` whose edges point from parent to child.

        Nodes without a parent are top-level classes. networkx itself is not imported.

        Examples
        --------
        >>> import networkx as nx
        >>> tree = Tree.from_networkx(nx.DiGraph([("animal", "dog"), ("animal", "cat")]))
        >>> tree.labels.tolist(), tree.parents.tolist()
        (['animal', 'dog', 'cat'], [-1, 0, 0])
        """
        if not (hasattr(graph, "predecessors") and hasattr(graph, "nodes")):
            raise TreeError(f"from_networkx expects a networkx.DiGraph, got {type(graph).__name__}")
        parent_of: dict = {}
        order: dict = {}
        for node in graph.nodes:
            order.setdefault(node, len(order))
            preds = list(graph.predecessors(node))
            if len(preds) > 1:
                raise TreeError(f"node {node!r} has {len(preds)} parents {describe_some(preds)}; a tree allows one")
            parent_of[node] = preds[0] if preds else None
        return cls._from_parent_map(parent_of, order)

    # ------------------------------------------------------------------ derived arrays
    @property
    def n_classes(self) -> int:
        return int(self._parents.size)

    @property
    def n_levels(self) -> int:
        return self._n_levels

    @property
    def labels(self) -> np.ndarray:
        if self._labels is None:
            self._labels = _readonly(np.arange(self.n_classes, dtype=np.int64))
        return self._labels

    @property
    def names(self) -> np.ndarray:
        """Name of each node id in label paths: the labels unless the tree was given ``names``."""
        return self.labels if self._node_names is None else self._node_names

    @property
    def has_names(self) -> bool:
        """True when names differ from labels: a class is found from a path of names by walking
        down it, and a name alone finds a class only where no other class has it."""
        return self._node_names is not None

    @property
    def has_default_labels(self) -> bool:
        """True when labels are the node ids themselves."""
        return self._labels is None or (
            self._labels.dtype != object and np.array_equal(self._labels, np.arange(self.n_classes))
        )

    @property
    def parents(self) -> np.ndarray:
        return self._parents

    @property
    def depth(self) -> np.ndarray:
        return self._depth

    @property
    def mask(self) -> np.ndarray:
        return self._mask

    @property
    def paths(self) -> np.ndarray:
        return self._paths

    @property
    def class_ids(self) -> np.ndarray:
        """``arange(n_classes)`` as int32: the class axis, cached for scatter indices."""
        if "class_ids" not in self._groups:
            self._groups["class_ids"] = _readonly(np.arange(self.n_classes, dtype=np.int32))
        return self._groups["class_ids"]

    @property
    def is_leaf(self) -> np.ndarray:
        """Bool ``(n_classes,)``: True for classes without children."""
        if "is_leaf" not in self._groups:
            has_child = np.zeros(self.n_classes, dtype=bool)
            has_child[self._parents[self._parents >= 0]] = True
            self._groups["is_leaf"] = _readonly(~has_child)
        return self._groups["is_leaf"]

    @property
    def leaves(self) -> np.ndarray:
        """Node ids of the leaves, ascending."""
        return np.flatnonzero(self.is_leaf)

    @property
    def nbytes(self) -> int:
        """Bytes held by the encoded arrays (parents, depth, mask, paths)."""
        return int(self._parents.nbytes + self._depth.nbytes + self._mask.nbytes + self._paths.nbytes)

    def children(self, node: int) -> np.ndarray:
        """Node ids of the children of ``node`` (``-1`` for the top-level classes), ascending.

        Examples
        --------
        >>> Tree.from_parents([-1, -1, 0, 0]).children(0)
        array([2, 3])
        """
        if self._children is None:
            order = np.argsort(self._parents, kind="stable")
            bounds = np.searchsorted(self._parents[order], np.arange(-1, self.n_classes + 1))
            self._children = (order, bounds)
        order, bounds = self._children
        node = int(node)
        if not -1 <= node < self.n_classes:
            raise IndexError(f"node id {node} is out of range [-1, {self.n_classes})")
        return order[bounds[node + 1]:bounds[node + 2]]

    def groups(self, partition: str = "level") -> np.ndarray:
        """Group (subspace) id of every class under a partition, int32 ``(n_classes,)``.

        ``"level"`` groups classes by depth (the paper's partition; group = depth).
        ``"sibling"`` groups the children of each parent (a conditional softmax); groups are
        numbered by parent id, the top-level classes forming group 0. No two classes of one
        ancestral path share a group under either partition.

        Examples
        --------
        >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
        >>> tree.groups("sibling").tolist()
        [0, 0, 1, 1, 2, 2, 3, 3, 3]
        """
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")
        if partition not in self._groups:
            if partition == "level":
                groups = self._depth
            else:
                _, groups = np.unique(self._parents, return_inverse=True)
                groups = _readonly(groups.astype(np.int32))
            self._groups[partition] = groups
        return self._groups[partition]

    def n_groups(self, partition: str = "level") -> int:
        """Number of groups of a partition."""
        return int(self.groups(partition).max()) + 1

    def group_parents(self, partition: str = "sibling") -> np.ndarray:
        """For the sibling partition, the parent node id of each group (``-1`` for group 0)."""
        if partition != "sibling":
            raise ValueError("group_parents is defined for the 'sibling' partition only")
        return np.unique(self._parents).astype(np.int32)

    def cached(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """``build()``, computed once per tree and ``key`` and kept on the tree.

        The one place where other modules keep what they derive from a tree (the lean
        engine's layout, copies of the tree's arrays on a device, label look-up tables), so
        each is made once per tree, namespace and device. What is cached is derived from the
        tree's value and never changes it: the tree stays immutable, equality ignores the
        cache, and a pickled tree travels without it (device arrays are rebuilt on use).

        Parameters
        ----------
        key : hashable
            Names what is cached; a tuple that starts with the caller's module name (and,
            for device arrays, the namespace and device) keeps callers apart.
        build : callable
            Makes the value on first use.

        Returns
        -------
        object
            The cached value.

        Examples
        --------
        >>> tree = Tree.from_parents([-1, 0, 0])
        >>> first = tree.cached(("doc", "leaves"), lambda: tree.leaves + 0)
        >>> tree.cached(("doc", "leaves"), lambda: None) is first
        True
        """
        cache = self._device_cache
        if key not in cache:
            cache[key] = build()
        return cache[key]

    # ------------------------------------------------------------------ labels <-> ids
    def to_ids(self, labels: Any) -> np.ndarray:
        """Node ids (int64) of labels; any shape. Raises :class:`UnknownLabelError`.

        Examples
        --------
        >>> tree = Tree.from_edges([("dog", "animal"), ("cat", "animal")])
        >>> tree.to_ids(["cat", "dog"])
        array([2, 0])
        >>> tree.to_ids(["cow"])
        Traceback (most recent call last):
        ...
        hiclass_parallel.exceptions.UnknownLabelError: 1 label is not a class of the tree: 'cow'
        """
        values = (_as_path_label_array(labels) if self._path_labels
                  else np.asarray(labels, dtype=object if self.labels.dtype == object else None))
        shape = values.shape
        flat = values.reshape(-1)
        if self.labels.dtype != object and flat.dtype.kind in "iu":
            ids = np.asarray(flat, dtype=np.int64)
            if self.has_default_labels:
                found = (ids >= 0) & (ids < self.n_classes)
            else:
                order = self._sorted_label_order()
                pos = np.clip(np.searchsorted(self.labels[order], ids), 0, self.n_classes - 1)
                found = self.labels[order][pos] == ids
                ids = order[pos]
        else:
            index = self._index()
            ids = np.fromiter((_lookup(index, v) for v in flat), dtype=np.int64, count=flat.size)
            found = ids >= 0
            if self.has_names and not found.all():
                ids[~found] = self._ids_of_names(flat[~found])
                found = ids >= 0
        if not found.all():
            raise UnknownLabelError.of(_hashable(v) for v in flat[~found])
        return ids.reshape(shape)

    def _ids_of_names(self, values: np.ndarray) -> np.ndarray:
        """Node ids of names that are not labels (``-1``: unknown); a name that more than one
        class has is an :class:`UnknownLabelError` naming their paths."""
        def build() -> dict:
            index: dict = {}
            for node, name in enumerate(self._node_names.tolist()):
                index.setdefault(name, []).append(node)
            return index

        index = self.cached((__name__, "name_index"), build)
        out = np.full(values.size, -1, dtype=np.int64)
        for i, value in enumerate(values.tolist()):
            try:
                nodes = index.get(_hashable(value), ())
            except TypeError:
                continue
            if len(nodes) > 1:
                raise UnknownLabelError(
                    f"{value!r} is the name of {len(nodes)} classes ({self._names_of(nodes)}): give the "
                    f"class's label {describe_some(self._labels[nodes].tolist())} or its path of names"
                )
            if nodes:
                out[i] = nodes[0]
        return out

    def to_labels(self, ids: Any) -> np.ndarray:
        """Labels of node ids; any shape. Ids out of range raise :class:`IndexError`.

        Examples
        --------
        >>> Tree.from_edges([("dog", "animal")]).to_labels([1, 0]).tolist()
        ['animal', 'dog']
        """
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_classes):
            bad = ids[(ids < 0) | (ids >= self.n_classes)]
            raise IndexError(f"node ids {describe_some(np.unique(bad).tolist())} are out of range [0, {self.n_classes})")
        return self.labels[ids]

    def path_labels(self, label: Hashable) -> list:
        """The names on the ancestral path of ``label``, from the top level down.

        The labels themselves for a tree without ``names``.

        Examples
        --------
        >>> tree = Tree.from_dict({"dog": {"big dog": ["happy big dog"]}})
        >>> " > ".join(tree.path_labels("happy big dog"))
        'dog > big dog > happy big dog'
        """
        path = self._paths[int(self.to_ids([label])[0])]
        return self.names[path[path >= 0]].tolist()

    def _index(self) -> dict:
        if self._label_index is None:
            self._label_index = {label: i for i, label in enumerate(self.labels.tolist())}
        return self._label_index

    def _sorted_label_order(self) -> np.ndarray:
        if "label_order" not in self._groups:
            self._groups["label_order"] = _readonly(np.argsort(self.labels, kind="stable"))
        return self._groups["label_order"]

    # ------------------------------------------------------------------ subtree, equality, io
    def subtree(self, root_label: Hashable, include_root: bool = True) -> Tree:
        """The subtree under ``root_label``, re-indexed (relative order of ids kept).

        With ``include_root`` the root becomes the single top-level class; otherwise its
        children are the top-level classes.

        Examples
        --------
        >>> tree = Tree.from_dict({"dog": {"small": None, "big": ["happy"]}, "cat": None})
        >>> tree.subtree("dog").labels.tolist()
        ['dog', 'small', 'big', 'happy']
        >>> tree.subtree("dog", include_root=False).n_levels
        2
        """
        root = int(self.to_ids([root_label])[0])
        inside = self._paths[:, self._depth[root]] == root
        if not include_root:
            inside[root] = False
            if not inside.any():
                raise TreeError(f"{root_label!r} is a leaf: its subtree without the root is empty")
        keep = np.flatnonzero(inside)
        new_id = np.full(self.n_classes + 1, PAD, dtype=np.int64)  # last slot maps parent -1
        new_id[keep] = np.arange(keep.size)
        parents = new_id[self._parents[keep]]
        names = None if self._node_names is None else self._node_names[keep]
        if self._path_labels and include_root and self._depth[root] == 0:
            return Tree(parents, names=names)  # the same paths of names: labels are still paths
        labels = None if self._labels is None else self._labels[keep]
        return Tree(parents, labels, names=names)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tree):
            return NotImplemented
        return (
            np.array_equal(self._parents, other._parents)
            and self.labels.dtype.kind == other.labels.dtype.kind
            and np.array_equal(self.labels, other.labels)
            and self.has_names == other.has_names
            and (not self.has_names or np.array_equal(self._node_names, other._node_names))
        )

    __hash__ = None  # mutable caches inside; equality is by value

    def __repr__(self) -> str:
        return f"Tree(n_classes={self.n_classes}, n_levels={self.n_levels}, n_leaves={int(self.is_leaf.sum())})"

    def __len__(self) -> int:
        return self.n_classes

    def __getstate__(self) -> dict:
        # Device copies (torch/CuPy) never travel with a pickled tree.
        state = self.__dict__.copy()
        state["_device_cache"] = {}
        return state

    def save(self, path: str | os.PathLike) -> None:
        """Save to one ``.npz`` file (no pickle) that :meth:`load` round-trips exactly.

        Examples
        --------
        >>> import tempfile, os
        >>> tree = Tree.from_edges([("dog", "animal")])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     tree.save(os.path.join(d, "tree.npz"))
        ...     Tree.load(os.path.join(d, "tree.npz")) == tree
        True
        """
        write_tree(path, self._parents, self.labels, default_labels=self._labels is None, names=self._node_names,
                   path_labels=self._path_labels)

    @classmethod
    def load(cls, path: str | os.PathLike | BinaryIO) -> Tree:
        """Load a tree saved by :meth:`save`.

        Never unpickles. A missing file raises :class:`FileNotFoundError`; a file that is not
        a tree saved by :meth:`save` (another archive, a damaged or truncated file) raises
        :class:`TreeError` naming the file and what is wrong with it.

        Parameters
        ----------
        path : str, os.PathLike or binary file object
            The ``.npz`` file, or a seekable binary file object holding it (``io.BytesIO``).

        Returns
        -------
        Tree
        """
        parents, labels, names = read_tree(path)
        return cls(parents, labels, names=names)


def _lookup(index: dict, value: Any) -> int:
    """Node id of a label in the label index, -1 when unknown (or unhashable: never a label)."""
    try:
        return index.get(_hashable(value), -1)
    except TypeError:
        return -1


def _hashable(value: Any) -> Hashable:
    """NumPy scalars hash like Python scalars but print badly; unwrap them."""
    return value.item() if isinstance(value, np.generic) else value


def _is_missing(value: Any) -> bool:
    """``None``, NaN, or pandas' ``NA``: a missing level of a path."""
    if value is None:
        return True
    if isinstance(value, float) and value != value:
        return True
    return type(value).__name__ == "NAType"


def _path_parts(path: Any, row: int, pad: Any, sep: str | None) -> list:
    """The names of one path given to :meth:`Tree.from_paths`, pads and missing levels dropped."""
    if isinstance(path, (str, bytes)):
        if sep is None:
            raise TreeError(
                f"path {row} is a string ({path!r}): pass sep= to split path strings (e.g. sep='/'), "
                "or give each path as a list of names"
            )
        parts = path.split(sep) if isinstance(path, str) else [path]
        if any(part == "" for part in parts):
            raise TreeError(f"path {row} ({path!r}) has an empty name: a separator {sep!r} at an end, or two in a row")
        return parts
    parts = [_hashable(v) for v in path if not (_is_missing(v) or (pad is not None and v == pad))]
    if sep is not None:
        for name in parts:
            if not isinstance(name, str) or sep in name:
                raise TreeError(
                    f"path {row} ({list(parts)!r}) has the name {name!r}, which "
                    + ("is not a string: sep joins names into path strings" if not isinstance(name, str)
                       else f"holds the separator {sep!r}: its path string would read as another path")
                )
    return parts


def _as_path_label_array(labels: Any) -> np.ndarray:
    """Labels to look up in a tree whose labels are paths (tuples): one element per path.

    NumPy would read a list of equal-length tuples as a 2-D array of names; each list or
    tuple is one label here (made a tuple, so it hashes like the tree's labels).
    """
    if isinstance(labels, np.ndarray) and labels.dtype == object:
        items = labels.reshape(-1).tolist()
        shape = labels.shape
    elif isinstance(labels, (list, tuple)):
        items, shape = list(labels), (len(labels),)
    else:
        return np.asarray(labels, dtype=object)
    out = np.empty(len(items), dtype=object)
    for i, v in enumerate(items):
        out[i] = tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else v
    return out.reshape(shape)
