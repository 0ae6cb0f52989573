"""Label encoders of the classifiers: ``y`` in, training targets and the loss that reads them out.

The classifier owns one fitted encoder (``targets_``), chosen by its class: :class:`PathTargets`
(one label at any depth of a tree, or a label path, per sample) for
:class:`HierarchicalClassifier`, :class:`LabelSetTargets` (label sets on a tree or a DAG) for
:class:`MultiLabelHierarchicalClassifier`. An encoder knows everything that depends on what a
label is: the tree the network scores, the pad label, the classes, how ``y`` becomes targets,
the dataset of (row, target) items, the criterion's tree (the criterion class and its options
are the configuration's), and which class row each score column reads
(for ``module__class_features``). The fit pipeline (``_fit.py``) only calls it; nothing else
sets fitted label state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length

from ...labels._paths import (
    as_host_labels,
    check_names_free_of_sep,
    check_pad_not_a_label,
    default_pad_label,
    labels_to_ids,
    learn_tree,
    path_strings,
    read_path_strings,
    refuse_mixed_label_types,
)
from ...labels._sets import read_label_sets
from ...tree import Tree
from ..networks._data import TreeDataset
from ._config import FitConfig
from ._validation import suggest_terminal

__all__ = ["PathTargets", "LabelSetTargets"]



def _require_y(y: Any, owner: str) -> None:
    if y is None:
        raise ValueError(f"{owner} requires y to be passed, but the target y is None.")


class PathTargets:
    """One label per sample, at any depth of a tree (or a label path): targets are node ids.

    Parameters
    ----------
    hierarchy : Tree or None
        The ``tree`` parameter as given (``None``: learn it from ``y`` or ``classes``).
    pad_label : hashable or None
        The ``pad_label`` parameter.
    owner : str
        The estimator's class name, for messages.
    sep : str or None, default=None
        The ``path_sep`` parameter: 1-D labels are path strings split on it, and answers
        (:meth:`answers`) are path strings joined with it.
    """

    #: A partition the labels require (``None``: the estimator's choice).
    forced_partition: str | None = None
    #: Whether the targets are label sets (the configuration then chooses their criterion).
    label_sets = False
    #: Whether ``fit`` can stream a torch ``Dataset`` of ``(x, label)`` items.
    streams = True
    #: The separator of path strings (class attribute: label sets, whose ``__init__`` leaves it, have none).
    sep: str | None = None

    def __init__(self, hierarchy: Tree | None, pad_label: Any, owner: str, sep: str | None = None):
        self.source = hierarchy
        self.owner = owner
        self.pad_label = pad_label
        if sep is not None and (not isinstance(sep, str) or not sep):
            raise ValueError(f"path_sep must be a non-empty string or None, got {sep!r}")
        self.sep = sep
        if hierarchy is not None:
            self._set(hierarchy, default_pad_label(hierarchy.names) if pad_label is None else pad_label)

    def _set(self, tree: Tree, pad: Any) -> None:
        check_pad_not_a_label(tree, pad)
        if self.sep is not None:
            bad = [v for v in tree.names.tolist() if not isinstance(v, str)]
            if bad:
                raise ValueError(
                    f"path_sep={self.sep!r} joins the names of a path into a string, but the tree's names "
                    f"{bad[:5]!r} are not strings"
                )
            check_names_free_of_sep(tree, self.sep)
        self.tree, self.pad = tree, pad

    def fit(self, y: Any, classes: Any = None) -> PathTargets:
        """Learn the tree from ``y`` (or ``classes``) when none was given."""
        _require_y(y, self.owner)
        if self.source is None:
            values = as_host_labels(y if classes is None else classes, self.pad_label)
            if values.ndim == 1 and self.sep is None:  # path strings: learn_tree checks them
                refuse_mixed_label_types(values, "y" if classes is None else "classes")
                check_classification_targets(values)
            tree, pad = learn_tree(values, self.pad_label, allow_flat=True, sep=self.sep)
            self._set(tree, default_pad_label(tree.names) if self.pad_label is None else pad)
        return self

    def read(self, y: Any) -> np.ndarray:
        """``y`` as a host array: 1-D labels or 2-D label paths (path strings split on ``sep``)."""
        return read_path_strings(as_host_labels(y, self.pad), self.tree, self.sep, self.pad)

    def answers(self) -> np.ndarray | None:
        """What prediction answers per node with ``sep`` (its path string), else ``None``:
        answers are then paths of names."""
        return None if self.sep is None else path_strings(self.tree, self.sep)

    @property
    def classes(self) -> np.ndarray:
        """The label of every class (the columns of ``predict_proba``)."""
        return self.tree.labels

    def fitted_attributes(self) -> dict[str, Any]:
        """What the estimator exposes of this encoder."""
        return {"tree_": self.tree, "pad_label_": self.pad, "classes_": self.classes}

    def encode(self, X: Any, y: Any) -> np.ndarray:
        """Node id (``-1``: no label) of every sample's label."""
        _require_y(y, self.owner)
        values = self.read(y)
        check_consistent_length(X, values)
        return labels_to_ids(values, self.tree, self.pad)

    def advise(self, ids: np.ndarray, semantics: str) -> None:
        """Warnings about the targets before training."""
        suggest_terminal(semantics, self.tree, ids)

    def dataset(self, X: Any, ids: np.ndarray | None, sparse: bool) -> TreeDataset:
        return TreeDataset(X, ids, sparse_batches=sparse)

    def node_rows(self) -> np.ndarray:
        """For every node of ``tree``, its class's position in ``classes`` (the identity here)."""
        return np.arange(self.tree.n_classes)

    def criterion(self, config: FitConfig) -> dict[str, Any]:
        """The net's criterion parameters: the class and options ``config`` chose, and the tree."""
        options = {f"criterion__{k}": v for k, v in config.criterion_options.items()}
        return {"criterion": config.criterion, "criterion__tree": self.tree, **options}


class LabelSetTargets(PathTargets):
    """Label sets on a tree or a DAG: targets are (row of X, DAG node) pairs.

    A DAG is unrolled once into a tree of node copies (``unrolled``), which the network
    scores; a label's probability sums over its copies' paths.
    """

    forced_partition = "sibling"
    label_sets = True
    streams = False  # a torch Dataset yields one label per item, not a label set

    def __init__(self, hierarchy: Any, pad_label: Any, owner: str, sep: str | None = None):
        from ...dag import Dag, UnrolledDag

        if sep is not None:
            raise ValueError(
                f"{owner} reads label sets of the hierarchy's labels; path_sep is for HierarchicalClassifier "
                "(leave it None)"
            )
        self.source, self.owner, self.pad_label = hierarchy, owner, pad_label
        if isinstance(hierarchy, UnrolledDag):
            self.unrolled = hierarchy
        else:
            self.unrolled = (Dag.from_tree(hierarchy) if isinstance(hierarchy, Tree) else hierarchy).unroll()
        self.hierarchy = self.unrolled.dag
        tree = self.unrolled.tree
        self._set(tree, default_pad_label(tree.labels) if pad_label is None else pad_label)
        self.form: str | None = None
        self.n_pairs = 0

    def fit(self, y: Any, classes: Any = None) -> LabelSetTargets:
        _require_y(y, self.owner)
        return self

    @property
    def classes(self) -> np.ndarray:
        return self.hierarchy.labels

    def fitted_attributes(self) -> dict[str, Any]:
        return {**super().fitted_attributes(), "unrolled_": self.unrolled, "hierarchy_": self.hierarchy,
                "label_form_": self.form, "n_pairs_": self.n_pairs}

    def encode(self, X: Any, y: Any) -> np.ndarray:
        """``(n_pairs, 2)`` int64: (row of X, DAG node id) for every label of every sample."""
        _require_y(y, self.owner)
        indicator, form = read_label_sets(y, self.hierarchy.n_nodes, self.hierarchy.to_ids)
        check_consistent_length(X, indicator)
        if indicator.nnz == 0:
            raise ValueError("y holds no label at all: every sample's label set is empty")
        if self.form is None:  # the first fit's form is the one predict writes
            self.form = form
        coo = indicator.tocoo()  # the reader's CSR is canonical: pairs come sorted by row, then node
        self.n_pairs = int(coo.nnz)
        return np.stack([coo.row, coo.col], axis=1).astype(np.int64)

    def advise(self, ids: np.ndarray, semantics: str) -> None:
        # the first copy of each label stands for it: copies share depth and leafness
        suggest_terminal(semantics, self.tree, self.unrolled.copy_offsets[ids[:, 1]])

    def dataset(self, X: Any, ids: np.ndarray | None, sparse: bool) -> TreeDataset:
        if ids is None:
            return TreeDataset(X, None, sparse_batches=sparse)
        return TreeDataset(X, np.ascontiguousarray(ids[:, 1]), sparse_batches=sparse,
                           rows=np.ascontiguousarray(ids[:, 0]))

    def node_rows(self) -> np.ndarray:
        # every copy of a DAG class reads the class's row (of class_features, of classes)
        return self.unrolled.origin

    def criterion(self, config: FitConfig) -> dict[str, Any]:
        options = {f"criterion__{k}": v for k, v in config.criterion_options.items()}
        return {"criterion": config.criterion, "criterion__unrolled": self.unrolled, **options}
