"""Reading labels: the one place that turns labels, padded paths and ragged paths into node ids.

Used by the estimators (:class:`~hiclass_parallel.estimators.PathEncoder`, the classifier) and
the metrics (:mod:`hiclass_parallel.metrics._paths`), so they accept the same inputs:

- 1-D labels at any depth, or 2-D label paths from the top level down, right-padded: a 2-D
  array or a list of lists, ragged lists right-padded with the pad label;
- pad rules: the estimators' pad label (``-1`` for integer labels, ``""`` for strings,
  ``None`` and NaN always; :func:`pad_mask`) and the metrics', which may also guess the pad
  when none is named (:func:`metric_pad_mask`);
- the "not a class of the tree" error (:meth:`UnknownLabelError.of`), raised by
  :meth:`Tree.to_ids` and by the look-ups below alike.

Integer labels in torch or CuPy arrays are mapped on their own device.
"""

from __future__ import annotations

import numbers
import re
import warnings
from itertools import chain, repeat
from typing import Any

import numpy as np

from .._backend import array_namespace, device, is_cupy_array, is_torch_array, to_numpy
from ..exceptions import TreeError, UnknownLabelError, describe_some
from ..ops.dense import labels_to_paths
from ..tree import PAD, Tree


def _ragged_rows(y: Any, pad: Any) -> np.ndarray | None:
    """A ragged list of paths as an object array right-padded with ``pad``; ``None`` for
    anything else (rectangular lists go through ``np.asarray``)."""
    if not (isinstance(y, (list, tuple)) and y and all(isinstance(row, (list, tuple, np.ndarray)) for row in y)):
        return None
    if len({len(row) for row in y}) == 1:
        return None
    return right_pad(y, pad)


def right_pad(rows: Any, pad: Any) -> np.ndarray:
    """Paths of any lengths as one object array, each row right-padded with ``pad``."""
    out = np.empty((len(rows), max((len(row) for row in rows), default=0)), dtype=object)
    out[:] = pad
    for i, row in enumerate(rows):
        out[i, : len(row)] = list(row)
    return out


def is_device_array(y: Any) -> bool:
    return is_torch_array(y) or is_cupy_array(y)


def default_pad_label(labels: np.ndarray) -> Any:
    """The documented pad: ``-1`` for integer labels, ``""`` for strings (also strings mixed
    with other labels), else ``None``."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu":
        return -1
    if labels.dtype.kind == "U" or (labels.dtype == object and any(isinstance(v, str) for v in labels.reshape(-1))):
        return ""
    return None


def _is_none_or_nan(values: np.ndarray) -> np.ndarray:
    if values.dtype != object:
        return np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, dtype=bool)
    # `values == None` compares elementwise on object arrays; NaN is the one value != itself.
    try:
        return np.asarray((values == None) | (values != values), dtype=bool)  # noqa: E711
    except TypeError:  # pandas' NA refuses to be a bool: a missing level of a DataFrame too
        return _missing(values).astype(bool)


def _is_missing(value: Any) -> bool:
    if value is None or type(value).__name__ == "NAType":
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):
        return False


_missing = np.frompyfunc(_is_missing, 1, 1)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))


def same_label(value: Any, pad: Any) -> bool:
    """``value == pad`` without cross-type matches (``0 == False``, ``1 == 1.0`` vs ``"1"``)."""
    if isinstance(pad, str):
        return isinstance(value, str) and value == pad
    if _is_number(pad):
        return _is_number(value) and value == pad
    return type(value) is type(pad) and value == pad


_same_label = np.frompyfunc(same_label, 2, 1)


def pad_mask(values: np.ndarray, pad: Any) -> np.ndarray:
    """True where a host array of labels holds the pad label (or None / NaN)."""
    mask = _is_none_or_nan(values)
    if pad is not None:
        if values.dtype == object:
            mask |= _same_label(values, pad).astype(bool)
        elif values.dtype.kind in "iuf" and isinstance(pad, (int, float, np.number)) and not isinstance(pad, bool):
            mask |= values == pad
        elif values.dtype.kind == "U" and isinstance(pad, str):
            mask |= values == pad
    return mask


def as_host_labels(y: Any, pad: Any = None) -> np.ndarray:
    """``y`` as a host NumPy array of labels: 1-D labels or 2-D label paths.

    Ragged lists of paths are right-padded with ``pad``. Strings become object arrays, so
    they compare and hash like the tree's labels.
    """
    if is_device_array(y):
        return to_numpy(y)
    ragged = _ragged_rows(y, pad)
    if ragged is not None:
        return ragged
    try:
        values = list_of_labels(y) if isinstance(y, (list, tuple)) else np.asarray(y)
    except ValueError as exc:  # NumPy refuses nested sequences of different lengths
        raise ValueError(_inhomogeneous(y, "y", exc)) from None
    if values.dtype.kind in "US":
        values = values.astype(object)
    if values.ndim == 1 and values.dtype == object and values.size \
            and all(isinstance(v, (list, tuple, np.ndarray)) for v in values.tolist()):
        # A pandas Series of paths (lists), or the path labels (tuples) of a tree whose names
        # repeat: one path per row, read as a list of lists.
        return as_host_labels([list(v) for v in values.tolist()], pad)
    return values


def list_of_labels(y: list | tuple) -> np.ndarray:
    """A list of labels (or of label paths) as an array in which every label keeps its type.

    NumPy makes every entry of a list mixing strings and numbers a string (``[1, "a"]`` ->
    ``["1", "a"]``), so such a list is read as objects instead.
    """
    values = np.asarray(y)
    if values.dtype.kind == "U" and _holds_non_strings(y):
        return np.asarray(y, dtype=object)
    return values


def _holds_non_strings(y: list | tuple) -> bool:
    """Whether a list of labels (or of label paths) holds an entry that is not a string."""
    level: Any = y
    while True:  # one nesting level at a time; the types of a level are gathered in C
        types = set(map(type, level))
        if not all(issubclass(t, (str, list, tuple, np.ndarray)) for t in types):
            return True
        if all(issubclass(t, str) for t in types):
            return False
        level = list(chain.from_iterable(np.atleast_1d(v).tolist() if isinstance(v, np.ndarray) else v
                                         for v in level if not isinstance(v, str)))


def refuse_mixed_label_types(values: np.ndarray, name: str = "y") -> None:
    """A ``ValueError`` when 1-D labels mix strings and numbers (missing labels aside).

    A flat tree learnt from 1-D labels sorts its classes (``classes_``, as scikit-learn's
    classifiers do), and strings and numbers have no order; scikit-learn refuses the mix too.
    A tree given with such labels needs no order, so the classifiers take the mix there.
    """
    if values.dtype != object or values.ndim != 1:
        return
    present = values[~_is_none_or_nan(values)].tolist()
    string = next((v for v in present if isinstance(v, str)), None)
    other = next((v for v in present if not isinstance(v, str)), None)
    if string is not None and other is not None:
        raise ValueError(
            f"{name} mixes string and non-string labels (e.g. {string!r} and {other!r}), so the classes "
            "learnt from it cannot be sorted; give every label one type (e.g. all strings), or pass "
            "tree=Tree(...) holding these labels"
        )


def _inhomogeneous(y: Any, name: str, exc: ValueError) -> str:
    """Why NumPy could not make ``y`` an array, naming the first row that differs in kind."""
    rows = list(y) if isinstance(y, (list, tuple)) else []
    nested = [isinstance(v, (list, tuple, np.ndarray)) for v in rows]
    if rows and any(nested) and not all(nested):
        row = nested.index(not nested[0])
        return (f"{name} mixes plain labels and label paths: row 0 is {rows[0]!r} but row {row} is "
                f"{rows[row]!r}; give one label per row, or one path (a list) per row")
    return (f"{name} cannot be made into an array ({exc}); pass 1-D labels, or paths as a list of lists "
            "or a 2-D array right-padded with pad_label")


def split_path_strings(values: np.ndarray, sep: str, pad: Any) -> np.ndarray:
    """1-D path strings split on ``sep``: a 2-D object array of names, right-padded with ``pad``."""
    rows = values.tolist()
    bad = [i for i, v in enumerate(rows) if not isinstance(v, str)]
    if bad:
        raise ValueError(
            f"path_sep={sep!r} reads each label as a path string, but the labels of rows "
            f"{describe_some(bad)} are not strings: {describe_some([rows[i] for i in bad[:5]])}"
        )
    parts = [v.split(sep) for v in rows]
    width = max((len(p) for p in parts), default=1)
    out = np.empty((len(parts), width), dtype=object)
    out[:] = pad
    for i, p in enumerate(parts):
        out[i, : len(p)] = p
    return out


def path_strings(tree: Tree, sep: str) -> np.ndarray:
    """The path string of every node of ``tree`` (its names joined with ``sep``), an object
    array made once per tree and separator."""
    def build() -> np.ndarray:
        names = tree.names
        out = np.empty(tree.n_classes, dtype=object)
        for node, path in enumerate(tree.paths):
            out[node] = sep.join(names[path[path >= 0]].tolist())
        return out

    return tree.cached((__name__, "path_strings", sep), build)


def read_path_strings(values: np.ndarray, tree: Tree, sep: str | None, pad: Any) -> np.ndarray:
    """1-D path strings (with ``sep``) as 2-D paths of names; other ``values`` as they are.

    Where the tree's labels are its path strings (learnt with ``sep``, or built by
    ``Tree.from_paths(..., sep=sep)``), a path string is a label and stays one: one look-up.
    """
    if sep is None or values.ndim != 1:
        return values
    labels_are_paths = tree.cached(
        (__name__, "labels_are_path_strings", sep),
        lambda: tree.labels.dtype == object and tree.labels.tolist() == path_strings(tree, sep).tolist(),
    )
    return values if labels_are_paths else split_path_strings(values, sep, pad)


def check_names_free_of_sep(tree: Tree, sep: str) -> None:
    """A ``ValueError`` naming a name of ``tree`` that holds the path separator ``sep``.

    A path string is split on ``sep`` into names, so a name holding it would be read as two
    levels and never found. A tree learnt with ``sep`` cannot have one (its names are the
    parts of the split); a tree given with ``path_sep`` is checked here.
    """
    holding = [v for v in tree.names.tolist() if isinstance(v, str) and sep in v]
    if holding:
        node = tree.names.tolist().index(holding[0])
        raise ValueError(
            f"path_sep={sep!r} splits each label into names, but the tree's name {holding[0]!r} (node {node}"
            f"{'' if len(holding) == 1 else f'; {len(holding)} names in all'}) holds it, so no path string "
            "could name that class; choose a separator that no name holds, or leave path_sep=None to give "
            "the labels themselves"
        )


def check_pad_not_a_label(tree: Tree, pad: Any) -> None:
    if pad is None:
        return
    for labels, what in ((tree.labels, "a label"), (tree.names, "a name")) if tree.has_names else ((tree.labels, "a label"),):
        if labels.dtype == object:
            clash = bool(_same_label(labels, pad).astype(bool).any())
        else:
            clash = isinstance(pad, (int, np.integer)) and not isinstance(pad, bool) and bool((labels == pad).any())
        if clash:
            raise ValueError(f"pad_label {pad!r} is {what} of the tree; choose a pad_label that is not a class")


def child_index(tree: Tree) -> dict:
    """``{(parent id, name): node id}`` of every node (``-1``: the top level), built once per tree."""
    return tree.cached(
        (__name__, "child_index"),
        lambda: {key: node for node, key in enumerate(zip(tree.parents.tolist(), tree.names.tolist()))},
    )


def walk_known_prefix(values: np.ndarray, mask: np.ndarray, tree: Tree, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Each row of names walked down the tree as far as the tree has its classes.

    One dictionary look-up of (parent, name) per level and row, so a name repeated under
    different parents finds the class under the row's own parent.

    Parameters
    ----------
    values : ndarray of shape (n, width)
        Names from the top level down, right-padded (``mask`` marks the pads; contiguous).
    mask : ndarray of bool of shape (n, width)
    tree : Tree
    what : str
        How errors name ``values``.

    Returns
    -------
    paths : ndarray of int64 of shape (n, width)
        The node ids of each row's known prefix, ``-1`` after it.
    failed : ndarray of int64 of shape (n,)
        The level of the first name the tree lacks under the row's parent; ``-1`` where the
        whole row is known.
    """
    n, width = values.shape
    index = child_index(tree)
    paths = np.full((n, width), PAD, dtype=np.int64)
    last = np.full(n, PAD, dtype=np.int64)
    failed = np.full(n, -1, dtype=np.int64)
    for level in range(width):
        live = np.flatnonzero(~mask[:, level] & (failed < 0))
        if not live.size:
            continue
        keys = zip(last[live].tolist(), values[live, level].tolist())
        try:
            found = np.fromiter(map(index.get, keys, repeat(-2)), dtype=np.int64, count=live.size)
        except TypeError as exc:  # an unhashable entry (a list in a cell)
            raise TypeError(f"{what} hold values that cannot be labels: {exc}") from None
        failed[live[found < 0]] = level
        ok = found >= 0
        paths[live[ok], level] = found[ok]
        last[live[ok]] = found[ok]
    return paths, failed


def name_paths_to_last(values: np.ndarray, mask: np.ndarray, tree: Tree, what: str) -> np.ndarray:
    """Node id (int64) of the last node of each path of names of a tree with ``names``.

    ``values`` is 2-D, one path per row from the top level down, right-padded (``mask`` marks
    the pads, contiguous); a row all pads gives ``-1``. Each row is walked down the tree, one
    dictionary look-up of (parent, name) per level, so a name repeated under different
    parents finds the class under the row's own parent. An unknown name is an
    :class:`UnknownLabelError`, a known name under another parent a ``ValueError``.
    """
    n, width = values.shape
    paths, failed = walk_known_prefix(values[:, :min(width, tree.n_levels)], mask, tree, what)
    depth = (paths >= 0).sum(axis=1)
    last = np.where(depth > 0, paths[np.arange(n), np.maximum(depth - 1, 0)], PAD)
    bad = np.flatnonzero(failed >= 0)
    if bad.size:
        names = tree.cached((__name__, "name_set"), lambda: set(tree.names.tolist()))
        unknown = [values[r, failed[r]] for r in bad.tolist() if values[r, failed[r]] not in names]
        if unknown:
            raise UnknownLabelError.of(unknown, what)
        row = int(bad[0])
        level = int(failed[row])
        shown = [v for v, m in zip(values[row].tolist(), mask[row].tolist()) if not m]
        under = "the top level" if level == 0 else " > ".join(map(str, shown[:level]))
        raise ValueError(
            f"{what}: {bad.size} path(s) are not ancestral paths of the tree (rows {describe_some(bad.tolist())}); "
            f"row {row} is {shown!r}, but there is no {shown[level]!r} under {under}"
        )
    return last


def label_paths_to_ids(values: np.ndarray, tree: Tree, pad: Any) -> np.ndarray:
    """Node id (int64) of the last node of each host label path, checking each path.

    ``values`` is 2-D, one path per row from the top level down, right-padded with ``pad``.
    A row must be a prefix of an ancestral path of the tree: no gaps, no unknown labels,
    each label a child of the one before.
    """
    n, width = values.shape
    mask = pad_mask(values, pad)
    if width > tree.n_levels:
        deep = np.flatnonzero((~mask[:, tree.n_levels:]).any(axis=1))
        if deep.size:
            raise ValueError(
                f"label paths have {width} columns but the tree has {tree.n_levels} levels: rows "
                f"{describe_some(deep.tolist())} go deeper than the tree"
            )
        values, mask, width = values[:, : tree.n_levels], mask[:, : tree.n_levels], tree.n_levels
    if width == 0:
        raise ValueError("label paths have 0 columns: each row needs at least a top-level label")
    empty = np.flatnonzero(mask[:, 0])
    if empty.size:
        raise ValueError(
            f"label paths of rows {describe_some(empty.tolist())} are empty (start with the pad label {pad!r})"
        )
    gaps = np.flatnonzero((mask[:, :-1] & ~mask[:, 1:]).any(axis=1))
    if gaps.size:
        raise ValueError(
            f"label paths of rows {describe_some(gaps.tolist())} have a pad label {pad!r} before a label; "
            "paths must be right-padded"
        )
    if tree.has_names:  # names repeat under different parents: walk each row down the tree
        return name_paths_to_last(values, mask, tree, "label paths")
    ids = np.full((n, width), PAD, dtype=np.int64)
    ids[~mask] = tree.to_ids(values[~mask])
    depth = (~mask).sum(axis=1) - 1
    last = ids[np.arange(n), depth]
    expected = tree.paths[last, :width]
    wrong = np.flatnonzero((expected != ids).any(axis=1))
    if wrong.size:
        row = int(wrong[0])
        shown = [v for v, m in zip(values[row].tolist(), mask[row].tolist()) if not m]
        raise ValueError(
            f"{wrong.size} label path(s) are not ancestral paths of the tree (rows "
            f"{describe_some(wrong.tolist())}); row {row} is {shown!r}, but the path of "
            f"{shown[-1]!r} is {tree.to_labels(tree.paths[last[row]][tree.paths[last[row]] >= 0]).tolist()!r}"
        )
    return last


def labels_to_ids(y: Any, tree: Tree, pad: Any) -> np.ndarray:
    """Node ids (int64, 1-D) of host labels at any depth or of host label paths."""
    values = as_host_labels(y, pad)
    if values.ndim == 1:
        return tree.to_ids(values).astype(np.int64, copy=False)
    if values.ndim == 2:
        return label_paths_to_ids(values, tree, pad)
    raise ValueError(
        f"y must be 1-D (labels) or 2-D (label paths), got an array of shape {values.shape}"
    )


#: Separators that make labels look like path strings, most specific first.
PATH_SEPARATORS = (" > ", " >> ", " / ", " | ", ">", "/", "|", "::", "\\")


def guess_path_sep(labels: Any) -> str | None:
    """The separator that more than half of the distinct string labels (at least two) hold,
    the most specific first; ``None`` when the labels do not look like path strings."""
    distinct = list(dict.fromkeys(v for v in np.asarray(labels, dtype=object).reshape(-1).tolist()
                                  if isinstance(v, str)))[:10_000]
    if len(distinct) < 2:
        return None
    for sep in PATH_SEPARATORS:
        holding = sum(sep in v for v in distinct)
        if holding >= 2 and 2 * holding > len(distinct):
            return sep
    return None


def _flat_path_hint(labels: Any) -> str:
    """A sentence naming ``path_sep`` when the labels look like path strings, else ``""``."""
    sep = guess_path_sep(labels)
    if sep is None:
        return ""
    example = next(v for v in np.asarray(labels, dtype=object).reshape(-1).tolist() if isinstance(v, str) and sep in v)
    return (f"the labels look like paths separated by {sep!r} (e.g. {example!r}): pass path_sep={sep!r} "
            "to learn the hierarchy from them")


def learn_tree(y: Any, pad: Any = None, allow_flat: bool = False, sep: str | None = None) -> tuple[Tree, Any]:
    """A tree from path-shaped ``y`` (or, with ``allow_flat``, a flat tree from 1-D labels).

    With ``sep``, 1-D ``y`` holds path strings, split on ``sep``, and the classes' labels are
    their path strings. 1-D string labels that look like path strings while ``sep`` is None
    give a flat tree with a ``UserWarning`` naming ``path_sep``. Returns the tree and the pad
    label in force for ``y``.
    """
    if sep is not None and (not isinstance(sep, str) or not sep):
        raise ValueError(f"path_sep must be a non-empty string or None, got {sep!r}")
    values = as_host_labels(y, pad)
    if pad is None:
        non_missing = values[~_is_none_or_nan(values)] if values.size else values
        pad = default_pad_label(non_missing)
    if values.ndim == 1 and sep is not None:
        rows = values.tolist()
        bad = [i for i, v in enumerate(rows) if not isinstance(v, str)]
        if bad:
            split_path_strings(values, sep, pad)  # raises, naming the rows
        return _paths_tree(list(dict.fromkeys(rows)), sep), pad
    if values.ndim == 2:
        mask = pad_mask(values, pad)
        rows = [[v for v, m in zip(row, row_mask) if not m] for row, row_mask in zip(values.tolist(), mask.tolist())]
        empty = [i for i, row in enumerate(rows) if not row]
        if empty:
            raise ValueError(f"label paths of rows {describe_some(empty)} are empty; cannot learn a tree from them")
        try:  # each distinct path once, in order of first appearance: the same node ids
            distinct = list(dict.fromkeys(map(tuple, rows)))
        except TypeError:  # an unhashable entry: from_paths names it
            distinct = rows
        return _paths_tree(distinct, sep), pad
    if values.ndim == 1 and allow_flat:
        refuse_mixed_label_types(values)
        classes = np.unique(values)
        hint = _flat_path_hint(classes) if classes.dtype == object else ""
        if hint:
            warnings.warn(f"the tree learnt from 1-D y is flat (every label a top-level class), but {hint}",
                          UserWarning, stacklevel=4)
        return Tree.from_parents(np.full(classes.size, PAD, dtype=np.int64), labels=classes.tolist()), pad
    hint = _flat_path_hint(values) if values.ndim == 1 else ""
    raise ValueError(
        "tree=None: the tree can only be learnt from label paths, a 2-D y with one path per row "
        f"(from the top level down, right-padded); got y of shape {values.shape}. "
        + (f"But {hint}" if hint else "Pass tree=Tree(...)")
    )


def _paths_tree(paths: list, sep: str | None) -> Tree:
    """``Tree.from_paths`` of the distinct paths of ``y``; its errors say they are about ``y``."""
    try:
        return Tree.from_paths(paths, sep=sep)
    except TreeError as exc:  # its "path i" counts distinct paths, not rows of y
        raise TreeError(f"cannot learn the tree from y: {re.sub(r'^path [0-9]+ ', 'a path ', str(exc))}") from None


def device_label_ids(values: Any, tree: Tree) -> Any:
    """Node ids of integer labels held in a torch/CuPy array, on its device."""
    xp = array_namespace(values)
    if not xp.isdtype(values.dtype, "integral"):
        raise TypeError(
            f"labels in a {type(values).__module__.split('.')[0]} array must be integers, got dtype {values.dtype}; "
            "string labels live on the host: pass a NumPy array or a list"
        )
    if tree.labels.dtype == object:
        raise TypeError("the tree's labels are not integers, so device arrays of labels cannot be mapped on the device")
    flat = xp.reshape(xp.astype(values, xp.int64), (-1,))
    if tree.has_default_labels:
        ids = flat
        found = (ids >= 0) & (ids < tree.n_classes)
    else:
        def build() -> tuple[Any, Any]:
            order = np.argsort(tree.labels, kind="stable").astype(np.int64)
            return (
                xp.asarray(np.ascontiguousarray(tree.labels[order]), device=device(values)),
                xp.asarray(order, device=device(values)),
            )

        sorted_labels, order = tree.cached((__name__, "sorted_labels", xp.__name__, str(device(values))), build)
        pos = xp.clip(xp.searchsorted(sorted_labels, flat), 0, tree.n_classes - 1)
        found = xp.take(sorted_labels, pos, axis=0) == flat
        ids = xp.take(order, pos, axis=0)
    if flat.shape[0] and not bool(xp.all(found)):
        raise UnknownLabelError.of(to_numpy(flat[~found]).tolist())
    return xp.reshape(ids, values.shape)


def device_paths_to_last(ids: Any, tree: Tree, what: str) -> Any:
    """Last node id of each id path (n, w) padded with -1, checked, on the array's device."""
    xp = array_namespace(ids)
    n, width = ids.shape
    if n and width and (int(xp.min(ids)) < PAD or int(xp.max(ids)) >= tree.n_classes):
        bad = to_numpy((ids < PAD) | (ids >= tree.n_classes))
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise IndexError(
            f"{what}: row {row}, column {col} holds {int(ids[row, col])}, which is not a node id of the tree "
            f"(node ids are in [0, {tree.n_classes}); {PAD} pads a path); {int(bad.sum())} entr"
            f"{'y is' if int(bad.sum()) == 1 else 'ies are'} out of range"
        )
    if width > tree.n_levels:
        if bool(xp.any(ids[:, tree.n_levels:] != PAD)):
            raise ValueError(f"{what} have {width} columns but the tree has {tree.n_levels} levels")
        ids = ids[:, : tree.n_levels]
        width = tree.n_levels
    real = ids != PAD
    if n and not bool(xp.all(real[:, 0])):
        raise ValueError(f"{what} must start with a top-level node; some rows are all padding")
    if width > 1 and bool(xp.any(~real[:, :-1] & real[:, 1:])):
        raise ValueError(f"{what} must be right-padded with -1; some rows have a node after a pad")
    depth = xp.sum(xp.astype(real, xp.int64), axis=1) - 1
    last = xp.reshape(xp.take_along_axis(ids, xp.reshape(depth, (-1, 1)), axis=1), (-1,))
    expected = labels_to_paths(last, tree, check=False)[:, :width]
    if n and not bool(xp.all(expected == ids)):
        bad = to_numpy(xp.any(expected != ids, axis=1))
        raise ValueError(
            f"{what} of rows {describe_some(np.flatnonzero(bad).tolist())} are not ancestral paths of the tree"
        )
    return last


def host_labels_or_paths(y: Any, name: str, pad: Any = None) -> np.ndarray:
    """``y`` as a host array, 1-D (labels or ids) or 2-D (paths); a ragged list of paths is
    right-padded with ``pad`` (``None`` where no pad is named, which always reads as a pad)."""
    if y is None:
        raise ValueError(f"{name} is None; expected labels, node ids or padded paths")
    ragged = _ragged_rows(y, pad)
    if ragged is not None:
        return ragged
    try:
        arr = list_of_labels(y) if isinstance(y, (list, tuple)) else to_numpy(y)
    except ValueError as exc:  # NumPy refuses ragged nested sequences
        raise ValueError(_inhomogeneous(y, name, exc)) from exc
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise TypeError(f"{name} of type {type(y).__name__} cannot be converted to a NumPy array") from exc
    if arr.ndim == 0:
        raise ValueError(f"{name} must be 1-D (labels or node ids) or 2-D (padded paths), got a scalar {arr!r}")
    if arr.ndim > 2:
        raise ValueError(f"{name} must be 1-D (labels or node ids) or 2-D (padded paths), got shape {arr.shape}")
    return arr


class LabelIndex:
    """Label -> node id lookups for one call: a dict for hashable labels, built once.

    ``Tree.to_ids`` is used for integer labels (a vectorised binary search); other labels
    go through one C-level ``map`` over a dict, far faster per element than a generator.
    """

    def __init__(self, tree: Any):
        self.tree = tree
        self._index: dict | None = None

    @property
    def index(self) -> dict:
        if self._index is None:
            self._index = dict(zip(self.tree.labels.tolist(), range(self.tree.n_classes)))
        return self._index

    def __contains__(self, value: Any) -> bool:
        try:
            return value in self.index
        except TypeError:
            return False

    def ids(self, values: np.ndarray, name: str) -> np.ndarray:
        values = values.reshape(-1)
        if self.tree.labels.dtype.kind in "iu" and values.dtype.kind in "iu":
            try:
                return np.asarray(self.tree.to_ids(values), dtype=np.int64)
            except (KeyError, ValueError) as exc:
                msg = str(exc.args[0]) if exc.args else str(exc)
                raise UnknownLabelError(f"{name}: {msg}") from exc
        items = values.tolist()
        try:
            ids = np.fromiter(map(self.index.get, items, repeat(-1)), dtype=np.int64, count=len(items))
        except TypeError as exc:  # unhashable entries
            raise TypeError(f"{name} holds values that cannot be labels: {exc}") from exc
        missing = ids < 0
        if missing.any() and self.tree.has_names:  # a name that only one class has finds it
            ids[missing] = self.tree._ids_of_names(values[missing])
            missing = ids < 0
        if missing.any():
            raise UnknownLabelError.of(values[missing].tolist(), name)
        return ids


def metric_pad_mask(values: np.ndarray, pad_label: Any, labels: LabelIndex | None) -> np.ndarray:
    """True where ``values`` holds a pad, as the metrics read paths.

    A named ``pad_label`` matches values of its own kind only. With ``pad_label=None`` the
    candidates are the classifier's defaults (``""`` for strings, ``-1`` for integers), ``None``
    and NaN, minus any candidate that is a label of the tree (then the user must name the pad).
    """
    kind = values.dtype.kind
    if pad_label is not None:
        if kind in "iufb" and not isinstance(pad_label, numbers.Number):
            return np.zeros(values.shape, dtype=bool)
        if kind in "US" and not isinstance(pad_label, (str, bytes)):
            return np.zeros(values.shape, dtype=bool)
        if isinstance(pad_label, float) and np.isnan(pad_label):
            return values != values if kind in "fO" else np.zeros(values.shape, dtype=bool)
        return np.asarray(values == pad_label, dtype=bool).reshape(values.shape)
    # Automatic pads: the classifier's defaults ("" for strings, -1 for ints), None and NaN,
    # minus any candidate that is a label of the tree (then the user must name the pad).
    if kind in "iu":
        candidates: list[Any] = [-1]
    elif kind == "f":
        candidates = [-1, float("nan")]
    elif kind in "US":
        candidates = ["" if kind == "U" else b""]
    elif kind == "O":
        candidates = [None, "", -1, float("nan")]
        if labels is not None:
            # Each candidate is a pass over an object array: try only those of the label type.
            label_kind = labels.tree.labels.dtype.kind
            # NaN too: PathEncoder and pandas pad ragged object paths with it.
            candidates = [None, -1, float("nan")] if label_kind in "iu" else [None, "", float("nan")]
    else:
        return np.zeros(values.shape, dtype=bool)
    if labels is not None:
        candidates = [c for c in candidates if c is None or (isinstance(c, float) and np.isnan(c)) or c not in labels]
    mask = np.zeros(values.shape, dtype=bool)
    for cand in candidates:
        if cand is None:
            mask |= np.asarray(values == None, dtype=bool).reshape(values.shape)  # noqa: E711 (elementwise)
        elif isinstance(cand, float):
            mask |= values != values
        else:
            mask |= np.asarray(values == cand, dtype=bool).reshape(values.shape)
    return mask


def id_pad_mask(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.dtype.kind in "iu":
        return arr < 0
    if arr.dtype.kind == "f":
        return (arr < 0) | np.isnan(arr)
    raise TypeError(f"{name} holds node ids but has dtype {arr.dtype}; node ids are integers")
