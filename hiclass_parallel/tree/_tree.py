"""The :class:`Tree` class: the encoded class tree, its arrays and what is derived from them.

The constructors read their inputs in :mod:`._constructors`, the arrays are computed in
:mod:`._arrays`, labels are checked and looked up in :mod:`._labels` and the file is written
and read in :mod:`._file`; the methods here call them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from ..exceptions import TreeError, describe_some
from ._arrays import PAD, PARTITIONS, depth_of, paths_of, readonly
from ._constructors import parts_from_dict, parts_from_edges, parts_from_networkx, parts_from_paths
from ._file import read_tree, write_tree
from ._labels import (as_label_array, check_sibling_names, check_unique_labels, ids_of_labels, ids_of_names,
                      labels_of_ids, path_of_names)

__all__ = ["Tree"]


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
        self._labels = None if labels is None else as_label_array(labels)
        if self._labels is not None and self._labels.size != n:
            raise TreeError(f"got {self._labels.size} labels for {n} parents")
        self._node_names = None if names is None else as_label_array(names)
        if self._node_names is not None and self._node_names.size != n:
            raise TreeError(f"got {self._node_names.size} names for {n} parents")
        bad = np.flatnonzero((parents_in < -1) | (parents_in >= n))
        if bad.size:
            raise TreeError(
                f"unknown parent for {self._names(bad)}: parent ids "
                f"{describe_some(parents_in[bad].tolist())} are not in [-1, {n})"
            )
        self._parents = readonly(parents_in.astype(np.int32))
        check_unique_labels(self._labels)
        self._depth = readonly(depth_of(self._parents, self._names))
        self._n_levels = int(self._depth.max()) + 1
        self._paths = readonly(paths_of(self._parents, self._depth, self._n_levels))
        #: Whether the labels are the paths of names (tuples), made here from ``names``.
        self._path_labels = self._node_names is not None and self._labels is None
        if self._node_names is not None:
            check_sibling_names(self._parents, self._node_names, self._paths)
            if self._labels is None:
                self._labels = as_label_array(
                    [tuple(self._node_names[p[p >= 0]].tolist()) for p in self._paths])
        self._mask = readonly(self._depth[None, :] != np.arange(self._n_levels, dtype=np.int32)[:, None])
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
        parents, labels, names = parts_from_edges(edges)
        return cls(parents, labels, names=names)

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
        parents, labels, names = parts_from_paths(paths, pad, sep)
        return cls(parents, labels, names=names)

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
        parents, labels, names = parts_from_dict(nested)
        return cls(parents, labels, names=names)

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
        parents, labels, names = parts_from_networkx(graph)
        return cls(parents, labels, names=names)

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
            self._labels = readonly(np.arange(self.n_classes, dtype=np.int64))
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
            self._groups["class_ids"] = readonly(np.arange(self.n_classes, dtype=np.int32))
        return self._groups["class_ids"]

    @property
    def is_leaf(self) -> np.ndarray:
        """Bool ``(n_classes,)``: True for classes without children."""
        if "is_leaf" not in self._groups:
            has_child = np.zeros(self.n_classes, dtype=bool)
            has_child[self._parents[self._parents >= 0]] = True
            self._groups["is_leaf"] = readonly(~has_child)
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
                groups = readonly(groups.astype(np.int32))
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
        return ids_of_labels(self, labels)

    def _ids_of_names(self, values: np.ndarray) -> np.ndarray:
        """Node ids of names that are not labels (``-1``: unknown); a name that more than one
        class has is an :class:`UnknownLabelError` naming their paths."""
        return ids_of_names(self, values)

    def to_labels(self, ids: Any) -> np.ndarray:
        """Labels of node ids; any shape. Ids out of range raise :class:`IndexError`.

        Examples
        --------
        >>> Tree.from_edges([("dog", "animal")]).to_labels([1, 0]).tolist()
        ['animal', 'dog']
        """
        return labels_of_ids(self, ids)

    def path_labels(self, label: Hashable) -> list:
        """The names on the ancestral path of ``label``, from the top level down.

        The labels themselves for a tree without ``names``.

        Examples
        --------
        >>> tree = Tree.from_dict({"dog": {"big dog": ["happy big dog"]}})
        >>> " > ".join(tree.path_labels("happy big dog"))
        'dog > big dog > happy big dog'
        """
        return path_of_names(self, label)

    def _index(self) -> dict:
        if self._label_index is None:
            self._label_index = {label: i for i, label in enumerate(self.labels.tolist())}
        return self._label_index

    def _sorted_label_order(self) -> np.ndarray:
        if "label_order" not in self._groups:
            self._groups["label_order"] = readonly(np.argsort(self.labels, kind="stable"))
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
