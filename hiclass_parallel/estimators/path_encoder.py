"""Labels at any depth <-> ancestral paths of node ids: :class:`PathEncoder`.

The encoder is the paper's label mapping (eq. y_tree) as a scikit-learn transformer of
targets, like :class:`sklearn.preprocessing.LabelEncoder`: ``fit(y)``, ``transform(y)``,
``inverse_transform(paths)``. Integer labels held in torch or CuPy arrays are mapped on their
own device with one gather; labels of other kinds (strings) are mapped on the host.

``y`` is read by :mod:`hiclass_parallel.labels._paths`, as in the classifier and the metrics: a 1-D
array of labels at any depth, or a 2-D array (or ragged list of lists) of label paths from the
top level down, right-padded with a pad label.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils.validation import check_is_fitted

from .._backend import array_namespace, device, to_numpy
from ..labels._paths import (
    check_pad_not_a_label,
    default_pad_label,
    device_label_ids,
    as_host_labels,
    check_names_free_of_sep,
    device_paths_to_last,
    is_device_array,
    labels_to_ids,
    learn_tree,
    read_path_strings,
)
from ..ops.dense import labels_to_paths
from ..tree import PAD, Tree

__all__ = ["PathEncoder"]


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
        array, a list of lists of labels or a DataFrame of levels, one path per row, from the
        top level down) or, with ``path_sep``, from path strings. A name repeated under
        different parents is two classes, labelled by their paths of names (tuples), as in
        :meth:`Tree.from_paths <hiclass_parallel.Tree.from_paths>`.
    pad_label : hashable, default=None
        The label that pads label paths given to :meth:`fit` / :meth:`transform`.
        ``None`` means ``-1`` for integer labels and ``""`` for string labels. ``None``
        and NaN entries always count as padding.
    path_sep : str, default=None
        The separator of path strings: with it, 1-D ``y`` holds paths such as
        ``"Electronics/Accessories"`` (split on it exactly), and a tree learnt from them labels
        each class by its path string, which :meth:`inverse_transform` returns.

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

    Path strings with ``path_sep``, a name repeated under two parents:

    >>> encoder = PathEncoder(path_sep="/").fit(["Electronics/Other", "Clothing/Other"])
    >>> encoder.transform(["Clothing/Other"])
    array([[2, 3]])
    >>> encoder.inverse_transform([[2, 3]]).tolist()
    ['Clothing/Other']

    Integer labels in a torch tensor are mapped on the tensor's device:

    >>> import torch
    >>> PathEncoder(Tree.from_parents([-1, 0, 1])).fit_transform(torch.tensor([2, 0]))
    tensor([[ 0,  1,  2],
            [ 0, -1, -1]])
    """

    _parameter_constraints: dict = {"tree": [Tree, None], "pad_label": "no_validation", "path_sep": [str, None]}

    def __init__(self, tree: Tree | None = None, pad_label: Hashable | None = None, path_sep: str | None = None):
        self.tree = tree
        self.pad_label = pad_label
        self.path_sep = path_sep

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
            if is_device_array(y):
                y = to_numpy(y)
            self.tree_, self.pad_label_ = learn_tree(y, self.pad_label, sep=self.path_sep)
            if self.pad_label is None:
                self.pad_label_ = default_pad_label(self.tree_.names)
        else:
            if self.path_sep is not None:
                check_names_free_of_sep(self.tree, self.path_sep)
            self.tree_ = self.tree
            self.pad_label_ = default_pad_label(self.tree.names) if self.pad_label is None else self.pad_label
        check_pad_not_a_label(self.tree_, self.pad_label_)
        self.classes_ = self.tree_.labels
        self.n_levels_ = self.tree_.n_levels
        self._ids(y)  # unknown labels and broken paths raise here, naming them
        return self

    def _ids(self, y: Any) -> Any:
        """Node ids (1-D) of labels or label paths; device arrays stay on their device."""
        if is_device_array(y):
            if y.ndim == 1:
                return device_label_ids(y, self.tree_)
            if y.ndim == 2:
                xp = array_namespace(y)
                pad = self.pad_label_ if isinstance(self.pad_label_, (int, np.integer)) else PAD
                real = y != pad
                ids = device_label_ids(xp.where(real, y, xp.zeros_like(y) + int(self.tree_.labels[0])), self.tree_)
                ids = xp.where(real, ids, xp.full_like(ids, PAD))
                return device_paths_to_last(ids, self.tree_, "label paths")
            raise ValueError(f"y must be 1-D (labels) or 2-D (label paths), got shape {tuple(y.shape)}")
        values = read_path_strings(as_host_labels(y, self.pad_label_), self.tree_, self.path_sep, self.pad_label_)
        return labels_to_ids(values, self.tree_, self.pad_label_)

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
        if not is_device_array(ids):
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
        if is_device_array(paths):
            xp = array_namespace(paths)
            if paths.ndim != 2 or not xp.isdtype(paths.dtype, "integral"):
                raise ValueError(
                    f"paths must be a 2-D integer array, got shape {tuple(paths.shape)} and dtype {paths.dtype}"
                )
            last = device_paths_to_last(xp.astype(paths, xp.int64), self.tree_, "paths")
            if self.tree_.has_default_labels:
                return last
            if self.tree_.labels.dtype != object:
                tree = self.tree_
                labels = tree.cached(
                    (__name__, "labels", xp.__name__, str(device(paths))),
                    lambda: xp.asarray(np.ascontiguousarray(tree.labels), device=device(paths)),
                )
                return xp.take(labels, last, axis=0)
            return self.tree_.labels[to_numpy(last)]
        ids = np.asarray(paths)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"paths must be a 2-D integer array, got shape {ids.shape} and dtype {ids.dtype}")
        last = device_paths_to_last(ids.astype(np.int64, copy=False), self.tree_, "paths")
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
