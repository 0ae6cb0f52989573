"""The encoded class tree: the paper's "encoding and storing the tree", done once.

A :class:`Tree` holds, as read-only NumPy arrays, everything the tensor methods need:
the parent of every class, its depth, the paper's mask ``M_lc`` and paths ``P_cl``, and
the partition groups. It is immutable and framework-free; the tensor methods copy its
buffers to a device once and cache them there (see :mod:`hiclass_parallel._backend`).

Vocabulary (paper -> code): classes ``c = 1..C`` are node ids ``0..C-1``; levels
``l = 1..L`` are depths ``0..L-1``; the root is implicit and is not a class, so a tree may
have many top-level classes; the padding value is ``-1`` (:data:`PAD`).

Where each part lives:

- ``_tree``: the :class:`Tree` class, its arrays and what is derived from them (children,
  groups, the cache, subtrees, equality, pickling, saving and loading);
- ``_arrays``: the encoding itself, from the parents to the depth and paths (and the cycle
  check), with :data:`PAD` and :data:`PARTITIONS`;
- ``_constructors``: reading edges, label paths, nested mappings and networkx graphs
  (``Tree.from_edges``, ``from_paths``, ``from_dict``, ``from_networkx``);
- ``_labels``: what may name a class, and the look-ups between labels and node ids
  (``Tree.to_ids``, ``to_labels``, ``path_labels``);
- ``_file``: the ``.npz`` file format of ``Tree.save`` and ``Tree.load``.
"""

from ._arrays import PAD, PARTITIONS
from ._tree import Tree

__all__ = ["PAD", "PARTITIONS", "Tree"]
