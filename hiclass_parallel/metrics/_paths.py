"""Input checking for the metrics: labels, node ids or padded paths -> node-id paths.

Every metric reduces to one representation, two int64 arrays ``(n_samples, width)`` of
node ids right-padded with ``-1``, one for ``y_true`` and one for ``y_pred``, such that two
equal ids in the same column denote the same node. Then a sample's node set (Kiritchenko)
is its row without the pads, and the lowest common ancestor of the true and predicted node
is the common prefix of the two rows.

- With a ``tree``, ids are the tree's node ids and every row is checked to be the ancestral
  path of its deepest node, so identity never rests on names.
- Without a tree, both inputs must be 2-D paths; a node is identified by its whole prefix
  (the path from the top level down to it), so two nodes that share a name under different
  parents stay different. The ids are made by factorising the prefixes level by level.

Device arrays (torch, CuPy, any DLPack/array-API array) are moved to the host once.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ..exceptions import describe_some
from ..labels._paths import LabelIndex, host_labels_or_paths, id_pad_mask, metric_pad_mask, name_paths_to_last
from ._weights import check_sample_weight

__all__ = ["check_paths", "InputType"]

InputType = Literal["auto", "labels", "ids"]

_INPUT_TYPES = ("auto", "labels", "ids")


def _use_ids(arr: np.ndarray, tree: Any, input_type: str) -> bool:
    if input_type == "ids":
        return True
    if input_type == "labels":
        return False
    # The names: what label paths hold (the labels, unless names repeat under two parents).
    tree_labels_are_ints = getattr(tree, "names", tree.labels).dtype.kind in "iu"
    return arr.dtype.kind in "iu" and not tree_labels_are_ints


def _check_contiguous(pad: np.ndarray, name: str, values: np.ndarray) -> np.ndarray:
    """Depth (number of non-pad entries) of each row; raises on a label after a pad."""
    live = ~pad
    depth = np.count_nonzero(live, axis=1)
    expected = np.arange(pad.shape[1])[None, :] < depth[:, None]
    bad = np.flatnonzero((live != expected).any(axis=1))
    if bad.size:
        row = int(bad[0])
        raise ValueError(
            f"{name} has {bad.size} path(s) with a label after a pad, e.g. row {row}: "
            f"{values[row].tolist()}; paths must run from the top level down, right-padded"
        )
    return depth


def _check_ids(values: np.ndarray, tree: Any, name: str) -> np.ndarray:
    """Node ids as int64, named errors for non-integers and ids out of range."""
    if values.dtype.kind not in "iu":
        if not (values.dtype.kind == "f" and values.size and np.all(values == np.round(values))):
            raise TypeError(f"{name} holds node ids but has dtype {values.dtype}; node ids are integers")
    # Compare before the cast to int64: uint64 ids >= 2**63 (or huge floats) would wrap.
    bad = values >= tree.n_classes
    if bad.any():
        raise ValueError(
            f"{name} holds node ids {describe_some(np.unique(values[bad]).tolist())} out of range "
            f"[0, {tree.n_classes}) for a tree of {tree.n_classes} classes"
        )
    ids = values.astype(np.int64, copy=False)
    return ids


def _tree_paths(arr: np.ndarray, tree: Any, name: str, pad_label: Any, input_type: str, labels: LabelIndex) -> np.ndarray:
    """Check one input against the tree; return its node-id paths ``(n, tree.n_levels)``.

    A 2-D path is identified by its deepest entry, so only ``n`` labels are looked up; the
    rest of each row is then compared with the ancestral path of that node.
    """
    n_levels = tree.n_levels
    # The pad row makes id -1 (an empty prediction: the root) gather an all-pad path.
    table = np.vstack([tree.paths, np.full((1, n_levels), -1, dtype=tree.paths.dtype)])
    if arr.ndim == 2 and arr.shape[1] == 1 and not getattr(tree, "has_names", False):
        # A column of labels: as a path it could only hold top-level classes, which read the
        # same as labels, so reading it as labels is never wrong and accepts (n, 1) targets.
        arr = arr[:, 0]
    use_ids = _use_ids(arr, tree, input_type)
    pad = id_pad_mask(arr, name) if use_ids else metric_pad_mask(arr, pad_label, labels)
    if arr.ndim == 1:
        last, has = arr, ~pad
        depth = None
    else:
        depth = _check_contiguous(pad, name, arr)
        has = depth > 0
        last = arr[np.arange(arr.shape[0]), np.maximum(depth - 1, 0)]
    deepest = np.full(arr.shape[0], -1, dtype=np.int64)
    names = getattr(tree, "names", tree.labels)  # the labels, unless names repeat under two parents
    if depth is not None and not use_ids and getattr(tree, "has_names", False):
        # Names repeat under different parents: a path is found by walking it down the tree.
        deepest = name_paths_to_last(arr, pad, tree, name)
    elif has.all():
        deepest = _check_ids(last, tree, name) if use_ids else labels.ids(last, name)
    elif has.any():
        deepest[has] = _check_ids(last[has], tree, name) if use_ids else labels.ids(last[has], name)
    paths = table[deepest]
    if depth is None:
        return paths
    # Every row must be the ancestral path of its deepest node: same depth, same entries.
    node_depth = np.where(has, np.asarray(tree.depth)[np.maximum(deepest, 0)] + 1, 0)
    bad = node_depth != depth
    width = min(arr.shape[1], n_levels)
    if use_ids:
        expected = paths[:, :width]
    else:
        expected = names[np.maximum(paths[:, :width], 0)]
    bad |= (~pad[:, :width] & np.asarray(arr[:, :width] != expected, dtype=bool)).any(axis=1)
    bad_rows = np.flatnonzero(bad)
    if bad_rows.size:
        row = int(bad_rows[0])
        node = int(deepest[row])
        true_path = names[paths[row][paths[row] >= 0]].tolist()
        raise ValueError(
            f"{name} has {bad_rows.size} row(s) that are not ancestral paths of the tree, e.g. row {row}: "
            f"{arr[row].tolist()}; the path of {tree.labels[node]!r} (id {node}) is {true_path}"
        )
    return paths


def _codes(values: np.ndarray) -> np.ndarray:
    """Dense integer codes of values (equal values, equal codes)."""
    if values.dtype != object:
        return np.unique(values, return_inverse=True)[1].reshape(-1)
    # Hashing beats sorting Python objects; both loops below run in C.
    items = values.tolist()
    index = {v: i for i, v in enumerate(dict.fromkeys(items))}
    return np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items))


def _factorize_prefixes(arrays: list[np.ndarray], pads: list[np.ndarray]) -> list[np.ndarray]:
    """Ids of path prefixes shared across ``arrays``: same prefix, same id; one pass per level."""
    width = max(a.shape[1] for a in arrays)
    if len({a.dtype for a in arrays}) > 1:
        # Never let NumPy promote ints to strings (1 would then equal "1").
        arrays = [a.astype(object) for a in arrays]
    # Widened value columns are left uninitialised: the pad mask marks them all as pads.
    values = np.concatenate([_widen(a, width, None) for a in arrays], axis=0)
    pad = np.concatenate([_widen(p, width, True) for p in pads], axis=0)
    ids = np.full(values.shape, -1, dtype=np.int64)
    parent = np.full(values.shape[0], -1, dtype=np.int64)
    offset = 0
    for level in range(width):
        live = ~pad[:, level]
        if not live.any():
            break
        codes = _codes(values[live, level])
        key = (parent[live] + 1) * (int(codes.max()) + 1) + codes
        uniq, inverse = np.unique(key, return_inverse=True)
        ids[live, level] = inverse.reshape(-1) + offset
        offset += uniq.size
        parent[live] = ids[live, level]
    out, start = [], 0
    for a in arrays:
        out.append(ids[start : start + a.shape[0]])
        start += a.shape[0]
    return out


def _widen(a: np.ndarray, width: int, fill: Any) -> np.ndarray:
    if a.shape[1] == width:
        return a
    wide = np.empty((a.shape[0], width), dtype=a.dtype)
    wide[:, : a.shape[1]] = a
    if fill is not None:
        wide[:, a.shape[1] :] = fill
    return wide


def check_paths(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    sample_weight: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Check ``y_true`` and ``y_pred`` and return them as node-id paths.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,) or (n_samples, n_columns)
        1-D: one label (or node id) per sample, at any depth; needs ``tree``.
        2-D: ancestral paths from the top level down, right-padded with ``pad_label``; a
        list of lists may be ragged (its short rows are padded).
        NumPy, lists, pandas, torch (CPU or CUDA) and CuPy arrays are accepted.
    tree : Tree, default=None
        The class tree. Without it both inputs must be 2-D paths, and nodes are identified
        by their prefix (path from the top level), not by their name alone.
    pad_label : object, default=None
        The padding value of label paths. ``None`` recognises ``""``, ``None``, ``-1`` and
        NaN (any that is a label of ``tree`` excepted). Node-id inputs pad with any negative id.
    input_type : {"auto", "labels", "ids"}, default="auto"
        Whether values are the tree's labels or its node ids. ``"auto"`` reads integer arrays
        as node ids when the tree's labels are not integers, and as labels otherwise.
    sample_weight : array-like of shape (n_samples,), default=None

    Returns
    -------
    true, pred : ndarray of int of shape (n_samples, width)
        Node-id paths padded with ``-1``; equal ids in a column are the same node. With a
        tree, ``width`` is ``tree.n_levels`` and the ids are the tree's node ids (int32).
    sample_weight : ndarray of float64 of shape (n_samples,) or None

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small": None, "big": ["happy"]}, "cat": None})
    >>> true, pred, _ = check_paths(["happy", "cat"], [["dog", "small", ""], ["", "", ""]], tree)
    >>> true.tolist(), pred.tolist()
    ([[0, 2, 3], [4, -1, -1]], [[0, 1, -1], [-1, -1, -1]])
    """
    if input_type not in _INPUT_TYPES:
        raise ValueError(f"input_type must be one of {_INPUT_TYPES}, got {input_type!r}")
    true_arr = host_labels_or_paths(y_true, "y_true", pad_label)
    pred_arr = host_labels_or_paths(y_pred, "y_pred", pad_label)
    if true_arr.shape[0] != pred_arr.shape[0]:
        raise ValueError(
            f"y_true and y_pred have different numbers of samples: {true_arr.shape[0]} and {pred_arr.shape[0]}"
        )
    if true_arr.shape[0] == 0:
        raise ValueError("y_true and y_pred are empty: a metric needs at least one sample")
    weight = check_sample_weight(sample_weight, true_arr.shape[0])
    if tree is not None:
        if not (hasattr(tree, "paths") and hasattr(tree, "to_ids")):
            raise TypeError(f"tree must be a hiclass_parallel.Tree, got {type(tree).__name__}")
        labels = LabelIndex(tree)
        true = _tree_paths(true_arr, tree, "y_true", pad_label, input_type, labels)
        pred = _tree_paths(pred_arr, tree, "y_pred", pad_label, input_type, labels)
        return true, pred, weight
    for arr, name in ((true_arr, "y_true"), (pred_arr, "y_pred")):
        if arr.ndim != 2:
            raise ValueError(
                f"{name} is 1-D, so it needs tree= to find the ancestors of each label; "
                "without a tree pass both y_true and y_pred as 2-D padded paths"
            )
    if input_type == "ids":
        pads = [id_pad_mask(true_arr, "y_true"), id_pad_mask(pred_arr, "y_pred")]
    else:
        pads = [metric_pad_mask(true_arr, pad_label, None), metric_pad_mask(pred_arr, pad_label, None)]
    _check_contiguous(pads[0], "y_true", true_arr)
    _check_contiguous(pads[1], "y_pred", pred_arr)
    true, pred = _factorize_prefixes([true_arr, pred_arr], pads)
    return true, pred, weight
