"""Training from a torch ``Dataset`` or ``IterableDataset``: data that does not fit in memory.

``HierarchicalClassifier.fit(dataset)`` streams ``(x, label)`` pairs: ``x`` a feature vector
(a 1-D torch tensor or NumPy array of ``n_features`` values), ``label`` a label at any depth of
the tree (or a label path, a list from the top level down). Batches are collated as they
come; labels become node ids one batch at a time, so nothing is materialised beyond a batch.
A weighted stream yields ``(x, label, weight)`` triples instead (``fit``'s ``sample_weight``
cannot follow a stream's order); a ``class_weight`` mapping multiplies each item's weight by
its class's.

What streaming needs that arrays do not:

- the ``tree``: it cannot be learned from labels that have not been read yet;
- no validation split for an ``IterableDataset`` (``train_split`` / ``early_stopping``): a split
  needs the data set's length and random access; a map-style ``Dataset`` (with ``__len__``
  and ``__getitem__``) supports both;
- no shuffling of an ``IterableDataset`` by the loader: shuffle in the data set (e.g. a
  shuffle buffer), which is where a stream can do it.

``DataLoader`` workers (``iterator_train__num_workers``) parallelise reading as with arrays; an
``IterableDataset`` must then split its stream between workers itself
(``torch.utils.data.get_worker_info``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

from ...labels._paths import as_host_labels, labels_to_ids, read_path_strings
from ...metrics._weights import check_sample_weight
from ._targets import class_weights

__all__ = ["is_dataset", "StreamInput"]


def _length(dataset: Any) -> int | None:
    """Number of samples of a map-style dataset; ``None`` for a stream without a length."""
    try:
        return len(dataset)
    except TypeError:
        return None


def is_dataset(X: Any) -> bool:
    """Whether ``X`` is a torch ``Dataset`` (map-style or iterable), which ``fit`` streams."""
    return isinstance(X, (Dataset, IterableDataset))


class _LabelCollate:
    """``collate_fn``: stack a list of ``(x, label)`` into ``(X float32, node ids)``, or of
    ``(x, label, weight)`` (or with ``node_weight``, each class's weight) into ``(X, (node ids,
    weights))`` (picklable)."""

    def __init__(self, tree: Any, pad_label: Any, node_weight: np.ndarray | None = None, sep: str | None = None):
        self.tree, self.pad_label, self.node_weight = tree, pad_label, node_weight
        self.sep = sep  # path_sep: a label is a path string

    def __call__(self, batch: list) -> tuple[torch.Tensor, Any]:
        weights = None
        try:
            if batch and isinstance(batch[0], (tuple, list)) and len(batch[0]) == 3:
                xs, labels, weights = zip(*batch)
            else:
                xs, labels = zip(*batch)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                "a data set given to fit must yield (x, label) pairs or (x, label, weight) triples; got items of type "
                f"{type(batch[0]).__name__}"
            ) from exc
        X = torch.stack([torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x) for x in xs])
        if isinstance(labels[0], (list, tuple, np.ndarray)):
            width = max(len(p) for p in labels)
            values = np.empty((len(labels), width), dtype=object)
            values[:] = self.pad_label
            for i, p in enumerate(labels):
                values[i, : len(p)] = list(p)
        else:
            values = np.asarray([v.item() if isinstance(v, (np.generic, torch.Tensor)) else v for v in labels])
        values = read_path_strings(as_host_labels(values, self.pad_label), self.tree, self.sep, self.pad_label)
        ids = np.asarray(labels_to_ids(values, self.tree, self.pad_label))
        if weights is None and self.node_weight is None:
            return X.to(torch.float32), torch.from_numpy(ids)
        w = np.ones(len(ids)) if weights is None else _item_weights(weights)
        if self.node_weight is not None:
            w = w * self.node_weight[np.maximum(ids, 0)]
        return X.to(torch.float32), (torch.from_numpy(ids), torch.from_numpy(w))


def _item_weights(weights: tuple) -> np.ndarray:
    """The weights a stream's items carry, checked as ``fit``'s ``sample_weight`` is (finite,
    non-negative numbers; the message names the batch position of a bad one)."""
    values = [float(w.item()) if isinstance(w, (np.generic, torch.Tensor)) else w for w in weights]
    return check_sample_weight(np.asarray(values, dtype=object), len(values))


def _first_x(dataset: Any) -> Any:
    try:
        item = dataset[0] if not isinstance(dataset, IterableDataset) else next(iter(dataset))
    except (StopIteration, IndexError) as exc:
        raise ValueError("the data set given to fit is empty") from exc
    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise TypeError(f"a data set given to fit must yield (x, label) pairs or (x, label, weight) triples; "
                        f"got {type(item).__name__}")
    x = item[0]
    shape = tuple(x.shape) if hasattr(x, "shape") else (len(x),)
    if len(shape) != 1:
        raise ValueError(f"each x of the data set must be a 1-D feature vector, got shape {shape}")
    return shape[0]


def _check_split(clf: Any, dataset: Any) -> None:
    if isinstance(dataset, IterableDataset) and (clf.train_split is not None or clf.early_stopping):
        what = "early_stopping=True" if clf.early_stopping else "train_split"
        raise ValueError(
            f"{what} needs a validation split, which needs the data set's length and random access; an "
            f"IterableDataset ({type(dataset).__name__}) has neither. Set early_stopping=False and "
            "train_split=None, or pass a map-style Dataset (with __len__ and __getitem__)"
        )


@contextlib.contextmanager
def _streaming(targets: Any, net: Any, dataset: Any, class_weight: Any = None) -> Iterator[None]:
    """The net's loaders set for ``(x, label)`` items while inside; as they were (arrays) after."""
    node_weight = class_weights(class_weight, targets.tree, np.empty(0, dtype=np.int64))
    collate = _LabelCollate(targets.tree, targets.pad, node_weight, sep=targets.sep)
    params = {"iterator_train__collate_fn": collate, "iterator_valid__collate_fn": collate}
    if isinstance(dataset, IterableDataset):
        params["iterator_train__shuffle"] = False  # DataLoader refuses to shuffle a stream
    # Plain attributes, not set_params: skorch's set_params on an initialized net treats
    # iterator_* keys as module parameters and fails; its loaders read the attributes.
    missing = object()
    before = {k: getattr(net, k, missing) for k in params}
    vars(net).update(params)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is missing:
                delattr(net, key)
            else:
                setattr(net, key, value)


class StreamInput:
    """The fit pipeline's adapter for a torch ``Dataset`` / ``IterableDataset`` of ``(x, label)``.

    Labels become targets one batch at a time in the loaders' ``collate_fn`` (set on the net
    only while it trains, by :meth:`loading`), so nothing is materialised beyond a batch.
    """

    def __init__(self, dataset: Any, y: Any, estimator: Any, targets_class: type, sample_weight: Any = None):
        if not targets_class.streams:  # the multi-label classifier reads label sets
            raise TypeError(
                f"{type(estimator).__name__} does not train from a torch Dataset: pass X and y (label sets) as arrays"
            )
        if y is not None:
            raise ValueError("fit got a torch data set and y: the data set yields (x, label) pairs, so y must be None")
        if sample_weight is not None:
            raise ValueError("fit got a torch data set and sample_weight: a weighted data set yields (x, label, weight) "
                             "triples (a loader may shuffle or split the stream, and the weights must travel with "
                             "their items), so sample_weight must be None")
        self.class_weight = getattr(estimator, "class_weight", None)
        if isinstance(self.class_weight, str):
            raise ValueError("class_weight='balanced' needs every label before training, which a streamed data set "
                             "does not give: pass class_weight as a mapping label -> weight")
        if estimator.tree is None and not hasattr(estimator, "tree_"):
            raise ValueError(
                "fitting on a torch data set needs the tree (tree=...): it cannot be learned from a stream "
                "before the stream is read"
            )
        _check_split(estimator, dataset)
        self.X = np.empty((0, 0))  # the stream's rows reach the module dense: the default module is MLP
        self.dataset_ = dataset
        self.n_rows = _length(dataset)
        self.n_features = _first_x(dataset)

    def validate(self, estimator: Any, reset: bool) -> None:
        if reset:
            estimator.n_features_in_ = int(self.n_features)
        elif self.n_features != estimator.n_features_in_:
            raise ValueError(f"X has {self.n_features} features, but {type(estimator).__name__} is expecting "
                             f"{estimator.n_features_in_} features as input.")

    def fit_targets(self, targets: Any, classes: Any) -> None:
        """Nothing to learn: a stream needs the tree given."""

    def dataset(self, targets: Any, sparse: bool, advise_semantics: str | None = None) -> Any:
        return self.dataset_

    def loading(self, net: Any, targets: Any) -> contextlib.AbstractContextManager:
        return _streaming(targets, net, self.dataset_, self.class_weight)
