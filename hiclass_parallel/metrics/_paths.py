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

from itertools import repeat
from typing import Any, Literal

import numpy as np

from ..exceptions import UnknownLabelError, describe_some
from ..labels._paths import LabelIndex, host_labels_or_paths, id_pad_mask, name_paths_to_last
from ..labels._paths import metric_pad_mask as _named_pad_mask
from ..labels._paths import pad_mask as _estimator_pad_mask
from ..labels._unknown import UnknownNodes, walk_label_paths, warn_unknown
from ._weights import check_sample_weight

__all__ = ["check_paths", "read_labels", "tree_label_paths", "InputType", "Unknown"]

InputType = Literal["auto", "labels", "ids"]
Unknown = Literal["warn", "ignore", "raise"]

_INPUT_TYPES = ("auto", "labels", "ids")
_UNKNOWN = ("warn", "ignore", "raise")


def metric_pad_mask(values: np.ndarray, pad_label: Any, labels: LabelIndex | None) -> np.ndarray:
    """True where ``values`` holds a pad: the metrics' reading of ``pad_label`` and, as the
    estimators read ``y``, ``None`` and NaN always (a DataFrame of levels pads with them)."""
    mask = _named_pad_mask(values, pad_label, labels)
    if pad_label is not None and values.dtype.kind in "fO":
        mask |= _estimator_pad_mask(values, None)
    return mask


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


def _strict_tree_paths(arr: np.ndarray, tree: Any, name: str, pad_label: Any, input_type: str,
                       labels: LabelIndex) -> np.ndarray:
    """Check one input against the tree; return its node-id paths ``(n, tree.n_levels)``; a
    class the tree lacks, or a path that is not one of the tree's, is an error naming it.

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


def _lookup(labels: LabelIndex, values: np.ndarray, name: str) -> np.ndarray:
    """Node ids of 1-D labels, ``-2`` for a label the tree lacks (a name several classes share
    stays an error: it is ambiguous, not unknown)."""
    try:
        return labels.ids(values, name)
    except UnknownLabelError:
        pass
    items = values.reshape(-1).tolist()
    try:
        ids = np.fromiter(map(labels.index.get, items, repeat(-2)), dtype=np.int64, count=len(items))
    except TypeError as exc:  # unhashable entries
        raise TypeError(f"{name} holds values that cannot be labels: {exc}") from exc
    missing = ids < 0
    if missing.any() and getattr(labels.tree, "has_names", False):  # a name only one class has
        found = labels.tree._ids_of_names(values.reshape(-1)[missing])
        ids[np.flatnonzero(missing)[found >= 0]] = found[found >= 0]
    return ids


def _as_name_rows(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Labels the tree lacks as rows of names: a tuple (or list) of names is its path, any
    other label a path of one node; returns the rows and their pad mask."""
    rows = [list(v) if isinstance(v, (tuple, list)) else [v] for v in values]
    width = max(len(r) for r in rows)
    out = np.empty((len(rows), width), dtype=object)
    pad = np.ones((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        pad[i, : len(r)] = False
    return out, pad


def _place(paths: np.ndarray, rows: np.ndarray, walked: np.ndarray) -> np.ndarray:
    """``paths`` with ``rows`` replaced by ``walked`` (widened with pads where either is wider)."""
    width = max(paths.shape[1], walked.shape[1])
    paths, walked = _pad_to(paths, width), _pad_to(walked, width)
    paths[rows] = walked
    return paths


def _pad_to(paths: np.ndarray, width: int) -> np.ndarray:
    if paths.shape[1] >= width:
        return paths
    out = np.full((paths.shape[0], width), -1, dtype=np.int64)
    out[:, : paths.shape[1]] = paths
    return out


def _tree_paths(arr: np.ndarray, tree: Any, name: str, pad_label: Any, input_type: str, labels: LabelIndex,
                nodes: UnknownNodes) -> tuple[np.ndarray, np.ndarray]:
    """One input's node-id paths ``(n, width)`` and the rows that hold classes the tree lacks.

    ``width`` is ``tree.n_levels``, or more where a path goes on below the tree's deepest
    level with classes it lacks. Those classes get ids from :class:`UnknownNodes` (from
    ``tree.n_classes`` up). Node ids are never unknown: an id out of range is an error.
    """
    n_levels = tree.n_levels
    unknown = np.zeros(arr.shape[0], dtype=bool)
    if arr.ndim == 2 and arr.shape[1] == 1 and not getattr(tree, "has_names", False):
        arr = arr[:, 0]  # a column of labels reads as labels (see _strict_tree_paths)
    if _use_ids(arr, tree, input_type):
        return _strict_tree_paths(arr, tree, name, pad_label, input_type, labels), unknown
    # The pad row makes id -1 (an empty prediction: the root) gather an all-pad path.
    table = np.vstack([tree.paths, np.full((1, n_levels), -1, dtype=tree.paths.dtype)]).astype(np.int64)
    pad = metric_pad_mask(arr, pad_label, labels)
    if arr.ndim == 1:
        deepest = np.full(arr.shape[0], -1, dtype=np.int64)
        has = ~pad
        if has.any():
            deepest[has] = _lookup(labels, arr[has], name)
        unknown = deepest == -2
        paths = table[np.where(unknown, -1, deepest)]
        if unknown.any():
            rows = np.flatnonzero(unknown)
            names, names_pad = _as_name_rows(arr[rows].tolist())
            paths = _place(paths, rows, walk_label_paths(names, names_pad, tree, nodes, name)[0])
        return paths, unknown
    depth = _check_contiguous(pad, name, arr)
    if getattr(tree, "has_names", False):
        # Names repeat under different parents: a path is found by walking it down the tree.
        paths, unknown = walk_label_paths(arr, pad, tree, nodes, name)
        return _pad_to(paths, n_levels), unknown
    # Labels are unique: one look-up per row (its deepest label), then the row is compared
    # with the tree's path of that node; the rows that differ are walked down the tree.
    has = depth > 0
    rows = np.arange(arr.shape[0])
    last = arr[rows, np.maximum(depth - 1, 0)]
    deepest = np.full(arr.shape[0], -1, dtype=np.int64)
    if has.any():
        deepest[has] = _lookup(labels, last[has], name)
    paths = table[np.where(deepest == -2, -1, deepest)]
    node_depth = np.where(deepest >= 0, np.asarray(tree.depth)[np.maximum(deepest, 0)] + 1, np.where(has, -1, 0))
    differ = node_depth != depth
    width = min(arr.shape[1], n_levels)
    expected = tree.labels[np.maximum(paths[:, :width], 0)]
    differ |= (~pad[:, :width] & np.asarray(arr[:, :width] != expected, dtype=bool)).any(axis=1)
    if differ.any():
        bad = np.flatnonzero(differ)
        walked, unknown[bad] = walk_label_paths(arr[bad], pad[bad], tree, nodes, name)
        paths = _place(paths, bad, walked)
    return paths, unknown


def _split_path_strings(arr: np.ndarray, sep: str, name: str, pad_label: Any) -> np.ndarray:
    """1-D path strings as 2-D rows of names, right-padded; a missing label (``None``, NaN,
    ``""`` or ``pad_label``) is an empty path."""
    if not isinstance(sep, str) or not sep:
        raise ValueError(f"path_sep must be a non-empty string or None, got {sep!r}")
    missing = metric_pad_mask(arr, pad_label, None) if arr.dtype == object else (arr == "")
    items = arr.tolist()
    bad = [i for i, v in enumerate(items) if not missing[i] and not isinstance(v, str)]
    if bad:
        raise ValueError(
            f"path_sep={sep!r} reads each label of {name} as a path string, but rows {describe_some(bad)} "
            f"hold {describe_some([items[i] for i in bad[:5]])}, which are not strings"
        )
    parts = [[] if m else v.split(sep) for v, m in zip(items, missing.tolist())]
    out = np.empty((len(parts), max((len(p) for p in parts), default=0) or 1), dtype=object)
    out[:] = pad_label
    for i, p in enumerate(parts):
        out[i, : len(p)] = p
    return out


def read_labels(y: Any, name: str, pad_label: Any = None, path_sep: str | None = None) -> np.ndarray:
    """``y`` in any label form as a host array: 1-D labels (or node ids), or 2-D label paths.

    The forms the estimators take: 1-D labels, 2-D paths (arrays, DataFrames of levels, lists
    of lists, ragged lists), a Series (or 1-D object array) of path lists and, with
    ``path_sep``, path strings, split into rows of names (``pad_label`` pads them).
    """
    arr = host_labels_or_paths(y, name, pad_label)
    if arr.ndim == 1 and arr.dtype == object and arr.size \
            and all(isinstance(v, (list, np.ndarray)) for v in arr.tolist()):
        # A pandas Series (or object array) of path lists: one path per row.
        arr = host_labels_or_paths([list(v) for v in arr.tolist()], name, pad_label)
    if path_sep is not None and arr.ndim == 1 and arr.dtype.kind in "OUS":
        arr = _split_path_strings(arr.astype(object), path_sep, name, pad_label)
    return arr


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


def _checked_tree_paths(arr: np.ndarray, tree: Any, name: str, pad_label: Any, input_type: str,
                        labels: LabelIndex, nodes: UnknownNodes, unknown: str) -> tuple[np.ndarray, tuple]:
    """:func:`_tree_paths` of one input, refusing classes the tree lacks with ``unknown="raise"``;
    also returns ``(rows holding such classes, rows, an example)`` for the warning."""
    paths, held = _tree_paths(arr, tree, name, pad_label, input_type, labels, nodes)
    if not held.any():
        return paths, (0, arr.shape[0], None)
    if unknown == "raise":
        _strict_tree_paths(arr, tree, name, pad_label, input_type, labels)  # names the rows
        raise UnknownLabelError(f"{name}: {int(held.sum())} rows hold classes that are not in the tree")
    return paths, (int(held.sum()), arr.shape[0], arr[int(np.flatnonzero(held)[0])].tolist())


def tree_label_paths(y: Any, tree: Any, *, name: str = "y", pad_label: Any = None, path_sep: str | None = None,
                     unknown: Unknown = "warn") -> np.ndarray:
    """Node-id paths ``(n_samples, width)`` of one input of labels, as :func:`check_paths` reads it.

    For an estimator's ``score``: the true labels in any form, read once, classes the tree
    lacks getting ids past the tree's (see :func:`check_paths`); compare them with predicted
    node-id paths (``input_type="ids"``, no tree).

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_paths([["food", "fruit"], ["tools"]])
    >>> tree_label_paths(["food/fruit", "food/nuts"], tree, path_sep="/", unknown="ignore").tolist()
    [[0, 1], [0, 3]]
    """
    if unknown not in _UNKNOWN:
        raise ValueError(f"unknown must be one of {_UNKNOWN}, got {unknown!r}")
    arr = read_labels(y, name, pad_label, path_sep)
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty: a score needs at least one sample")
    paths, count = _checked_tree_paths(arr, tree, name, pad_label, "labels", LabelIndex(tree), UnknownNodes(tree),
                                       unknown)
    if unknown == "warn":
        warn_unknown({name: count})
    return paths


def check_paths(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    sample_weight: Any = None,
    path_sep: str | None = None,
    unknown: Unknown = "warn",
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Check ``y_true`` and ``y_pred`` and return them as node-id paths.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,) or (n_samples, n_columns)
        1-D: one label (or node id) per sample, at any depth; needs ``tree`` (or
        ``path_sep``). 2-D: ancestral paths from the top level down, right-padded with
        ``pad_label``: an array, a DataFrame of levels, a list of lists (ragged lists are
        padded), a Series of path lists. NumPy, lists, pandas, torch (CPU or CUDA) and CuPy
        arrays are accepted.
    tree : Tree, default=None
        The class tree. Without it both inputs must be paths (or path strings), and nodes are
        identified by their prefix (path from the top level), not by their name alone.
    pad_label : object, default=None
        The padding value of label paths. ``None`` recognises ``""``, ``None``, ``-1`` and
        NaN (any that is a label of ``tree`` excepted). Node-id inputs pad with any negative id.
    input_type : {"auto", "labels", "ids"}, default="auto"
        Whether values are the tree's labels or its node ids. ``"auto"`` reads integer arrays
        as node ids when the tree's labels are not integers, and as labels otherwise.
    sample_weight : array-like of shape (n_samples,), default=None
    path_sep : str, default=None
        1-D string labels are path strings, such as ``"Electronics/Cables"``: each is split
        on ``path_sep`` into its path of names (as the estimators' ``path_sep`` reads them).
    unknown : {"warn", "ignore", "raise"}, default="warn"
        Labels holding classes the tree lacks (a held-out split with classes no training
        row had): each such class counts as a node of its own under its known ancestors, as
        the label path says (a miss; its ancestors hits), and ``"warn"`` says once how many
        rows held one (:class:`~hiclass_parallel.exceptions.UnknownClassWarning`).
        ``"raise"``: an :class:`~hiclass_parallel.exceptions.UnknownLabelError` (or, for a
        path the tree does not have, a ``ValueError``) naming them. A plain label the tree
        lacks has no known ancestors; a path or tuple of names keeps its known prefix.

    Returns
    -------
    true, pred : ndarray of int of shape (n_samples, width)
        Node-id paths padded with ``-1``; equal ids in a column are the same node. With a
        tree, ``width`` is ``tree.n_levels`` (more only where a class the tree lacks lies
        below its deepest level) and ids are the tree's node ids, ids from
        ``tree.n_classes`` up being classes it lacks.
    sample_weight : ndarray of float64 of shape (n_samples,) or None

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small": None, "big": ["happy"]}, "cat": None})
    >>> true, pred, _ = check_paths(["happy", "cat"], [["dog", "small", ""], ["", "", ""]], tree)
    >>> true.tolist(), pred.tolist()
    ([[0, 2, 3], [4, -1, -1]], [[0, 1, -1], [-1, -1, -1]])

    A class the tree lacks ("tiny", under "dog") gets an id past the tree's:

    >>> true, pred, _ = check_paths(["dog/tiny"], ["dog/small"], tree, path_sep="/", unknown="ignore")
    >>> true.tolist(), pred.tolist()
    ([[0, 5, -1]], [[0, 1, -1]])
    """
    if input_type not in _INPUT_TYPES:
        raise ValueError(f"input_type must be one of {_INPUT_TYPES}, got {input_type!r}")
    if unknown not in _UNKNOWN:
        raise ValueError(f"unknown must be one of {_UNKNOWN}, got {unknown!r}")
    true_arr = read_labels(y_true, "y_true", pad_label, path_sep)
    pred_arr = read_labels(y_pred, "y_pred", pad_label, path_sep)
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
        nodes = UnknownNodes(tree)  # shared: one unknown path, one id, in y_true and y_pred
        out, counts = [], {}
        for arr, name in ((true_arr, "y_true"), (pred_arr, "y_pred")):
            paths, counts[name] = _checked_tree_paths(arr, tree, name, pad_label, input_type, labels, nodes, unknown)
            out.append(paths)
        if unknown == "warn":
            warn_unknown(counts)
        width = max(out[0].shape[1], out[1].shape[1])
        return _pad_to(out[0], width), _pad_to(out[1], width), weight
    for arr, name in ((true_arr, "y_true"), (pred_arr, "y_pred")):
        if arr.ndim != 2:
            raise ValueError(
                f"{name} is 1-D, so it needs tree= to find the ancestors of each label (or path_sep= "
                "for path strings); without a tree pass both y_true and y_pred as 2-D padded paths"
            )
    if input_type == "ids":
        pads = [id_pad_mask(true_arr, "y_true"), id_pad_mask(pred_arr, "y_pred")]
    else:
        pads = [metric_pad_mask(true_arr, pad_label, None), metric_pad_mask(pred_arr, pad_label, None)]
    _check_contiguous(pads[0], "y_true", true_arr)
    _check_contiguous(pads[1], "y_pred", pred_arr)
    true, pred = _factorize_prefixes([true_arr, pred_arr], pads)
    return true, pred, weight
