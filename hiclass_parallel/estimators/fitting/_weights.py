"""Sample and class weights of a fit: one weight per training item, as the loss reads it.

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

from ...metrics._weights import check_sample_weight

__all__ = ["check_fit_sample_weight", "class_weights", "item_weights"]


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
