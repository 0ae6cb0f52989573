"""The host layout of the lean engine: for one ``(tree, partition, stop)``, where every column
goes so that each group is contiguous, and how groups share size buckets. Computed once with
NumPy and cached on the tree (:meth:`Tree.cached`); its arrays are copied once per device.

The group plan (every group's members, contiguous, and where each group starts) is built here
once; the C and Triton kernels derive their plans from it (``members``, ``group_starts``) and
keep them in :attr:`Layout.plans`, one per device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._backend import array_namespace, device, is_numpy_array, is_torch_array
from ...tree import PAD, PARTITIONS, Tree

# Cost, in padded slots per row, of one more bucket (the few array calls it needs) when
# grouping groups of similar size into dense blocks: buckets are merged while the padding
# this adds is cheaper than the calls it saves.
_BUCKET_OVERHEAD = 512

def check_partition(partition: str) -> None:
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")


# ---------------------------------------------------------------------------- host layout
@dataclass(frozen=True, eq=False)
class Layout:
    """Everything the kernels need about one (tree, partition, stop), computed once on the host."""

    partition: str
    stop: bool
    n_classes: int
    n_outputs: int
    n_groups: int
    n_levels: int
    n_slots: int
    buckets: tuple[tuple[int, int, int, bool], ...]  # (offset, n_groups, width, transposed)
    level_bounds: tuple[int, ...]  # start of each depth in `order`, then n_classes
    n_leaves_at: tuple[int, ...]  # leaves of each depth (they come first in its block)
    log_masked_level: tuple[float, ...]  # log(n_outputs - size) of each depth's group
    host: dict[str, np.ndarray]
    plans: dict[Any, Any] = field(default_factory=dict)  # a backend's kernel plan, by (backend, device)


def _plan_buckets(sizes: np.ndarray) -> list[np.ndarray]:
    """Split groups into buckets of similar size: an exact DP over the distinct sizes.

    A bucket of the sorted distinct sizes ``i..j`` costs ``overhead + max size * n groups``
    padded slots per row; the DP minimises the total, so big groups get buckets of their own
    and the many tiny groups of a sibling partition share a few.
    """
    distinct, inverse, counts = np.unique(sizes, return_inverse=True, return_counts=True)
    n = distinct.size
    csum = np.concatenate([[0], np.cumsum(counts)])
    best = np.zeros(n + 1)
    prev = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        cost = best[:j] + _BUCKET_OVERHEAD + float(distinct[j - 1]) * (csum[j] - csum[:j])
        if distinct[0] == 1 and j > 1:  # groups of one need no reduction: keep them apart
            cost[0] = np.inf
        k = int(np.argmin(cost))
        best[j], prev[j] = cost[k], k
    cuts = []
    j = n
    while j > 0:
        cuts.append((prev[j], j))
        j = prev[j]
    groups_of = np.argsort(inverse, kind="stable")  # groups by ascending size, then id
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return [groups_of[bounds[i]:bounds[j]] for i, j in reversed(cuts)]


def _build_layout(tree: Tree, partition: str, stop: bool) -> Layout:
    C, L = tree.n_classes, tree.n_levels
    groups = tree.groups(partition).astype(np.int64)
    G = int(groups.max()) + 1
    n_out = C + (G - 1 if stop else 0)
    col_group = np.concatenate([groups, np.arange(1, G, dtype=np.int64)]) if stop else groups
    sizes = np.bincount(col_group, minlength=G)

    # The group plan: every group's columns contiguous (ascending column), group after group.
    members = np.argsort(col_group, kind="stable")
    group_starts = np.concatenate([[0], np.cumsum(sizes)])
    first = group_starts[:-1]
    # The bucketed layout: groups of similar size side by side in dense blocks.
    src_parts, buckets, gorder = [], [], []
    offset = 0
    for gk in _plan_buckets(sizes):
        width = int(sizes[gk].max())
        slot = np.arange(width)
        idx = np.full((gk.size, width), -1, dtype=np.int64)
        valid = slot[None, :] < sizes[gk][:, None]
        idx[valid] = members[(first[gk][:, None] + slot[None, :])[valid]]
        transposed = 1 < width <= gk.size  # reduce across rows of a (width, groups) block
        src_parts.append((idx.T if transposed else idx).reshape(-1))
        buckets.append((offset, int(gk.size), width, transposed))
        gorder.append(gk)
        offset += idx.size
    src = np.concatenate(src_parts)
    pad = np.flatnonzero(src < 0)
    group_pos = np.empty(G, dtype=np.int64)
    group_pos[np.concatenate(gorder)] = np.arange(G)

    # Depth order: every depth a contiguous block, its leaves first, then its internal nodes,
    # each part in ascending id order (so a first-occurrence argmax breaks ties by lowest id).
    depth = tree.depth.astype(np.int64)
    is_leaf = tree.is_leaf
    order = np.lexsort((np.arange(C), ~is_leaf, depth))
    inverse_order = np.empty(C, dtype=np.int64)
    inverse_order[order] = np.arange(C)
    level_bounds = np.searchsorted(depth[order], np.arange(L + 1))
    n_leaves_at = np.bincount(depth[is_leaf], minlength=L)
    internal_start = level_bounds[:-1] + n_leaves_at  # start of each depth's internal part
    parents = tree.parents.astype(np.int64)
    parent_idx = np.zeros(C, dtype=np.int64)  # parent's index within its depth's internal part
    deep = depth[order] > 0
    par = parents[order[deep]]
    parent_idx[deep] = inverse_order[par] - internal_start[depth[par]]

    internal = np.flatnonzero(~is_leaf)
    stop_col = np.full(C, PAD, dtype=np.int64)
    child_group = np.full(C, PAD, dtype=np.int64)  # group of each internal node's children
    if partition == "level":
        child_group[internal] = depth[internal] + 1
    else:
        child_group[internal] = np.searchsorted(tree.group_parents("sibling"), internal)
    stop_col[internal] = C + child_group[internal] - 1  # the stop of group g is column C + g - 1

    masked = n_out - sizes
    with np.errstate(divide="ignore"):
        log_masked = np.where(masked > 0, np.log(np.maximum(masked, 1)), -np.inf)

    paths_ext = np.concatenate([tree.paths.astype(np.int64), np.full((1, L), PAD, dtype=np.int64)])
    host = {
        "col_group": col_group,
        "members": members,
        "group_starts": group_starts,
        "group_sizes": sizes,
        "src": np.where(src < 0, 0, src),
        "src_ext": np.where(src < 0, n_out, src),  # pads read an appended -inf column
        "pad": pad,
        "group_pos": group_pos,
        "log_masked": log_masked,
        "order": order,
        "inverse_order": inverse_order,
        "parent_idx": parent_idx,
        "order_child_group": np.maximum(child_group[order], 0),
        "order_stop_col": np.maximum(stop_col[order], 0),
        "stop_col": stop_col,
        "paths_ext": paths_ext,
        "depth": depth,
        "leaves": np.flatnonzero(is_leaf).astype(np.int64),
    }
    for value in host.values():
        value.flags.writeable = False
    return Layout(
        partition=partition,
        stop=stop,
        n_classes=C,
        n_outputs=n_out,
        n_groups=G,
        n_levels=L,
        n_slots=int(src.size),
        buckets=tuple(buckets),
        level_bounds=tuple(int(b) for b in level_bounds),
        n_leaves_at=tuple(int(n) for n in n_leaves_at),
        log_masked_level=tuple(float(v) for v in log_masked[:L]) if partition == "level" else (),
        host=host,
    )


def layout(tree: Tree, partition: str, stop: bool) -> Layout:
    """The host layout of ``(tree, partition, stop)``, cached on the tree."""
    check_partition(partition)
    return tree.cached((__name__, "layout", partition, bool(stop)), lambda: _build_layout(tree, partition, bool(stop)))


def device_arrays(tree: Tree, lay: Layout, like: Any) -> dict[str, Any]:
    """The layout's arrays in the namespace and on the device of ``like``, cached on the tree."""
    key = (__name__, "arrays", lay.partition, lay.stop, array_namespace(like).__name__, str(device(like)))
    return tree.cached(key, lambda: layout_arrays(lay, like))


def layout_arrays(lay: Layout, like: Any) -> dict[str, Any]:
    """Copies of a layout's host arrays in the namespace and on the device of ``like``."""
    if is_numpy_array(like):
        return dict(lay.host)
    xp = array_namespace(like)
    if is_torch_array(like):
        import torch

        return {k: torch.as_tensor(np.array(v), device=like.device) for k, v in lay.host.items()}
    return {k: xp.asarray(np.array(v), device=device(like)) for k, v in lay.host.items()}
