"""The paper's encoding of a tree: from the parent of every class to its depth and paths.

Plain NumPy functions on the ``parents`` array, which :class:`~hiclass_parallel.tree.Tree`
runs once when it is built: the depth of every class (after checking that the parents form
no cycle) and the ancestral paths ``P_cl``, right-padded with :data:`PAD`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..exceptions import TreeError

__all__ = ["PAD", "PARTITIONS", "depth_of", "paths_of", "readonly"]

#: Padding value of ``paths``: "this path already reached its class".
PAD = -1

#: Supported partitions of the classes into mutually exclusive groups (subspaces).
PARTITIONS = ("level", "sibling")


def readonly(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only in place."""
    array.flags.writeable = False
    return array


def depth_of(parents: np.ndarray, describe: Callable[[list[int]], str]) -> np.ndarray:
    """Depth of every class by pointer chasing, one vectorised step per level: O(C * L).

    A cycle among the parents is a :class:`TreeError` naming its classes with ``describe``.
    """
    _check_acyclic(parents, describe)
    depth = np.zeros(parents.size, dtype=np.int32)
    ancestor = parents.astype(np.int64)
    while True:
        alive = ancestor >= 0
        if not alive.any():
            return depth
        depth[alive] += 1
        ancestor[alive] = parents[ancestor[alive]]


def _check_acyclic(parents: np.ndarray, describe: Callable[[list[int]], str]) -> None:
    """Pointer doubling: after 2**k >= C jumps every node must have reached the root.

    O(C log C), so a cycle in a 100,000-class tree is found in milliseconds rather than
    by climbing C levels.
    """
    n = parents.size
    jump = np.where(parents < 0, n, parents).astype(np.int64)
    jump = np.append(jump, n)  # the implicit root (index n) is its own parent
    for _ in range(max(1, int(np.ceil(np.log2(n + 1))))):
        jump = jump[jump]
    stuck = np.flatnonzero(jump[:n] != n)
    if stuck.size:
        cycle = _find_cycle(parents, int(stuck[0]))
        raise TreeError(f"the parents form a cycle through {describe(cycle)}")


def _find_cycle(parents: np.ndarray, start: int) -> list[int]:
    seen: dict[int, int] = {}
    node = start
    while node not in seen:
        seen[node] = len(seen)
        node = int(parents[node])
    order = list(seen)
    return order[seen[node]:]


def paths_of(parents: np.ndarray, depth: np.ndarray, n_levels: int) -> np.ndarray:
    """The ancestral path of every class, int32 ``(n_classes, n_levels)`` right-padded with :data:`PAD`."""
    n = parents.size
    paths = np.full((n, n_levels), PAD, dtype=np.int32)
    rows = np.arange(n)
    node = rows.copy()
    for _ in range(n_levels):
        alive = node >= 0
        paths[rows[alive], depth[node[alive]]] = node[alive]
        node[alive] = parents[node[alive]]
    return paths
