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

The weights of what the encoders encode, one per training item, as the loss reads it
(:func:`item_weights`, :func:`class_weights`, :func:`check_fit_sample_weight`):
``fit(X, y, sample_weight=w)`` weighs row ``i`` by ``w[i]``; ``class_weight`` weighs every row
labelled with a class by that class's weight; a row's weight in the loss is the product
(:func:`item_weights`). The losses take the weighted mean over each batch's labelled rows,
``sum(w * loss) / sum(w)`` (:class:`~hiclass_parallel.losses.PathLocalCrossEntropy` and the
others, ``sample_weight``), so that an integer weight counts as that many copies of the row and
a zero weight as no row at all.

Where the weights are all 1 (no ``sample_weight`` nor ``class_weight``, or weights that come
out all 1), the fit runs unweighted: the same steps, bit for bit, as without weights.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length

from ...dag import Dag, UnrolledDag
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
from ...metrics._weights import check_sample_weight
from ...tree import Tree
from ..networks import TreeDataset
from ._config import FitConfig
from ._validation import suggest_terminal

__all__ = ["LabelSetTargets", "PathTargets", "check_fit_sample_weight", "class_weights", "item_weights"]



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


# ---------------------------------------------------------------------------- the weights of the items


def check_fit_sample_weight(sample_weight: Any, n_rows: int) -> np.ndarray | None:
    """``sample_weight`` of a fit as float64 of shape ``(n_rows,)``, or ``None``.

    Raises
    ------
    ValueError
        Weights that are not numbers, not one per row, negative, NaN or infinite (the message
        names the first such weight and its position), or all zero (nothing would train).

    Examples
    --------
    >>> check_fit_sample_weight([1, 2, 0], 3)
    array([1., 2., 0.])
    >>> check_fit_sample_weight([1, float("nan")], 2)
    Traceback (most recent call last):
    ...
    ValueError: sample_weight[1] is nan: weights must be finite and non-negative
    """
    weight = check_sample_weight(sample_weight, n_rows)
    if weight is not None and n_rows and not (weight > 0).any():
        raise ValueError("sample_weight is zero for every row: there is nothing to train on")
    return weight


def _label_ids(classes: np.ndarray) -> Callable[[Any], int]:
    """A look-up of a class's position in ``classes`` (for a plain array of labels)."""
    position = {label: i for i, label in enumerate(classes.tolist())}

    def to_id(label: Any) -> int:
        if label not in position:
            raise KeyError(label)
        return position[label]

    return to_id


def class_weights(class_weight: Any, classes: Any, nodes: np.ndarray,
                  sample_weight: np.ndarray | None = None) -> np.ndarray | None:
    """The weight of every class (``(n_classes,)`` float64), or ``None`` for ``class_weight=None``.

    Parameters
    ----------
    class_weight : None, "balanced" or mapping of label to float
        ``"balanced"``: ``n / (n_labelled_nodes * count(node))`` over the labelled training
        items, where ``count(node)`` is the (sample-weighted) number of items labelled with the
        node, ``n`` their total and ``n_labelled_nodes`` the number of classes that label at
        least one item; a class no item names keeps 1. A mapping: the weight of each class
        named (as its label, or anything the hierarchy's ``to_ids`` finds: a path of names, a
        name only one class has), 1 for the others.
    classes : ndarray of shape (n_classes,), Tree or Dag
        The label of every class in node id order, or the hierarchy whose ``to_ids`` finds them.
    nodes : ndarray of int
        The class (node id) of every training item; ``-1`` for an unlabelled one.
    sample_weight : ndarray of shape (len(nodes),), default=None
        The items' sample weights, which ``"balanced"`` counts with.

    Examples
    --------
    >>> import numpy as np
    >>> class_weights("balanced", np.array(["a", "b", "c"]), np.array([0, 0, 0, 1, -1]))
    array([0.66666667, 2.        , 1.        ])
    >>> class_weights({"b": 3.0}, np.array(["a", "b", "c"]), np.array([0, 1]))
    array([1., 3., 1.])
    """
    if class_weight is None:
        return None
    hierarchy = None if isinstance(classes, np.ndarray) else classes
    n_classes = len(classes) if hierarchy is None else len(hierarchy.labels)
    weights = np.ones(n_classes, dtype=np.float64)
    if isinstance(class_weight, str):  # "balanced", the one string _parameter_constraints allows
        labelled = nodes >= 0
        w = np.ones(nodes.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        counts = np.bincount(nodes[labelled], weights=w[labelled], minlength=n_classes)
        seen = counts > 0
        if seen.any():
            weights[seen] = counts.sum() / (seen.sum() * counts[seen])
        return weights
    if not isinstance(class_weight, Mapping):
        raise TypeError(f"class_weight must be None, 'balanced' or a mapping label -> weight, "
                        f"got {type(class_weight).__name__}")
    to_id = _label_ids(classes) if hierarchy is None else (lambda label: int(hierarchy.to_ids([label])[0]))
    ids, unknown, why = {}, [], []
    for label in class_weight:
        try:
            ids[label] = to_id(label)
        except (KeyError, ValueError) as exc:  # UnknownLabelError is both
            unknown.append(label)
            message = str(exc.args[0]) if exc.args else ""
            if "name of" in message:  # a name several classes have: the tree's message names their paths
                why.append(message)
    if unknown:
        raise ValueError(f"class_weight names {len(unknown)} label(s) that are not classes of the tree: "
                         f"{', '.join(repr(label) for label in unknown[:5])}" + "".join(f"; {w}" for w in why[:2]))
    for label, value in class_weight.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"class_weight[{label!r}] must be a number, got {value!r}") from None
        if isinstance(value, bool) or not np.isfinite(number) or number < 0:
            raise ValueError(f"class_weight[{label!r}] is {value!r}: weights must be finite and non-negative")
        weights[ids[label]] = number
    return weights


def item_weights(sample_weight: np.ndarray | None, class_weight: Any, classes: Any,
                 ids: np.ndarray) -> np.ndarray | None:
    """The weight of every training item, ``sample_weight`` of its row times ``class_weight`` of
    its class, float64; ``None`` when every item weighs 1 (the fit then runs unweighted).

    ``classes`` is as :func:`class_weights` takes it; ``ids`` a label encoder's targets: node
    ids ``(n_rows,)`` (``-1`` unlabelled), or ``(n_pairs, 2)`` pairs (row, node) of label sets
    (an item per label of a row).
    """
    ids = np.asarray(ids)
    rows, nodes = (ids[:, 0], ids[:, 1]) if ids.ndim == 2 else (None, ids)
    weight = None if sample_weight is None else (sample_weight if rows is None else sample_weight[rows])
    per_class = class_weights(class_weight, classes, nodes, weight)
    if per_class is not None:
        by_class = per_class[np.maximum(nodes, 0)]
        weight = by_class if weight is None else weight * by_class
    if weight is None or bool((weight == 1.0).all()):
        return None
    labelled = nodes >= 0
    if labelled.any() and not (weight[labelled] > 0).any():
        raise ValueError("every labelled row has weight zero (sample_weight times class_weight): there is "
                         "nothing to train on")
    return np.ascontiguousarray(weight, dtype=np.float64)
