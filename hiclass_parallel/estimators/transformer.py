"""Labels at any depth <-> ancestral paths of node ids: :class:`PathEncoder`.

The encoder is the paper's label mapping (eq. y_tree) as a scikit-learn transformer of
targets, like :class:`sklearn.preprocessing.LabelEncoder`: ``fit(y)``, ``transform(y)``,
``inverse_transform(paths)``. Integer labels held in torch or CuPy arrays are mapped on their
own device with one gather; labels of other kinds (strings) are mapped on the host.

The private helpers below are shared with the classifier, so both read ``y`` the same way:
a 1-D array of labels at any depth, or a 2-D array (or list of lists) of label paths from the
top level down, right-padded with a pad label.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils.validation import check_is_fitted

from .._backend import array_namespace, device, is_cupy_array, is_torch_array, to_numpy
from ..exceptions import UnknownLabelError, describe_some
from ..ops.paper import labels_to_paths
from ..tree import PAD, Tree

__all__ = ["PathEncoder"]


# ---------------------------------------------------------------------------- label helpers
def _is_device_array(y: Any) -> bool:
    return is_torch_array(y) or is_cupy_array(y)


def default_pad_label(labels: np.ndarray) -> Any:
    """The documented pad: ``-1`` for integer labels, ``""`` for strings, else ``None``."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu":
        return -1
    if labels.dtype.kind == "U" or (labels.dtype == object and all(isinstance(v, str) for v in labels.reshape(-1))):
        return ""
    return None


def _is_none_or_nan(values: np.ndarray) -> np.ndarray:
    if values.dtype != object:
        return np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, dtype=bool)
    # `values == None` compares elementwise on object arrays; NaN is the one value != itself.
    return (values == None) | (values != values)  # noqa: E711


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
    if _is_device_array(y):
        return to_numpy(y)
    if isinstance(y, (list, tuple)) and y and all(isinstance(row, (list, tuple, np.ndarray)) for row in y):
        lengths = {len(row) for row in y}
        if len(lengths) > 1:
            width = max(lengths)
            out = np.empty((len(y), width), dtype=object)
            out[:] = pad
            for i, row in enumerate(y):
                out[i, : len(row)] = list(row)
            return out
    values = np.asarray(y)
    if values.dtype.kind in "US":
        values = values.astype(object)
    return values


def _check_pad_not_a_label(tree: Tree, pad: Any) -> None:
    if pad is None:
        return
    labels = tree.labels
    if labels.dtype == object:
        clash = bool(_same_label(labels, pad).astype(bool).any())
    else:
        clash = isinstance(pad, (int, np.integer)) and not isinstance(pad, bool) and bool((labels == pad).any())
    if clash:
        raise ValueError(f"pad_label {pad!r} is a label of the tree; choose a pad_label that is not a class")


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


def learn_tree(y: Any, pad: Any = None, allow_flat: bool = False) -> tuple[Tree, Any]:
    """A tree from path-shaped ``y`` (or, with ``allow_flat``, a flat tree from 1-D labels).

    Returns the tree and the pad label in force for ``y``.
    """
    values = as_host_labels(y, pad)
    if pad is None:
        non_missing = values[~_is_none_or_nan(values)] if values.size else values
        pad = default_pad_label(non_missing)
    if values.ndim == 2:
        mask = pad_mask(values, pad)
        rows = [[v for v, m in zip(row, row_mask) if not m] for row, row_mask in zip(values.tolist(), mask.tolist())]
        empty = [i for i, row in enumerate(rows) if not row]
        if empty:
            raise ValueError(f"label paths of rows {describe_some(empty)} are empty; cannot learn a tree from them")
        return Tree.from_paths(rows), pad
    if values.ndim == 1 and allow_flat:
        classes = np.unique(values)
        return Tree.from_parents(np.full(classes.size, PAD, dtype=np.int64), labels=classes.tolist()), pad
    raise ValueError(
        "tree=None: the tree can only be learnt from label paths, a 2-D y with one path per row "
        f"(from the top level down, right-padded); got y of shape {values.shape}. Pass tree=Tree(...)"
    )


def _device_label_ids(values: Any, tree: Tree) -> Any:
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
        key = (xp.__name__, str(device(values)), "hiclass_parallel.sorted_labels")
        if key not in tree._device_cache:
            order = np.argsort(tree.labels, kind="stable").astype(np.int64)
            tree._device_cache[key] = (
                xp.asarray(np.ascontiguousarray(tree.labels[order]), device=device(values)),
                xp.asarray(order, device=device(values)),
            )
        sorted_labels, order = tree._device_cache[key]
        pos = xp.clip(xp.searchsorted(sorted_labels, flat), 0, tree.n_classes - 1)
        found = xp.take(sorted_labels, pos, axis=0) == flat
        ids = xp.take(order, pos, axis=0)
    if flat.shape[0] and not bool(xp.all(found)):
        unknown = list(dict.fromkeys(to_numpy(flat[~found]).tolist()))
        noun = "label is" if len(unknown) == 1 else "labels are"
        raise UnknownLabelError(f"{len(unknown)} {noun} not a class of the tree: {describe_some(unknown)}")
    return xp.reshape(ids, values.shape)


def _device_paths_to_last(ids: Any, tree: Tree, what: str) -> Any:
    """Last node id of each id path (n, w) padded with -1, checked, on the array's device."""
    xp = array_namespace(ids)
    n, width = ids.shape
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
    if n and (int(xp.min(last)) < 0 or int(xp.max(last)) >= tree.n_classes):
        raise IndexError(f"{what} hold node ids out of range [0, {tree.n_classes})")
    expected = labels_to_paths(last, tree, check=False)[:, :width]
    if n and not bool(xp.all(expected == ids)):
        bad = to_numpy(xp.any(expected != ids, axis=1))
        raise ValueError(
            f"{what} of rows {describe_some(np.flatnonzero(bad).tolist())} are not ancestral paths of the tree"
        )
    return last


# ---------------------------------------------------------------------------- the estimator
class PathEncoder(TransformerMixin, BaseEstimator):
    """Encode labels at any depth of a tree as ancestral paths of node ids (and back).

    A target transformer like :class:`~sklearn.preprocessing.LabelEncoder`: it works on
    ``y``, not on ``X``. Labels are mapped to node ids, then to their ancestral paths with
    the paper's gather (:func:`~hiclass_parallel.labels_to_paths`). Integer labels in a torch
    tensor or CuPy array stay on their device (CPU or GPU) throughout; string labels are
    mapped on the host.

    Parameters
    ----------
    tree : Tree, default=None
        The class tree. ``None`` learns it in :meth:`fit` from path-shaped ``y`` (a 2-D
        array or a list of lists of labels, one path per row, from the top level down).
    pad_label : hashable, default=None
        The label that pads label paths given to :meth:`fit` / :meth:`transform`.
        ``None`` means ``-1`` for integer labels and ``""`` for string labels. ``None``
        and NaN entries always count as padding.

    Attributes
    ----------
    tree_ : Tree
        The tree in use (``tree``, or the one learnt from ``y``).
    classes_ : ndarray of shape (n_classes,)
        The label of every node id.
    n_levels_ : int
        Width of the encoded paths.
    pad_label_ : hashable
        The pad label in force for label paths.

    See Also
    --------
    HierarchicalClassifier : uses the same reading of ``y``.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.estimators import PathEncoder
    >>> tree = Tree.from_dict({"animal": {"dog": ["puppy"], "cat": None}, "plant": None})
    >>> encoder = PathEncoder(tree).fit(["puppy", "cat"])
    >>> encoder.transform(["puppy", "cat", "plant"])
    array([[ 0,  1,  2],
           [ 0,  3, -1],
           [ 4, -1, -1]])
    >>> encoder.inverse_transform([[0, 3, -1], [0, 1, 2]]).tolist()
    ['cat', 'puppy']

    Label paths work too, and learn the tree when none is given:

    >>> encoder = PathEncoder().fit([["animal", "dog"], ["animal", "cat"], ["plant", ""]])
    >>> encoder.tree_.labels.tolist()
    ['animal', 'dog', 'cat', 'plant']
    >>> encoder.transform([["animal", "cat"]])
    array([[0, 2]])

    Integer labels in a torch tensor are mapped on the tensor's device:

    >>> import torch
    >>> PathEncoder(Tree.from_parents([-1, 0, 1])).fit_transform(torch.tensor([2, 0]))
    tensor([[ 0,  1,  2],
            [ 0, -1, -1]])
    """

    _parameter_constraints: dict = {"tree": [Tree, None], "pad_label": "no_validation"}

    def __init__(self, tree: Tree | None = None, pad_label: Hashable | None = None):
        self.tree = tree
        self.pad_label = pad_label

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, y: Any) -> PathEncoder:
        """Fit the encoder: check the labels of ``y`` (or learn the tree from its paths).

        Parameters
        ----------
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            Labels at any depth, or label paths (padded with ``pad_label``). NumPy, torch
            and CuPy arrays are accepted.

        Returns
        -------
        self : PathEncoder
        """
        if y is None:
            raise ValueError("PathEncoder.fit needs y: the labels (or label paths) to encode")
        if self.tree is None:
            if _is_device_array(y):
                y = to_numpy(y)
            self.tree_, self.pad_label_ = learn_tree(y, self.pad_label)
        else:
            self.tree_ = self.tree
            self.pad_label_ = default_pad_label(self.tree.labels) if self.pad_label is None else self.pad_label
        _check_pad_not_a_label(self.tree_, self.pad_label_)
        self.classes_ = self.tree_.labels
        self.n_levels_ = self.tree_.n_levels
        self._ids(y)  # unknown labels and broken paths raise here, naming them
        return self

    def _ids(self, y: Any) -> Any:
        """Node ids (1-D) of labels or label paths; device arrays stay on their device."""
        if _is_device_array(y):
            if y.ndim == 1:
                return _device_label_ids(y, self.tree_)
            if y.ndim == 2:
                xp = array_namespace(y)
                pad = self.pad_label_ if isinstance(self.pad_label_, (int, np.integer)) else PAD
                real = y != pad
                ids = _device_label_ids(xp.where(real, y, xp.zeros_like(y) + int(self.tree_.labels[0])), self.tree_)
                ids = xp.where(real, ids, xp.full_like(ids, PAD))
                return _device_paths_to_last(ids, self.tree_, "label paths")
            raise ValueError(f"y must be 1-D (labels) or 2-D (label paths), got shape {tuple(y.shape)}")
        return labels_to_ids(y, self.tree_, self.pad_label_)

    def transform(self, y: Any) -> Any:
        """Ancestral paths of node ids, right-padded with ``-1``.

        Parameters
        ----------
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            Labels at any depth, or label paths.

        Returns
        -------
        paths : ndarray or tensor of int64 of shape (n_samples, n_levels_)
            A NumPy array, or for a torch/CuPy input an array of that kind on its device.
        """
        check_is_fitted(self)
        ids = self._ids(y)
        if not _is_device_array(ids):
            ids = np.asarray(ids, dtype=np.int64)
        return labels_to_paths(ids, self.tree_, check=False)

    def fit_transform(self, y: Any) -> Any:
        """Fit, then transform ``y``; see :meth:`fit` and :meth:`transform`."""
        return self.fit(y).transform(y)

    def inverse_transform(self, paths: Any) -> Any:
        """Labels of the last node of each path.

        Parameters
        ----------
        paths : array-like of int of shape (n_samples, n_levels)
            Ancestral paths of node ids, right-padded with ``-1``; each must be a path of
            the tree.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            The tree's labels. For torch/CuPy input and integer labels, an array of that kind
            on its device; string labels come back as a NumPy object array.
        """
        check_is_fitted(self)
        if _is_device_array(paths):
            xp = array_namespace(paths)
            if paths.ndim != 2 or not xp.isdtype(paths.dtype, "integral"):
                raise ValueError(
                    f"paths must be a 2-D integer array, got shape {tuple(paths.shape)} and dtype {paths.dtype}"
                )
            last = _device_paths_to_last(xp.astype(paths, xp.int64), self.tree_, "paths")
            if self.tree_.has_default_labels:
                return last
            if self.tree_.labels.dtype != object:
                key = (xp.__name__, str(device(paths)), "hiclass_parallel.labels")
                if key not in self.tree_._device_cache:
                    labels = np.ascontiguousarray(self.tree_.labels)
                    self.tree_._device_cache[key] = xp.asarray(labels, device=device(paths))
                return xp.take(self.tree_._device_cache[key], last, axis=0)
            return self.tree_.labels[to_numpy(last)]
        ids = np.asarray(paths)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"paths must be a 2-D integer array, got shape {ids.shape} and dtype {ids.dtype}")
        last = _device_paths_to_last(ids.astype(np.int64, copy=False), self.tree_, "paths")
        return self.tree_.labels[last]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Like LabelEncoder: the input is y (labels or label paths), never a feature matrix.
        tags.input_tags.two_d_array = False
        tags.input_tags.one_d_array = True
        tags.input_tags.string = True
        tags.target_tags.one_d_labels = True
        tags.target_tags.required = False
        return tags
