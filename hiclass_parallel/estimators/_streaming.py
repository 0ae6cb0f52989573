"""Training from a torch ``Dataset`` or ``IterableDataset``: data that does not fit in memory.

``HierarchicalClassifier.fit(dataset)`` streams ``(x, label)`` pairs: ``x`` a feature vector
(a 1-D torch tensor or NumPy array of ``n_features`` values), ``label`` a label at any depth of
the tree (or a label path, a list from the top level down). Batches are collated as they
come; labels become node ids one batch at a time, so nothing is materialised beyond a batch.

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

from .._labels import as_host_labels, labels_to_ids

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
    """``collate_fn``: stack a list of ``(x, label)`` into ``(X float32, node ids)`` (picklable)."""

    def __init__(self, tree: Any, pad_label: Any):
        self.tree, self.pad_label = tree, pad_label

    def __call__(self, batch: list) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            xs, labels = zip(*batch)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                "a data set given to fit must yield (x, label) pairs; got items of type "
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
        ids = labels_to_ids(as_host_labels(values, self.pad_label), self.tree, self.pad_label)
        return X.to(torch.float32), torch.from_numpy(np.asarray(ids))


def _first_x(dataset: Any) -> Any:
    try:
        item = dataset[0] if not isinstance(dataset, IterableDataset) else next(iter(dataset))
    except (StopIteration, IndexError) as exc:
        raise ValueError("the data set given to fit is empty") from exc
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise TypeError(f"a data set given to fit must yield (x, label) pairs; got {type(item).__name__}")
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
def _streaming(targets: Any, net: Any, dataset: Any) -> Iterator[None]:
    """The net's loaders set for ``(x, label)`` items while inside; as they were (arrays) after."""
    collate = _LabelCollate(targets.tree, targets.pad)
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

    def __init__(self, dataset: Any, y: Any, estimator: Any, targets_class: type):
        if not targets_class.streams:  # the multi-label classifier reads label sets
            raise TypeError(
                f"{type(estimator).__name__} does not train from a torch Dataset: pass X and y (label sets) as arrays"
            )
        if y is not None:
            raise ValueError("fit got a torch data set and y: the data set yields (x, label) pairs, so y must be None")
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
        return _streaming(targets, net, self.dataset_)
