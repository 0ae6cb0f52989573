"""The methods compared by :mod:`benchmarks.bench_peers`, behind one small interface.

Every method is built by :func:`make_method` and offers ``fit(X, y)`` with ``y`` the node
ids of the training labels (at any depth) and ``predict_paths(X)`` returning node-id
ancestral paths of shape ``(n_samples, n_levels)`` padded with ``-1``. The benchmark then
scores every method with the same functions of :mod:`hiclass_parallel.metrics`.

- ``hc-auto`` / ``hc-level`` / ``hc-sibling``: :class:`hiclass_parallel.HierarchicalClassifier`
  with its default ``partition="auto"`` (for :class:`~hiclass_parallel.estimators.MLP` and
  :class:`~hiclass_parallel.estimators.SparseMLP` the sibling partition, trained path-locally
  and decoded best-first), the level (paper) or the sibling (conditional softmax) partition;
- ``flat-torch``: the classifier's default torch module trained with plain cross-entropy
  over all classes (internal nodes included); it predicts one class and returns its path;
- ``hiclass-lcppn`` / ``hiclass-lcpn`` / ``hiclass-flat``: HiClass
  ``LocalClassifierPerParentNode``, ``LocalClassifierPerNode`` and ``FlatClassifier`` with
  scikit-learn's ``LogisticRegression`` (default settings), ``y`` in HiClass's 2-D padded
  string format; ``hiclass-lcppn-svc``: ``LocalClassifierPerParentNode(LinearSVC())``, the
  per-parent linear models of many rows per class. HiClass is an optional, benchmark-only
  dependency.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import time
from typing import Any

import numpy as np

HC_METHODS = ("hc-auto", "hc-level", "hc-sibling")
HICLASS_METHODS = ("hiclass-lcppn", "hiclass-lcpn", "hiclass-flat", "hiclass-lcppn-svc")
TORCH_METHODS = (*HC_METHODS, "flat-torch")
ALL_METHODS = (*HC_METHODS, "flat-torch", *HICLASS_METHODS)

def unavailable_reason(method: str) -> str | None:
    """Why ``method`` cannot run here, or None when it can."""
    if method in HICLASS_METHODS:
        if importlib.util.find_spec("hiclass") is None:
            return "hiclass is not installed (pip install hiclass==5.0.8)"
        return None
    if method in TORCH_METHODS:
        try:
            if method in HC_METHODS:
                _classifier_class()
            _default_module()
        except Exception as exc:  # noqa: BLE001 - any import problem is a reason to skip
            return f"hiclass_parallel.estimators is not usable: {type(exc).__name__}: {exc}"
        return None
    return f"unknown method {method!r}; choose from {ALL_METHODS}"


# ---------------------------------------------------------------------------- HiClass
def ids_to_hiclass(paths: np.ndarray) -> np.ndarray:
    """Node-id paths (``-1`` padded) -> HiClass's 2-D string format (``""`` padded).

    Nodes are named ``"n<id>"`` so that names are unique and the way back is exact.
    """
    paths = np.asarray(paths)
    names = np.char.add("n", paths.astype(str)).astype(object)
    names[paths < 0] = ""
    return names


def hiclass_to_ids(pred: np.ndarray, n_levels: int) -> np.ndarray:
    """HiClass's predicted string paths -> node-id paths padded with ``-1``."""
    pred = np.asarray(pred)
    if pred.ndim == 1:
        pred = pred[:, None]
    out = np.full((pred.shape[0], n_levels), -1, dtype=np.int64)
    flat = pred.astype(str)
    for level in range(min(n_levels, flat.shape[1])):
        col = flat[:, level]
        filled = np.char.str_len(col) > 0
        if filled.any():
            out[filled, level] = np.char.lstrip(col[filled], "n").astype(np.int64)
    return out


class HiClassMethod:
    """A HiClass model with ``LogisticRegression`` (``LinearSVC`` for ``-svc``) local classifiers, on node ids."""

    def __init__(self, kind: str, tree: Any, n_jobs: int = 2, **lr_params: Any):
        self.kind = kind
        self.tree = tree
        self.n_jobs = n_jobs
        self.lr_params = lr_params

    def _model(self) -> Any:
        import hiclass
        from sklearn.linear_model import LogisticRegression
        from sklearn.svm import LinearSVC

        lr = LogisticRegression(**self.lr_params)
        if self.kind == "hiclass-lcppn-svc":
            return hiclass.LocalClassifierPerParentNode(local_classifier=LinearSVC(**self.lr_params), n_jobs=self.n_jobs)
        if self.kind == "hiclass-lcppn":
            return hiclass.LocalClassifierPerParentNode(local_classifier=lr, n_jobs=self.n_jobs)
        if self.kind == "hiclass-lcpn":
            return hiclass.LocalClassifierPerNode(local_classifier=lr, n_jobs=self.n_jobs)
        if self.kind == "hiclass-flat":
            return hiclass.FlatClassifier(local_classifier=lr)
        raise ValueError(self.kind)

    def fit(self, X: Any, y: np.ndarray) -> HiClassMethod:
        self.model_ = self._model()
        self.model_.fit(X, ids_to_hiclass(self.tree.paths[np.asarray(y)]))
        return self

    def predict_paths(self, X: Any) -> np.ndarray:
        return hiclass_to_ids(self.model_.predict(X), self.tree.n_levels)


# ---------------------------------------------------------------------------- ours
def _classifier_class() -> type:
    from hiclass_parallel.estimators import HierarchicalClassifier

    return HierarchicalClassifier


def _default_module() -> type:
    """The torch module ``HierarchicalClassifier`` uses when ``module=None``."""
    modules = importlib.import_module("hiclass_parallel.estimators.networks._modules")
    for name in ("MLP", "MLPModule", "DefaultMLP", "HierarchicalMLP"):
        if hasattr(modules, name):
            return getattr(modules, name)
    classes = [obj for _, obj in inspect.getmembers(modules, inspect.isclass)
               if obj.__module__ == modules.__name__ and "mlp" in obj.__name__.lower()]
    if len(classes) == 1:
        return classes[0]
    raise ImportError(f"cannot tell the default MLP in {modules.__name__}: {[c.__name__ for c in classes]}")


class HierarchicalMethod:
    """``HierarchicalClassifier`` with one partition; ``y`` and predictions as node ids."""

    def __init__(self, partition: str, tree: Any, **params: Any):
        self.partition = partition
        self.tree = tree
        self.params = params

    def fit(self, X: Any, y: np.ndarray) -> HierarchicalMethod:
        cls = _classifier_class()
        self.model_ = cls(tree=self.tree, partition=self.partition, **self.params)
        self.model_.fit(X, np.asarray(y))
        return self

    def predict_paths(self, X: Any) -> np.ndarray:
        # predict() is the public API whose cost users pay: label paths padded with pad_label_.
        return ids_of_label_paths(self.tree, self.model_.predict(X), self.model_.pad_label_)


def ids_of_label_paths(tree: Any, paths: Any, pad: Any) -> np.ndarray:
    """The classifier's label paths (padded with ``pad``) as node-id paths padded with ``-1``."""
    paths = np.asarray(paths)
    ids = np.full(paths.shape, -1, dtype=np.int64)
    filled = paths != pad
    ids[filled] = tree.to_ids(paths[filled])
    return ids


class FlatTorchBaseline:
    """The classifier's default module trained with plain cross-entropy over all classes.

    Trained by a skorch ``NeuralNet`` with the same optimiser, learning rate, batch size,
    epochs and module parameters as the ``HierarchicalClassifier`` it is compared with; the
    targets are the node ids of the labels (an internal node is a class of its own). The
    prediction is the arg-max class and its ancestral path.
    """

    def __init__(self, tree: Any, module_params: dict | None = None, max_epochs: int = 10,
                 lr: float = 1e-3, batch_size: int = 256, optimizer: Any = None,
                 device: str = "cpu", predict_batch_size: int = 4096, seed: int = 0):
        self.tree = tree
        self.module_params = dict(module_params or {})
        self.max_epochs = max_epochs
        self.lr = lr
        self.batch_size = batch_size
        self.optimizer = optimizer
        self.device = device
        self.predict_batch_size = predict_batch_size
        self.seed = seed

    def _net(self, n_features: int) -> Any:
        import torch
        from skorch import NeuralNet
        from torch.utils.data import DataLoader

        module = _default_module()
        module_kwargs = module_kwargs_for(module, n_features, self.tree.n_classes, self.module_params)
        return NeuralNet(
            module,
            criterion=torch.nn.CrossEntropyLoss,
            optimizer=self.optimizer or torch.optim.Adam,
            # The same optimiser as the classifier, which uses torch's fused Adam by default.
            **({"optimizer__fused": True} if self.optimizer in (None, torch.optim.Adam, torch.optim.AdamW) else {}),
            lr=self.lr,
            max_epochs=self.max_epochs,
            batch_size=self.batch_size,
            iterator_train=DataLoader,
            iterator_train__shuffle=True,
            iterator_train__collate_fn=_collate,
            iterator_valid__collate_fn=_collate,
            dataset=_BatchedDataset,
            train_split=None,
            device=self.device,
            verbose=0,
            **{f"module__{k}": v for k, v in module_kwargs.items()},
        )

    def fit(self, X: Any, y: np.ndarray) -> FlatTorchBaseline:
        import torch

        torch.manual_seed(self.seed)
        X = _dense_float32(X)
        self.net_ = self._net(X.shape[1])
        self.net_.fit(X, np.asarray(y, dtype=np.int64))
        return self

    def predict_paths(self, X: Any) -> np.ndarray:
        import torch

        X = _dense_float32(X)
        module = self.net_.module_
        module.eval()
        out = np.empty(X.shape[0], dtype=np.int64)
        with torch.inference_mode():
            for start in range(0, X.shape[0], self.predict_batch_size):
                xb = torch.as_tensor(X[start:start + self.predict_batch_size], device=self.device)
                out[start:start + xb.shape[0]] = module(xb).argmax(dim=1).cpu().numpy()
        return np.asarray(self.tree.paths, dtype=np.int64)[out]


class _Batch(tuple):
    """A whole mini-batch (X, y) built at once by :meth:`_BatchedDataset.__getitems__`."""


def _collate(batch: Any) -> Any:
    if isinstance(batch, _Batch):
        return tuple(batch)
    from torch.utils.data import default_collate

    return default_collate(batch)


class _BatchedDataset:
    """Rows fetched one mini-batch at a time, as the classifier's own data set does.

    skorch's default data set indexes one row at a time and collates the rows; the
    classifier fetches a whole batch with one fancy index. The baseline gets the same
    fetching so that the comparison measures the loss, not the data loading.
    """

    def __init__(self, X: Any, y: Any = None, length: Any = None):
        import torch

        self.X = torch.as_tensor(_dense_float32(X))
        self.y = None if y is None else torch.as_tensor(np.asarray(y, dtype=np.int64))

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def __getitem__(self, i: int) -> Any:
        import torch

        return self.X[i], (torch.zeros((), dtype=torch.int64) if self.y is None else self.y[i])

    def __getitems__(self, indices: list[int]) -> _Batch:
        import torch

        idx = torch.as_tensor(indices, dtype=torch.int64)
        return _Batch((self.X[idx], None if self.y is None else self.y[idx]))


def _dense_float32(X: Any) -> np.ndarray:
    if hasattr(X, "toarray"):
        X = X.toarray()
    return np.ascontiguousarray(X, dtype=np.float32)


def module_kwargs_for(module: type, n_features: int, n_classes: int, extra: dict) -> dict:
    """Constructor arguments of the default module: input and output sizes plus ``extra``.

    The size parameter names are read from the module's signature so the baseline keeps
    working whatever the library calls them.
    """
    sig = inspect.signature(module)
    names = set(sig.parameters)
    kwargs = dict(extra)
    for candidates, value in (
        (("n_features", "in_features", "input_dim", "n_inputs", "d_in"), n_features),
        (("n_outputs", "n_classes", "out_features", "output_dim", "d_out"), n_classes),
    ):
        for name in candidates:
            if name in names:
                kwargs.setdefault(name, value)
                break
    return kwargs


# ---------------------------------------------------------------------------- factory
def make_method(method: str, tree: Any, params: dict | None = None) -> Any:
    """Build one method by name; ``params`` are its settings (see ``bench_peers``)."""
    params = dict(params or {})
    if method in HC_METHODS:
        return HierarchicalMethod(method.split("-", 1)[1], tree, **params)
    if method == "flat-torch":
        return FlatTorchBaseline(tree, **params)
    if method in HICLASS_METHODS:
        return HiClassMethod(method, tree, **params)
    from benchmarks._text_methods import TEXT_METHODS, make_text_method

    if method in TEXT_METHODS:
        return make_text_method(method, tree, params)
    raise ValueError(f"unknown method {method!r}; choose from {ALL_METHODS + TEXT_METHODS}")


def warm_up(method: str, params: dict | None = None, n_features: int = 8) -> None:
    """Fit ``method`` once on a toy tree so one-time process costs are not timed.

    A fresh process pays them on its first fit: torch imports ``torch._dynamo`` on an
    optimiser's first step (several seconds here), joblib starts HiClass's worker pool.
    Users pay these once per process, not per fit, so the benchmark pays them before the
    timer starts. The toy tree is not the benchmark's tree: no cache of it is warmed.
    """
    from benchmarks._text_methods import TEXT_METHODS
    from benchmarks._text_methods import warm_up as warm_up_text
    from hiclass_parallel import Tree

    if method in TEXT_METHODS:
        return warm_up_text(method, params, n_features)
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, n_features)).astype(np.float32)
    y = np.tile(np.arange(tree.n_classes), 8)[:64]
    params = dict(params or {})
    if method in TORCH_METHODS:
        params["max_epochs"] = 1
    model = make_method(method, tree, params)
    model.fit(X, y)
    model.predict_paths(X)


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start
