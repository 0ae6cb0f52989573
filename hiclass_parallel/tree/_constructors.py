"""Reading a tree given as edges, label paths, a nested mapping or a networkx graph.

Each function turns one input form into what :class:`~hiclass_parallel.tree.Tree` is built
from: ``(parents, labels, names)``, the parent id of every class (:data:`PAD` for the top
level), its label and its name in label paths (``None``: as :class:`Tree` documents them).
The classmethods :meth:`Tree.from_edges <hiclass_parallel.tree.Tree.from_edges>`,
``from_paths``, ``from_dict`` and ``from_networkx`` call them; their docstrings document the
rules, the errors and examples.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..exceptions import TreeError, describe_some
from ._arrays import PAD
from ._labels import check_label, edge_pair, hashable

__all__ = ["TreeParts", "parts_from_dict", "parts_from_edges", "parts_from_networkx", "parts_from_paths"]

#: ``(parents, labels, names)``: the arguments of :class:`~hiclass_parallel.tree.Tree`.
TreeParts = tuple[np.ndarray, "list | None", "list | None"]


def parts_from_edges(edges: Iterable[tuple[Hashable, Hashable | None]]) -> TreeParts:
    """The tree of ``(child, parent)`` label pairs: :meth:`Tree.from_edges`."""
    parent_of: dict = {}
    order: dict = {}
    for edge in edges:
        child, parent = edge_pair(edge)
        check_label(child)
        check_label(parent)
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
    return _from_parent_map(parent_of, order)


def _from_parent_map(parent_of: Mapping, order: Mapping) -> TreeParts:
    """The tree of ``{label: parent label or None}``, node ids in the order of ``order``."""
    labels = list(order)
    parents = [PAD if parent_of.get(label) is None else order[parent_of[label]] for label in labels]
    if not labels:
        raise TreeError("the tree is empty: it needs at least one class")
    return np.asarray(parents, dtype=np.int64), labels, None


def parts_from_paths(paths: Iterable[Sequence[Hashable] | str], pad: Any = None, sep: str | None = None) -> TreeParts:
    """The tree of ancestral paths of names, each from the top level down: :meth:`Tree.from_paths`."""
    if sep is not None and (not isinstance(sep, str) or not sep):
        raise TreeError(f"sep must be a non-empty string, got {sep!r}")
    index: dict = {}  # path of names (a tuple) -> node id
    parents: list[int] = []
    names: list = []
    for i, path in enumerate(paths):
        parts = _path_parts(path, i, pad, sep)
        parent, prefix = PAD, ()
        for name in parts:
            check_label(name)
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
        return parent_ids, labels, names
    if len(set(names)) == len(names):
        return parent_ids, names, None
    return parent_ids, None, names


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
    parts = [hashable(v) for v in path if not (_is_missing(v) or (pad is not None and v == pad))]
    if sep is not None:
        for name in parts:
            if not isinstance(name, str) or sep in name:
                raise TreeError(
                    f"path {row} ({list(parts)!r}) has the name {name!r}, which "
                    + ("is not a string: sep joins names into path strings" if not isinstance(name, str)
                       else f"holds the separator {sep!r}: its path string would read as another path")
                )
    return parts


def parts_from_dict(nested: Mapping) -> TreeParts:
    """The tree of a nested mapping ``{label: children}``: :meth:`Tree.from_dict`."""
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
    return parts_from_edges(edges)


def parts_from_networkx(graph: Any) -> TreeParts:
    """The tree of a ``networkx.DiGraph`` whose edges point from parent to child:
    :meth:`Tree.from_networkx`. networkx itself is not imported."""
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
    return _from_parent_map(parent_of, order)
