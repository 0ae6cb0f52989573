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
from sklearn.utils.validation import check_is_fitted
from torch.utils.data import Dataset, IterableDataset

from .._labels import as_host_labels, check_pad_not_a_label, default_pad_label, labels_to_ids

__all__ = ["is_dataset", "fit_dataset"]



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
def _streaming(clf: Any, net: Any, dataset: Any) -> Iterator[None]:
    """The net's loaders set for ``(x, label)`` items while inside; as they were (arrays) after."""
    collate = _LabelCollate(clf.tree_, clf.pad_label_)
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


def fit_dataset(clf: Any, dataset: Any, y: Any = None, epochs: int | None = None) -> Any:
    """Fit (or, with a fitted ``clf`` and ``epochs``/``warm_start``, continue) on a torch data set.

    Parameters
    ----------
    clf : HierarchicalClassifier
        With ``tree`` given.
    dataset : torch.utils.data.Dataset or IterableDataset
        Yields ``(x, label)``: a 1-D feature vector and a label at any depth (or a label path).
    y : None
        Labels come from the data set; anything else is an error.
    epochs : int, default=None
        ``None``: ``max_epochs`` (``fit``); ``1`` for ``partial_fit``.

    Returns
    -------
    clf : HierarchicalClassifier

    Examples
    --------
    >>> import numpy as np, torch
    >>> from torch.utils.data import IterableDataset
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.estimators import HierarchicalClassifier
    >>> tree = Tree.from_edges([("dog", "animal"), ("cat", "animal"), ("oak", "plant")])
    >>> class Stream(IterableDataset):
    ...     def __iter__(self):
    ...         rng = np.random.default_rng(0)
    ...         for _ in range(200):
    ...             label = ["dog", "cat", "plant"][rng.integers(3)]  # labels at any depth
    ...             x = rng.normal(size=4).astype(np.float32) + (label == "dog") - (label == "cat")
    ...             yield torch.from_numpy(x), label
    >>> clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(Stream())
    >>> clf.predict(np.ones((1, 4), dtype=np.float32)).shape
    (1, 2)
    """
    if not getattr(clf, "_trains_from_datasets", True):  # the multi-label classifier reads label sets
        raise TypeError(
            f"{type(clf).__name__} does not train from a torch Dataset: pass X and y (label sets) as arrays"
        )
    if y is not None:
        raise ValueError(
            "fit got a torch data set and y: the data set yields (x, label) pairs, so y must be None"
        )
    if clf.tree is None and not hasattr(clf, "tree_"):
        raise ValueError(
            "fitting on a torch data set needs the tree (tree=...): it cannot be learned from a stream "
            "before the stream is read"
        )
    _check_split(clf, dataset)
    clf._check_hyperparams()
    n_features = _first_x(dataset)
    fitted = hasattr(clf, "net_")
    if fitted and (epochs == 1 or clf.warm_start):  # continue: partial_fit, or fit with warm_start
        check_is_fitted(clf)
        if n_features != clf.n_features_in_:
            raise ValueError(f"X has {n_features} features, but {type(clf).__name__} is expecting "
                             f"{clf.n_features_in_} features as input.")
        if clf.tree is not None and clf.tree != clf.tree_:
            raise ValueError("cannot continue training: tree changed since the model was fitted")
        with _streaming(clf, clf.net_, dataset), clf._rng(None):
            clf.net_.partial_fit(dataset, None, epochs=epochs)
        return clf

    for attr in ("net_", "_rng_state_", "feature_names_in_"):
        if hasattr(clf, attr):
            delattr(clf, attr)
    clf.n_features_in_ = int(n_features)
    clf.tree_ = clf.tree
    clf.pad_label_ = default_pad_label(clf.tree.labels) if clf.pad_label is None else clf.pad_label
    check_pad_not_a_label(clf.tree_, clf.pad_label_)
    seed = clf._resolve_model(np.empty((0, 0)))  # the stream's rows reach the module dense
    net = clf._build_net(seed, n_rows=_length(dataset))
    with _streaming(clf, net, dataset), clf._rng(seed):
        net.initialize()
        net.partial_fit(dataset, None, epochs=epochs)
    clf.net_ = net
    return clf
