"""A tree's labels: what may name a class, and the look-ups between labels and node ids.

The rules every constructor applies to a label (hashable, not ``None``, not NaN, unique), the
read-only label arrays a :class:`~hiclass_parallel.tree.Tree` keeps, and the functions behind
:meth:`Tree.to_ids <hiclass_parallel.tree.Tree.to_ids>`, :meth:`Tree.to_labels
<hiclass_parallel.tree.Tree.to_labels>` and :meth:`Tree.path_labels
<hiclass_parallel.tree.Tree.path_labels>`, which read the tree through its public attributes
and its label index.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..exceptions import TreeError, UnknownLabelError, describe_some
from ._arrays import readonly

if TYPE_CHECKING:
    from ._tree import Tree

__all__ = ["NONE_IS_PAD", "as_label_array", "check_label", "edge_pair", "hashable",
           "ids_of_labels", "ids_of_names", "labels_of_ids", "path_of_names"]

#: Why ``None`` cannot name a class: targets use it for "no label at this level".
NONE_IS_PAD = "None cannot be a class label, it is the padding of y (a missing level); name the class, e.g. 'none'"


def hashable(value: Any) -> Hashable:
    """NumPy scalars hash like Python scalars but print badly; unwrap them."""
    return value.item() if isinstance(value, np.generic) else value


def check_label(value: Any) -> None:
    """A :class:`TreeError` naming an unhashable label (a list, an array...)."""
    try:
        hash(value)
    except TypeError:
        raise TreeError(
            f"label {value!r} is unhashable ({type(value).__name__}): labels must be hashable, e.g. str or int"
        ) from None


def edge_pair(edge: Any) -> tuple[Any, Any]:
    """``(child, parent)`` of one edge, or a :class:`TreeError` naming the edge.

    The edge must be a pair. A ``None`` parent marks a top-level class and is fine; a ``None``
    child would be a class that ``y`` could never name apart from a missing level.
    """
    try:
        child, parent = edge
    except (TypeError, ValueError):
        raise TreeError(f"an edge must be a (child, parent) pair, got {edge!r}") from None
    if child is None:
        raise TreeError(f"edge {tuple(edge)!r}: {NONE_IS_PAD}")
    return child, parent


def as_label_array(labels: Sequence[Hashable]) -> np.ndarray:
    """Integer labels become int64 (fast search); anything else an object array. Read-only.

    NaN is refused (``nan != nan``, so a NaN label could never be looked up again), and so are
    unhashable labels (lists, arrays): both with a :class:`TreeError` naming the label.
    """
    if isinstance(labels, (str, bytes)):
        raise TreeError(f"labels must be a sequence of labels, got a single {type(labels).__name__} {labels!r}")
    values = [hashable(v) for v in labels]
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        if all(-(2**63) <= v < 2**63 for v in values):
            return readonly(np.asarray(values, dtype=np.int64))
    for i, v in enumerate(values):
        if isinstance(v, float) and v != v:
            raise TreeError(f"label {i} is NaN: NaN is never equal to itself, so it cannot name a class")
        if v is None:
            raise TreeError(f"label {i} is None: {NONE_IS_PAD}")
        try:
            hash(v)
        except TypeError:
            raise TreeError(
                f"label {i} ({v!r}) is unhashable ({type(v).__name__}): labels must be hashable, e.g. str or int"
            ) from None
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # one by one: a tuple label (a path) must stay one element
        out[i] = v
    return readonly(out)


def check_unique_labels(labels: np.ndarray | None) -> None:
    """A :class:`TreeError` naming the labels given to more than one class."""
    if labels is None:
        return
    if labels.dtype == object:
        seen: dict = {}
        dups = []
        for label in labels:
            if label in seen and label not in dups:
                dups.append(label)
            seen[label] = True
    else:
        values, counts = np.unique(labels, return_counts=True)
        dups = values[counts > 1].tolist()
    if dups:
        raise TreeError(f"duplicate labels: {describe_some(dups)}; every class needs its own label")


def check_sibling_names(parents: np.ndarray, names: np.ndarray, paths: np.ndarray) -> None:
    """Siblings need different names, so that a path of names finds one class."""
    seen: dict = {}
    for node, key in enumerate(zip(parents.tolist(), names.tolist())):
        other = seen.setdefault(key, node)
        if other != node:
            parent = "the top level" if key[0] < 0 else describe_paths(names, paths, [key[0]])
            raise TreeError(
                f"nodes {other} and {node} are both named {key[1]!r} under {parent}: "
                "siblings need different names, or a path of names would not tell them apart"
            )


def describe_paths(names: np.ndarray, paths: np.ndarray, ids: list[int]) -> str:
    """Readable classes for error messages: their paths of names."""
    return describe_some([" > ".join(map(str, names[paths[i][paths[i] >= 0]].tolist())) for i in ids])


# ---------------------------------------------------------------------- labels <-> ids
def ids_of_labels(tree: Tree, labels: Any) -> np.ndarray:
    """Node ids (int64) of labels, any shape: :meth:`Tree.to_ids`."""
    values = (as_path_label_array(labels) if tree._path_labels
              else np.asarray(labels, dtype=object if tree.labels.dtype == object else None))
    shape = values.shape
    flat = values.reshape(-1)
    if tree.labels.dtype != object and flat.dtype.kind in "iu":
        ids = np.asarray(flat, dtype=np.int64)
        if tree.has_default_labels:
            found = (ids >= 0) & (ids < tree.n_classes)
        else:
            order = tree._sorted_label_order()
            pos = np.clip(np.searchsorted(tree.labels[order], ids), 0, tree.n_classes - 1)
            found = tree.labels[order][pos] == ids
            ids = order[pos]
    else:
        index = tree._index()
        ids = np.fromiter((_lookup(index, v) for v in flat), dtype=np.int64, count=flat.size)
        found = ids >= 0
        if tree.has_names and not found.all():
            ids[~found] = ids_of_names(tree, flat[~found])
            found = ids >= 0
    if not found.all():
        raise UnknownLabelError.of(hashable(v) for v in flat[~found])
    return ids.reshape(shape)


def ids_of_names(tree: Tree, values: np.ndarray) -> np.ndarray:
    """Node ids of names that are not labels (``-1``: unknown); a name that more than one
    class has is an :class:`UnknownLabelError` naming their paths."""
    def build() -> dict:
        index: dict = {}
        for node, name in enumerate(tree.names.tolist()):
            index.setdefault(name, []).append(node)
        return index

    index = tree.cached((__name__, "name_index"), build)
    out = np.full(values.size, -1, dtype=np.int64)
    for i, value in enumerate(values.tolist()):
        try:
            nodes = index.get(hashable(value), ())
        except TypeError:
            continue
        if len(nodes) > 1:
            raise UnknownLabelError(
                f"{value!r} is the name of {len(nodes)} classes ({describe_paths(tree.names, tree.paths, nodes)}): "
                f"give the class's label {describe_some(tree.labels[nodes].tolist())} or its path of names"
            )
        if nodes:
            out[i] = nodes[0]
    return out


def labels_of_ids(tree: Tree, ids: Any) -> np.ndarray:
    """Labels of node ids, any shape: :meth:`Tree.to_labels`."""
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= tree.n_classes):
        bad = ids[(ids < 0) | (ids >= tree.n_classes)]
        raise IndexError(f"node ids {describe_some(np.unique(bad).tolist())} are out of range [0, {tree.n_classes})")
    return tree.labels[ids]


def path_of_names(tree: Tree, label: Hashable) -> list:
    """The names on the ancestral path of ``label``: :meth:`Tree.path_labels`."""
    path = tree.paths[int(ids_of_labels(tree, [label])[0])]
    return tree.names[path[path >= 0]].tolist()


def _lookup(index: dict, value: Any) -> int:
    """Node id of a label in the label index, -1 when unknown (or unhashable: never a label)."""
    try:
        return index.get(hashable(value), -1)
    except TypeError:
        return -1


def as_path_label_array(labels: Any) -> np.ndarray:
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
