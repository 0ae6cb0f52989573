"""Reading labels that hold classes the tree lacks, for scoring: node-id paths that go on past the tree.

A held-out split of a real taxonomy has classes no training row had, so a tree learnt from the
training labels lacks them. Scoring reads such a label as its path says: the known ancestors
are the tree's nodes, and the first class the tree lacks, with everything below it, gets an id
of its own past the tree's (``tree.n_classes`` and up). :class:`UnknownNodes` hands out those
ids for one comparison, so that the same path in ``y_true`` and ``y_pred`` gets the same ids and
the metrics' prefix counts work unchanged: an unknown node is a miss, its known ancestors hits.

- A label path (a row of names from the top level down) is walked down the tree one
  ``(parent, name)`` look-up per level; the walk stops at the first pair the tree lacks.
- A 1-D label the tree lacks has no known ancestors, unless it is a tuple of names (the
  labels of a tree whose names repeat), which is read as its path.

Training never reads labels this way: there a class the tree lacks stays an error
(:class:`~hiclass_parallel.exceptions.UnknownLabelError`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..exceptions import UnknownClassWarning, caller_stacklevel
from ._paths import walk_known_prefix

__all__ = ["UnknownNodes", "walk_label_paths", "warn_unknown"]


class UnknownNodes:
    """Ids for the nodes a tree lacks, shared by the inputs of one comparison.

    The node reached by name ``name`` under node ``parent`` (``-1``: the top level) gets the
    id ``tree.n_classes + k``, the same id for the same pair every time, so an unknown node
    is identified by its path as the tree's nodes are.

    Parameters
    ----------
    tree : Tree
    """

    def __init__(self, tree: Any):
        self.tree = tree
        self._ids: dict[tuple[int, Any], int] = {}

    def id(self, parent: int, name: Any) -> int:
        """The id of the child named ``name`` of ``parent`` that the tree lacks."""
        key = (int(parent), name)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self.tree.n_classes + len(self._ids)
        return found

    def __len__(self) -> int:
        return len(self._ids)


def walk_label_paths(values: np.ndarray, pad: np.ndarray, tree: Any, nodes: UnknownNodes,
                     what: str) -> tuple[np.ndarray, np.ndarray]:
    """Node-id paths of label paths, going on past the tree where it lacks a class.

    Parameters
    ----------
    values : ndarray of shape (n, width)
        Names from the top level down, right-padded (``pad`` marks the pads; they are contiguous).
    pad : ndarray of bool of shape (n, width)
    tree : Tree
    nodes : UnknownNodes
        Ids for the nodes the tree lacks.
    what : str
        How errors name ``values``.

    Returns
    -------
    paths : ndarray of int64 of shape (n, width)
        Node ids right-padded with ``-1``; ids from ``tree.n_classes`` up are nodes the tree lacks.
    unknown : ndarray of bool of shape (n,)
        The rows that hold a node the tree lacks.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_paths([["food", "fruit"], ["tools"]])
    >>> values = np.array([["food", "fruit"], ["food", "nuts"], ["toys", "kite"]], dtype=object)
    >>> paths, unknown = walk_label_paths(values, values == "", tree, UnknownNodes(tree), "y")
    >>> paths.tolist(), unknown.tolist()
    ([[0, 1], [0, 3], [4, 5]], [False, True, True])
    """
    width = values.shape[1]
    paths, failed = walk_known_prefix(values, pad, tree, what)
    lost = failed >= 0  # the walk left the tree
    depth = (paths >= 0).sum(axis=1)
    last = np.where(depth > 0, paths[np.arange(len(paths)), np.maximum(depth - 1, 0)], -1)
    # Rows that left the tree are few (the classes no training row had): one look-up per node.
    for row in np.flatnonzero(lost).tolist():
        parent = int(last[row])
        names = values[row].tolist()
        for level in range(int((paths[row] >= 0).sum()), width):
            if pad[row, level]:
                break
            parent = nodes.id(parent, names[level])
            paths[row, level] = parent
    return paths, lost


def warn_unknown(counts: dict[str, tuple[int, int, Any]]) -> None:
    """One :class:`UnknownClassWarning` for the inputs of one call that hold unknown classes,
    pointing at the caller's code outside the package.

    ``counts`` maps an input's name to ``(rows holding unknown classes, rows, an example)``.
    """
    held = {name: c for name, c in counts.items() if c[0]}
    if not held:
        return
    parts = [f"{k} of {n} rows of {name} (e.g. {example!r})" for name, (k, n, example) in held.items()]
    warnings.warn(
        f"{' and '.join(parts)} hold classes the tree lacks (no training row had them): each such "
        "class counts as a miss, and its ancestors in the tree as hits, as the label path says",
        UnknownClassWarning,
        stacklevel=caller_stacklevel(),
    )
