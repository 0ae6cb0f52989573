"""``HierarchicalClassifier``: one neural network over the whole tree, a scikit-learn citizen.

The classifier wraps a skorch :class:`~skorch.NeuralNet` (a plain ``NeuralNet`` subclass: the
targets it trains on are node ids scored by the tree loss, and ``NeuralNetClassifier``'s
accuracy scoring and stratified split do not apply to them). The wrapper owns everything
scikit-learn sees: parameters stored unchanged in ``__init__``, validation in ``fit``, fitted
state ending in ``_``; the skorch net it builds is the fitted attribute ``net_``.

Data flow: ``y`` (labels at any depth, or label paths) -> node ids (``PathEncoder``'s
reading) -> ``HierarchicalCrossEntropy`` over all levels at once (the lean loss: no
``(B, L, C)`` tensor) -> at prediction, exact decoding of the best valid path per sample.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import warnings
from collections.abc import Iterator
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_consistent_length, check_is_fitted, validate_data
from skorch import NeuralNet
from skorch.callbacks import EarlyStopping, ProgressBar
from skorch.dataset import ValidSplit, unpack_data
from skorch.utils import to_tensor
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate

from .._labels import as_host_labels, check_pad_not_a_label, default_pad_label, labels_to_ids, learn_tree
from ..tree import PAD, PARTITIONS, Tree
from ._modules import MLP, SparseMLP
from ._optim import LazyAdam

__all__ = ["HierarchicalClassifier"]

#: Prefixes of the skorch parameters that pass through to the net.
SKORCH_PREFIXES = ("module__", "optimizer__", "criterion__", "iterator_train__", "iterator_valid__", "callbacks__")


# ---------------------------------------------------------------------------- data plumbing
class _Batch(tuple):
    """A whole mini-batch built by :meth:`_TreeDataset.__getitems__` (X, y)."""


def collate_batch(batch: Any) -> Any:
    """DataLoader ``collate_fn``: pass a ready :class:`_Batch` through, else the default."""
    if isinstance(batch, _Batch):
        return tuple(batch)
    return default_collate(batch)


class _TreeDataset(Dataset):
    """Rows of X (dense NumPy, torch, or scipy sparse) and node ids, fetched a batch at a time.

    ``DataLoader`` calls ``__getitems__`` with a batch of indices, so a sparse matrix is
    sliced once per batch and only that slice is made dense: the whole matrix never is.
    Rows become float32 tensors (the module's dtype).
    """

    def __init__(self, X: Any, y: np.ndarray | None = None, sparse_batches: bool = False):
        self.X = X
        self.y = y
        self.sparse_batches = bool(sparse_batches) and sp.issparse(X)

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def _rows(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
        X = self.X
        if self.sparse_batches:
            Xb = _csr_tensor(X[idx])
        elif sp.issparse(X):
            Xb = torch.from_numpy(X[idx].toarray().astype(np.float32, copy=False))
        elif isinstance(X, torch.Tensor):
            Xb = X[torch.as_tensor(idx, device=X.device)].to(torch.float32)
        else:
            Xb = torch.from_numpy(np.ascontiguousarray(X[idx], dtype=np.float32))
        yb = None if self.y is None else torch.from_numpy(self.y[idx])
        return Xb, yb

    def __getitem__(self, i: int) -> tuple[torch.Tensor, Any]:
        Xb, yb = self._rows(np.asarray([i]))
        return Xb[0], (torch.zeros((), dtype=torch.int64) if yb is None else yb[0])

    def __getitems__(self, indices: list[int]) -> _Batch:
        return _Batch(self._rows(np.asarray(indices, dtype=np.int64)))


def _csr_tensor(X: sp.spmatrix) -> torch.Tensor:
    """A scipy sparse batch as a torch sparse CSR float32 tensor (for ``SparseLinear``)."""
    X = sp.csr_matrix(X)
    with warnings.catch_warnings():  # torch flags sparse CSR as beta; the layer uses only its parts
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(X.indptr.astype(np.int64)),
            torch.from_numpy(X.indices.astype(np.int64)),
            torch.from_numpy(X.data.astype(np.float32, copy=False)),
            size=X.shape,
            check_invariants=False,
        )


def _scores_columns(module: type) -> bool:
    """Whether a module class can score columns on demand (``encode`` + ``scorer``)."""
    return callable(getattr(module, "encode", None)) and callable(getattr(module, "scorer", None))


class _TreeNet(NeuralNet):
    """The skorch net: a plain ``NeuralNet`` that checks the module's output width.

    Parameters
    ----------
    n_scores : int
        The number of scores per sample the tree loss needs (classes plus stops).
    """

    def __init__(self, *args: Any, n_scores: int | None = None, path_local: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.n_scores = n_scores
        self.path_local = path_local

    def _path_local_step(self, batch: Any, training: bool) -> dict[str, Any]:
        # The module scores only the columns the loss asks for (the groups on each labelled
        # path), instead of producing all n_scores scores; y_pred is the hidden representation.
        self._set_training(training)
        Xi, yi = unpack_data(batch)
        with torch.set_grad_enabled(training):
            hidden = self.module_.encode(to_tensor(Xi, device=self.device))
            loss = self.criterion_(self.module_.scorer(hidden), to_tensor(yi, device=self.device))
        if training:
            loss.backward()
        return {"loss": loss, "y_pred": hidden}

    def train_step_single(self, batch: Any, **fit_params: Any) -> dict[str, Any]:
        if not self.path_local:
            return super().train_step_single(batch, **fit_params)
        return self._path_local_step(batch, training=True)

    def validation_step(self, batch: Any, **fit_params: Any) -> dict[str, Any]:
        if not self.path_local:
            return super().validation_step(batch, **fit_params)
        return self._path_local_step(batch, training=False)

    def infer(self, x: Any, **fit_params: Any) -> torch.Tensor:
        scores = super().infer(x, **fit_params)
        if not isinstance(scores, torch.Tensor) or scores.ndim != 2 or scores.shape[1] != self.n_scores:
            shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
            raise ValueError(
                f"the module {type(self.module_).__name__} returned scores of shape {shape}, but the tree "
                f"needs {self.n_scores} scores per sample (n_samples, {self.n_scores}): the tree and the "
                "module disagree in size"
            )
        return scores


# ---------------------------------------------------------------------------- the estimator
class HierarchicalClassifier(ClassifierMixin, BaseEstimator):
    """A neural hierarchical classifier: one network, labels at any depth, valid paths out.

    The module (by default a small :class:`MLP`) produces one score per class of the tree
    (plus one "stop" score per group with ``stop=True``). Training minimises the tree
    cross-entropy at every labelled level of every sample in parallel
    (:class:`~hiclass_parallel.losses.HierarchicalCrossEntropy`, memory O(batch x classes)).
    Prediction decodes, for each sample independently, the valid ancestral path with the
    highest joint log-probability (exact, not a beam search). Built on skorch: its parameters
    pass through and are tunable with ``GridSearchCV``.

    Parameters
    ----------
    tree : Tree, default=None
        The class tree. ``None`` learns it in :meth:`fit` from ``y``: label paths (2-D ``y``)
        give the hierarchy; 1-D labels give a flat tree (every label a top-level class).
    module : type of torch.nn.Module, default=None
        The network class (not an instance); ``None`` means :class:`SparseMLP` for a scipy
        sparse ``X`` (text features: cost per row follows its non-zeros) and :class:`MLP`
        otherwise. It is built with
        the ``module__*`` parameters, plus ``n_features`` (from ``X``) and ``n_outputs``
        (from the tree) when its ``__init__`` accepts them. It must map a float32 batch
        ``(batch, n_features)`` to scores ``(batch, n_scores_)``. A module whose class has
        ``accepts_sparse = True`` gets sparse input as torch sparse CSR batches (others get
        dense batches); one with ``encode(X)`` and ``scorer(hidden)`` methods (as
        :class:`SparseMLP`) is trained path-locally and decoded best-first under the
        sibling partition.
    partition : {"auto", "level", "sibling"}, default="auto"
        How classes are grouped into mutually exclusive softmax groups: by depth (the
        paper's method) or by parent (a conditional softmax). ``"auto"``: ``"sibling"`` for
        a module that scores columns on demand (the default for sparse ``X``), where each
        row then pays only for the groups on its path; ``"level"`` otherwise.
    stop : bool, default=None
        Add one "stop" score per group (but the top level's), so that a label at an internal
        node also teaches the model that the path ends there: training then reads such
        labels as terminal answers (override with ``criterion__semantics="partial"``).
        ``None`` means ``semantics == "terminal"``.
    semantics : {"partial", "terminal"}, default="partial"
        What a label at an internal node means. ``"partial"``: a coarse label, the finer
        class is unknown (the paper's reading); predictions end at leaves. ``"terminal"``:
        the node itself is the answer; predictions may end at any node (needs ``stop``).
        Used at prediction time; may be changed after fitting.
    decoding : {"best", "threshold"}, default="best"
        ``"best"``: the valid path with the highest joint log-probability. ``"threshold"``:
        the path cut at its deepest node whose probability is at least ``threshold``.
    threshold : float, default=0.5
        Cut-off of ``decoding="threshold"``.
    top_k : int, default=5
        Number of paths :meth:`predict_top_k` returns by default.
    pad_label : hashable, default=None
        Pads predicted label paths (and is read as padding in label paths given as ``y``).
        ``None`` means ``""`` for string labels and ``-1`` for integer labels.
    optimizer : type of torch.optim.Optimizer, default=None
        Optimizer class; ``optimizer__*`` parameters pass to it. ``None`` means
        :class:`LazyAdam` for modules with sparse gradients (:class:`SparseMLP`: only the
        rows of the features and classes in a batch are updated) and ``torch.optim.Adam``
        otherwise. Adam and AdamW use torch's fused kernel on CPU and CUDA (about 10x faster
        per step on large output layers) unless ``optimizer__fused`` or
        ``optimizer__foreach`` is given.
    lr : float, default=0.003
        Learning rate.
    max_epochs : int, default=10
        Passes over the data in :meth:`fit` (fewer with early stopping).
    batch_size : int, default=256
        Mini-batch size for training and prediction (``-1``: the whole data set).
    train_split : callable, default=None
        skorch's validation split, ``train_split(dataset, y=None) -> (train, valid)``.
        ``None``: no validation split, unless ``early_stopping`` asks for one. Avoid
        ``skorch.dataset.ValidSplit(..., stratified=True)``: labels at any depth seldom
        support stratification.
    callbacks : list of skorch callbacks, default=None
        Extra skorch callbacks (copied at fit, never modified).
    early_stopping : bool, default=False
        Stop when the validation loss has not improved by ``tol`` for ``n_iter_no_change``
        epochs, and restore the best weights. Holds out a random (non-stratified)
        ``validation_fraction`` of the samples unless ``train_split`` is given.
    validation_fraction : float, default=0.1
        Held-out fraction for ``early_stopping``.
    n_iter_no_change : int, default=5
        Patience of ``early_stopping``, in epochs.
    tol : float, default=1e-4
        Relative improvement of the validation loss that counts for ``early_stopping``.
    warm_start : bool, default=False
        When True, :meth:`fit` continues training the fitted network instead of starting
        afresh.
    verbose : int, default=0
        ``0``: silent. ``1`` or more: skorch's epoch log and a progress bar.
    device : str or torch.device, default="cpu"
        Where the network trains and predicts: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    random_state : int, RandomState instance or None, default=None
        Seeds weight initialisation, shuffling, dropout and the validation split. With an
        int, two fits on CPU give identical models. The global torch RNG is left as it was.
    **kwargs
        skorch parameters with a prefix: ``module__*`` (e.g. ``module__hidden_units``,
        ``module__dropout``), ``optimizer__*`` (e.g. ``optimizer__weight_decay``),
        ``criterion__*`` (e.g. ``criterion__level_weights``), ``iterator_train__*``,
        ``iterator_valid__*`` (e.g. ``iterator_train__num_workers``), ``callbacks__*``.

    Attributes
    ----------
    tree_ : Tree
        The tree in use.
    classes_ : ndarray of shape (n_classes,)
        The label of every class, in node id order (the column order of :meth:`predict_proba`).
    n_levels_ : int
        Number of levels: the width of predicted paths.
    n_scores_ : int
        Number of scores the module produces per sample (classes, plus stops).
    stop_ : bool
        Whether the model has stop scores.
    partition_ : str
        The partition the model was trained with (``"auto"`` resolved).
    path_local_ : bool
        Whether training scored only the groups on each labelled path (sibling partition
        with a module that scores columns on demand); prediction then decodes best-first.
    pad_label_ : hashable
        The pad label of predicted paths.
    n_features_in_ : int
        Number of features seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen in :meth:`fit`, when ``X`` has string column names.
    net_ : skorch.NeuralNet
        The fitted skorch net (``net_.module_`` is the torch module; ``net_.history`` the
        training history).

    See Also
    --------
    PathEncoder : the label <-> path mapping on its own.
    hiclass_parallel.datasets.make_hierarchical_classification : data to try it on.

    Notes
    -----
    ``X`` may be a dense NumPy array, a torch tensor (CPU or CUDA; kept where it is), a
    pandas DataFrame, or a scipy sparse matrix, which is made dense one mini-batch at a
    time. The defaults (Adam, lr 0.003, batch 256, one hidden layer of 256 units,
    10 epochs) favour speed on CPU for trees of up to 100,000 classes.

    Outputs are batch-invariant: in evaluation mode the module treats rows independently and
    decoding runs per row, so one sample's prediction does not depend on the rest of the
    batch (up to floating-point rounding of the matrix products).

    A fitted model pickles; a model trained on ``device="cuda"`` unpickles on a machine
    without a GPU onto the CPU (skorch maps it there, with a ``DeviceWarning``).

    Examples
    --------
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import HierarchicalClassifier
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=300, n_features=8, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=20, random_state=0).fit(X, y)
    >>> clf.predict(X[:2]).shape
    (2, 2)
    >>> clf.predict_proba(X[:2]).shape
    (2, 6)
    >>> bool(clf.score(X, y) > 0.5)
    True
    """

    _parameter_constraints: dict = {
        "tree": [Tree, None],
        "module": "no_validation",  # checked in fit, with a message about classes vs instances
        "partition": [StrOptions({"auto", *PARTITIONS})],
        "stop": ["boolean", None],
        "semantics": [StrOptions({"partial", "terminal"})],
        "decoding": [StrOptions({"best", "threshold"})],
        "threshold": [Interval(Real, 0, 1, closed="both")],
        "top_k": [Interval(Integral, 1, None, closed="left")],
        "pad_label": "no_validation",
        "optimizer": [callable, None],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "max_epochs": [Interval(Integral, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), Options(Integral, {-1})],
        "train_split": [callable, None],
        "callbacks": [list, None],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "device": [str, torch.device],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        tree: Tree | None = None,
        module: type[torch.nn.Module] | None = None,
        partition: str = "auto",
        *,
        stop: bool | None = None,
        semantics: str = "partial",
        decoding: str = "best",
        threshold: float = 0.5,
        top_k: int = 5,
        pad_label: Any = None,
        optimizer: Any = None,
        lr: float = 3e-3,
        max_epochs: int = 10,
        batch_size: int = 256,
        train_split: Any = None,
        callbacks: list | None = None,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 5,
        tol: float = 1e-4,
        warm_start: bool = False,
        verbose: int = 0,
        device: str | torch.device = "cpu",
        random_state: Any = None,
        **kwargs: Any,
    ):
        self.tree = tree
        self.module = module
        self.partition = partition
        self.stop = stop
        self.semantics = semantics
        self.decoding = decoding
        self.threshold = threshold
        self.top_k = top_k
        self.pad_label = pad_label
        self.optimizer = optimizer
        self.lr = lr
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.train_split = train_split
        self.callbacks = callbacks
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.verbose = verbose
        self.device = device
        self.random_state = random_state
        vars(self).update(kwargs)

    # ------------------------------------------------------------------ parameters
    def _get_param_names(self) -> list[str]:
        # The signature's parameters plus the prefixed skorch parameters given as kwargs.
        names = set(super()._get_param_names())
        names.update(k for k in vars(self) if k.startswith(SKORCH_PREFIXES))
        return sorted(names)

    def set_params(self, **params: Any) -> HierarchicalClassifier:
        """Set parameters, including new prefixed skorch ones (``module__hidden_units=...``).

        Returns
        -------
        self : HierarchicalClassifier
        """
        prefixed = {k: v for k, v in params.items() if k.startswith(SKORCH_PREFIXES)}
        others = {k: v for k, v in params.items() if k not in prefixed}
        _check_kwargs(others, self)
        vars(self).update(prefixed)
        if others:
            super().set_params(**others)
        return self

    def _skorch_kwargs(self, prefix: str | None = None) -> dict[str, Any]:
        kwargs = {k: v for k, v in vars(self).items() if k.startswith(SKORCH_PREFIXES)}
        if prefix is not None:
            kwargs = {k[len(prefix):]: v for k, v in kwargs.items() if k.startswith(prefix)}
        return kwargs

    def _check_hyperparams(self) -> None:
        _check_kwargs({k: None for k in vars(self) if not k.endswith("_") and not k.startswith("_")}, self)
        module = self.module
        if module is not None and (isinstance(module, torch.nn.Module) or not isinstance(module, type)):
            raise TypeError(
                f"module must be a torch.nn.Module class, not an instance ({type(module).__name__} given): "
                "pass the class and set its arguments with module__* parameters, e.g. module__hidden_units=64"
            )
        if module is not None and not issubclass(module, torch.nn.Module):
            raise TypeError(f"module must be a subclass of torch.nn.Module, got {module!r}")
        if self.semantics == "terminal" and self.stop is False:
            raise ValueError(
                "semantics='terminal' needs stop=True (or stop=None): without stop scores the model cannot "
                "learn where a path ends"
            )

    # ------------------------------------------------------------------ input validation
    def _validate_X(self, X: Any, reset: bool) -> Any:
        if isinstance(X, torch.Tensor):
            if X.ndim != 2:
                raise ValueError(
                    f"Expected a 2-D X of shape (n_samples, n_features), got a tensor of shape {tuple(X.shape)}"
                )
            if not X.is_floating_point():
                X = X.to(torch.float32)
            if X.shape[0] < 1:
                raise ValueError(
                    f"Found array with 0 sample(s) (shape={tuple(X.shape)}) while a minimum of 1 is required."
                )
            if bool(torch.isnan(X).any()):
                raise ValueError("Input X contains NaN.")
            if bool(torch.isinf(X).any()):
                raise ValueError("Input X contains infinity.")
            n_features = int(X.shape[1])
            if reset:
                self.n_features_in_ = n_features
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            elif n_features != self.n_features_in_:
                raise ValueError(
                    f"X has {n_features} features, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input."
                )
            return X
        return validate_data(
            self, X, reset=reset, accept_sparse="csr", dtype=[np.float32, np.float64], ensure_all_finite=True
        )

    def _resolve_tree(self, y: Any, classes: Any = None) -> tuple[Tree, Any]:
        if self.tree is not None:
            pad = default_pad_label(self.tree.labels) if self.pad_label is None else self.pad_label
            return self.tree, pad
        source = y if classes is None else classes
        values = as_host_labels(source, self.pad_label)
        if values.ndim == 1:
            check_classification_targets(values)
        tree, pad = learn_tree(values, self.pad_label, allow_flat=True)
        if self.pad_label is None:
            pad = default_pad_label(tree.labels)
        return tree, pad

    def _encode_y(self, X: Any, y: Any) -> np.ndarray:
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        values = as_host_labels(y, self.pad_label_)
        check_consistent_length(X, values)
        return labels_to_ids(values, self.tree_, self.pad_label_)

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None) -> HierarchicalClassifier:
        """Train the network on labels at any depth of the tree.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor, torch Dataset} of shape (n_samples, n_features)
            Features. Sparse matrices are made dense one mini-batch at a time. A torch
            ``Dataset`` or ``IterableDataset`` yielding ``(x, label)`` pairs is streamed
            (``y`` must then be None and ``tree`` given; see ``docs/scale-out.md``).
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            Labels (str or int) at any depth of the tree, or label paths from the top
            level down, right-padded with ``pad_label`` (ragged lists of lists work too).

        Returns
        -------
        self : HierarchicalClassifier
        """
        # -- issue 13 hook: streaming from a torch Dataset / IterableDataset (_streaming.py)
        from ._streaming import fit_dataset, is_dataset

        if is_dataset(X):
            return fit_dataset(self, X, y, epochs=None)
        # -- end of hook
        if self.warm_start and hasattr(self, "net_"):
            return self._continue(X, y, epochs=None)
        return self._fit_new(X, y, epochs=None)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X: Any, y: Any = None, classes: Any = None) -> HierarchicalClassifier:
        """Train for one epoch, continuing from the current weights (if any).

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            As in :meth:`fit`; every label must be a class of ``tree_``.
        classes : array-like, default=None
            Used only at the first call and only when ``tree`` is None: the labels (or
            label paths) to learn the tree from, as ``y`` does in :meth:`fit`.

        Returns
        -------
        self : HierarchicalClassifier
        """
        # -- issue 13 hook: streaming from a torch Dataset / IterableDataset (_streaming.py)
        from ._streaming import fit_dataset, is_dataset

        if is_dataset(X):
            return fit_dataset(self, X, y, epochs=1)
        # -- end of hook
        if hasattr(self, "net_"):
            return self._continue(X, y, epochs=1)
        return self._fit_new(X, y, epochs=1, classes=classes)

    def _fit_new(self, X: Any, y: Any, epochs: int | None, classes: Any = None) -> HierarchicalClassifier:
        from ..ops.groups import n_outputs

        self._check_hyperparams()
        for attr in ("net_", "_rng_state_"):
            if hasattr(self, attr):
                delattr(self, attr)
        X = self._validate_X(X, reset=True)
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        self.tree_, self.pad_label_ = self._resolve_tree(y, classes)
        check_pad_not_a_label(self.tree_, self.pad_label_)
        ids = self._encode_y(X, y)
        self.classes_ = self.tree_.labels
        self.n_levels_ = self.tree_.n_levels
        self.module_class_ = self._module_class(X)
        self.partition_ = self._resolve_partition(self.module_class_)
        self.stop_ = (self.semantics == "terminal") if self.stop is None else bool(self.stop)
        self.path_local_ = (
            self.partition_ == "sibling"
            and _scores_columns(self.module_class_)
            and set(self._skorch_kwargs("criterion__")) <= {"reduction", "semantics"}
        )
        self.n_scores_ = int(n_outputs(self.tree_, partition=self.partition_, stop=self.stop_))
        seed = None
        if self.random_state is not None:
            seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        net = self._build_net(seed)
        with self._rng(seed):
            net.initialize()
            net.partial_fit(self._dataset(X, ids), None, epochs=epochs)
        self.net_ = net
        return self

    def _continue(self, X: Any, y: Any, epochs: int | None) -> HierarchicalClassifier:
        check_is_fitted(self)
        self._check_hyperparams()
        stop = (self.semantics == "terminal") if self.stop is None else bool(self.stop)
        changed = [
            name
            for name, now, then in (
                ("partition", self._resolve_partition(self.module_class_), self.partition_),
                ("stop", stop, self.stop_),
                ("tree", self.tree if self.tree is not None else self.tree_, self.tree_),
            )
            if not (now is then or now == then)
        ]
        if changed:
            raise ValueError(
                f"cannot continue training: {', '.join(changed)} changed since the model was fitted; "
                "fit afresh with warm_start=False"
            )
        X = self._validate_X(X, reset=False)
        ids = self._encode_y(X, y)
        self.net_.set_params(**self._changed_net_params())
        with self._rng(None):
            self.net_.partial_fit(self._dataset(X, ids), None, epochs=epochs)
        return self

    def _module_class(self, X: Any) -> type[torch.nn.Module]:
        """The network class: the user's, else SparseMLP for sparse X and MLP otherwise."""
        if self.module is not None:
            return self.module
        return SparseMLP if sp.issparse(X) else MLP

    def _resolve_partition(self, module: type[torch.nn.Module]) -> str:
        if self.partition != "auto":
            return self.partition
        return "sibling" if _scores_columns(module) else "level"

    def _dataset(self, X: Any, ids: np.ndarray | None = None) -> _TreeDataset:
        return _TreeDataset(X, ids, sparse_batches=getattr(self.module_class_, "accepts_sparse", False))

    def _changed_net_params(self) -> dict[str, Any]:
        """Parameters to push to the fitted net before continuing: those that changed."""
        current = self.net_.get_params(deep=False)
        wanted = {"lr": self.lr, "batch_size": self.batch_size, "max_epochs": self.max_epochs, "verbose": self.verbose}
        wanted.update(
            {k: v for k, v in self._skorch_kwargs().items() if not k.startswith(("module__", "callbacks__"))}
        )
        changed = {}
        for key, value in wanted.items():
            old = current.get(key, inspect.Parameter.empty)
            try:
                same = old is value or bool(old == value)
            except Exception:  # arrays and the like: compare by identity only
                same = False
            if not same:
                changed[key] = value
        return changed

    @contextlib.contextmanager
    def _rng(self, seed: int | None) -> Iterator[None]:
        """Seeded torch RNG inside, the caller's global RNG state restored outside.

        ``seed`` starts a fresh stream (fit); ``None`` resumes the stream where the last
        fit or partial_fit left it, so a sequence of partial fits is reproducible too.
        """
        if self.random_state is None:
            yield
            return
        if seed is None and not hasattr(self, "_rng_state_"):  # fitted unseeded, seeded since
            seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        cuda = torch.device(self.device).type == "cuda" and torch.cuda.is_available()
        devices = [torch.device(self.device).index or 0] if cuda else []
        with torch.random.fork_rng(devices=devices):
            if seed is not None:
                torch.default_generator.manual_seed(seed)
                if cuda:
                    torch.cuda.manual_seed(seed)
            else:
                torch.set_rng_state(self._rng_state_[0])
                if cuda and self._rng_state_[1] is not None:
                    torch.cuda.set_rng_state(self._rng_state_[1])
            yield
            self._rng_state_ = (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)

    def _build_net(self, seed: int | None) -> _TreeNet:
        from ..losses import HierarchicalCrossEntropy
        from ..losses import PathLocalCrossEntropy

        module = self.module_class_
        module_kwargs = self._skorch_kwargs("module__")
        try:
            signature = inspect.signature(module.__init__).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
            signature = {}
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
        for name, value in (("n_features", self.n_features_in_), ("n_outputs", self.n_scores_)):
            if name in module_kwargs:
                if module_kwargs[name] != value:
                    what = "features in X" if name == "n_features" else (
                        f"scores the tree needs ({self.tree_.n_classes} classes"
                        + (f" + {value - self.tree_.n_classes} stops" if self.stop_ else "")
                        + f", partition={self.partition_!r})"
                    )
                    raise ValueError(
                        f"module__{name}={module_kwargs[name]!r} disagrees with the data: there are {value} {what}; "
                        f"leave module__{name} unset and the classifier fills it in"
                    )
            elif name in signature or takes_any:
                module_kwargs[name] = value

        callbacks = [copy.deepcopy(cb) for cb in (self.callbacks or [])]
        train_split = self.train_split
        if self.early_stopping:
            if train_split is None:
                train_split = ValidSplit(self.validation_fraction, stratified=False, random_state=seed)
            callbacks.append(
                ("early_stopping", EarlyStopping(
                    monitor="valid_loss", patience=self.n_iter_no_change, threshold=self.tol, load_best=True
                ))
            )
        if self.verbose:
            callbacks.append(("progress_bar", ProgressBar()))

        if self.path_local_:
            criterion = {"criterion": PathLocalCrossEntropy}
        else:
            criterion = {
                "criterion": HierarchicalCrossEntropy,
                "criterion__partition": self.partition_,
                # Targets were checked when y was encoded; skip the per-batch check (a GPU sync).
                "criterion__validate": False,
            }
        kwargs = {
            **criterion,
            "iterator_train__shuffle": True,
            "iterator_train__collate_fn": collate_batch,
            "iterator_valid__collate_fn": collate_batch,
        }
        user_kwargs = self._skorch_kwargs()
        optimizer = self.optimizer
        if optimizer is None:
            optimizer = LazyAdam if getattr(module, "accepts_sparse", False) else torch.optim.Adam
        if (
            optimizer in (torch.optim.Adam, torch.optim.AdamW)
            and "optimizer__fused" not in user_kwargs
            and "optimizer__foreach" not in user_kwargs
            and torch.device(self.device).type in ("cpu", "cuda")
        ):
            # torch's default Adam steps tensor by tensor; the fused kernel took 4.7 ms instead
            # of 58 ms per step on an 11,110 x 256 output layer (benchmarks/bench_peers.py).
            kwargs["optimizer__fused"] = True
        kwargs.update({k: v for k, v in user_kwargs.items() if not k.startswith("module__")})
        kwargs.update({f"module__{k}": v for k, v in module_kwargs.items()})
        return _TreeNet(
            module=module,
            criterion__tree=self.tree_,
            criterion__stop=self.stop_,
            optimizer=optimizer,
            lr=self.lr,
            max_epochs=self.max_epochs,
            batch_size=self.batch_size,
            iterator_train=DataLoader,
            iterator_valid=DataLoader,
            train_split=train_split,
            callbacks=callbacks,
            predict_nonlinearity=None,
            warm_start=False,
            verbose=self.verbose,
            device=self.device,
            n_scores=self.n_scores_,
            path_local=self.path_local_,
            **kwargs,
        )

    # ------------------------------------------------------------------ inference
    def _score_batches(self, X: Any) -> Iterator[torch.Tensor]:
        """Raw scores, one mini-batch at a time, on the net's device."""
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        net = self.net_
        net.batch_size = self.batch_size  # an inference setting too: set_params applies at once
        with torch.no_grad():
            for scores in net.forward_iter(self._dataset(X), training=False, device=net.device):
                yield scores

    def _hidden_batches(self, X: Any) -> Iterator[torch.Tensor]:
        """The module's hidden representation (``encode``), one mini-batch at a time."""
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        net = self.net_
        net.batch_size = self.batch_size
        net.module_.eval()
        with torch.no_grad():
            for batch in net.get_iterator(self._dataset(X), training=False):
                Xi, _ = unpack_data(batch)
                yield net.module_.encode(to_tensor(Xi, device=net.device))

    def _best_first(self) -> bool:
        """Whether decoding searches best-first (scoring only expanded groups) instead of scoring all."""
        return self.path_local_ and self.decoding == "best"

    def _decode_best_first(self, X: Any, k: int | None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        from ..ops.best_first import best_first_paths

        kwargs = self._decode_kwargs()
        for hidden in self._hidden_batches(X):
            yield best_first_paths(
                self.net_.module_.scorer(hidden), hidden.shape[0], self.tree_, stop=self.stop_,
                semantics=kwargs["semantics"], k=k, like=hidden,
            )

    def _decode_kwargs(self) -> dict[str, Any]:
        check_is_fitted(self)
        if self.semantics == "terminal" and not self.stop_:
            raise ValueError(
                "semantics='terminal' needs a model trained with stop scores; this one was fitted with stop=False. "
                "Refit with stop=True, or predict with semantics='partial'"
            )
        return {"partition": self.partition_, "stop": self.stop_, "semantics": self.semantics}

    def decision_function(self, X: Any) -> np.ndarray:
        """Raw scores of the module.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of float32 of shape (n_samples, n_scores_)
            The first ``n_classes`` columns follow ``classes_``; with ``stop_`` the stop
            scores follow, one per group except group 0 (see :meth:`predict_stop_proba`).
        """
        return np.concatenate([s.cpu().numpy() for s in self._score_batches(X)])

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Log of :meth:`predict_proba`, computed in log space.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of float32 of shape (n_samples, n_classes)
        """
        from ..ops.groups import group_log_softmax

        check_is_fitted(self)
        C = self.tree_.n_classes
        out = [
            group_log_softmax(s[:, :C].contiguous(), self.tree_, partition=self.partition_, stop=False).cpu().numpy()
            for s in self._score_batches(X)
        ]
        return np.concatenate(out)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probability of each class within its group, in ``classes_`` order.

        Under ``partition="level"`` a group is a level: column ``c`` is the probability that
        the sample's class at the depth of ``c`` is ``c``. Under ``"sibling"`` a group is a
        set of siblings: column ``c`` is the probability of ``c`` given its parent. Each
        group's columns sum to 1.

        With ``stop_``, a group's softmax also includes its stop score. The probabilities
        here are conditional on the path going on into the group (stop excluded and the
        rest renormalised), so each group still sums to 1; :meth:`predict_stop_proba` gives
        the stop probabilities, and ``proba * (1 - stop)`` the unconditional ones.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of float32 of shape (n_samples, n_classes)
        """
        return np.exp(self.predict_log_proba(X))

    def predict_stop_proba(self, X: Any) -> np.ndarray:
        """Probability of each group's stop score (models fitted with ``stop=True``).

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        stop_proba : ndarray of float32 of shape (n_samples, n_scores_ - n_classes)
            Column ``j`` is the stop of group ``j + 1`` (group 0 has none): the probability
            that the path ends just above that group, given that it reached the group's
            parent level. Under ``"level"``, column ``d`` is "the path ends at depth ``d``";
            under ``"sibling"``, the column of an internal node ``n`` is "the path ends at
            ``n``". ``hiclass_parallel.ops.groups.stop_columns(tree_, partition_) - n_classes``
            gives each internal node's column.
        """
        from ..ops.groups import group_log_softmax

        check_is_fitted(self)
        if not self.stop_:
            raise ValueError("this model has no stop scores: fit it with stop=True (or semantics='terminal')")
        C = self.tree_.n_classes
        out = [
            torch.exp(group_log_softmax(s, self.tree_, partition=self.partition_, stop=True)[:, C:]).cpu().numpy()
            for s in self._score_batches(X)
        ]
        return np.concatenate(out)

    def _predict_ids(self, X: Any) -> np.ndarray:
        """Best valid paths of node ids, (n_samples, n_levels_), padded with -1."""
        from ..ops.decode import best_paths

        kwargs = self._decode_kwargs()
        if self._best_first():
            return np.concatenate(
                [p.cpu().numpy().astype(np.int64, copy=False) for p, _ in self._decode_best_first(X, None)]
            )
        threshold = self.threshold if self.decoding == "threshold" else None
        out = []
        for scores in self._score_batches(X):
            paths, _ = best_paths(scores, self.tree_, threshold=threshold, **kwargs)
            out.append(paths.cpu().numpy().astype(np.int64, copy=False))
        return np.concatenate(out)

    def _label_lookup(self) -> np.ndarray:
        """``classes_`` with the pad label appended: indexing it with -1 gives the pad."""
        labels = self.classes_
        pad = self.pad_label_
        if labels.dtype.kind in "iu" and isinstance(pad, (int, np.integer)) and not isinstance(pad, bool):
            return np.append(labels, np.int64(pad))
        out = np.empty(labels.size + 1, dtype=object)
        out[:-1] = labels
        out[-1] = pad
        return out

    def predict(self, X: Any) -> np.ndarray:
        """Predict ancestral paths of labels, always valid paths of the tree.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        paths : ndarray of shape (n_samples, n_levels_)
            Labels from the top level down, right-padded with ``pad_label_`` (``""`` for
            string labels, ``-1`` for integer labels, unless ``pad_label`` says otherwise).
            Integer labels give an int64 array; other labels an object array.
        """
        ids = self._predict_ids(X)
        return self._label_lookup()[ids]

    def predict_node(self, X: Any) -> np.ndarray:
        """Node id of the last node of each predicted path.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        nodes : ndarray of int64 of shape (n_samples,)
            Indices into ``classes_`` (and ``tree_``): node identity without label look-ups.
        """
        paths = self._predict_ids(X)
        depth = (paths != PAD).sum(axis=1) - 1
        return paths[np.arange(paths.shape[0]), depth]

    def predict_labels(self, X: Any) -> np.ndarray:
        """Label of the last node of each predicted path: one label per sample.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Elements of ``classes_``.
        """
        nodes = self.predict_node(X)
        return self.classes_[nodes]

    def predict_top_k(self, X: Any, k: int | None = None, return_log_prob: bool = False) -> Any:
        """The ``k`` most probable valid paths of each sample, best first.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        k : int, default=None
            Number of paths; ``None`` means the ``top_k`` parameter. At most the number of
            candidate nodes (leaves for ``semantics="partial"``, all nodes for ``"terminal"``).
        return_log_prob : bool, default=False
            Also return each path's joint log-probability.

        Returns
        -------
        paths : ndarray of shape (n_samples, k, n_levels_)
            Label paths, padded as in :meth:`predict`.
        log_prob : ndarray of float32 of shape (n_samples, k)
            Only when ``return_log_prob``.
        """
        from ..ops.decode import topk_paths

        kwargs = self._decode_kwargs()
        k = self.top_k if k is None else int(k)
        n_candidates = self.tree_.n_classes if self.semantics == "terminal" else int(self.tree_.is_leaf.sum())
        if not 1 <= k <= n_candidates:
            raise ValueError(f"k={k} must be between 1 and the number of candidate paths ({n_candidates})")
        paths, log_prob = [], []
        batches = (
            self._decode_best_first(X, k) if self._best_first()
            else (topk_paths(scores, self.tree_, k, **kwargs) for scores in self._score_batches(X))
        )
        for p, lp in batches:
            paths.append(p.cpu().numpy().astype(np.int64, copy=False))
            log_prob.append(lp.cpu().numpy())
        labels = self._label_lookup()[np.concatenate(paths)]
        return (labels, np.concatenate(log_prob)) if return_log_prob else labels

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Hierarchical F1 (micro-averaged over samples) of :meth:`predict` against ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            True labels at any depth, or label paths.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
            :func:`hiclass_parallel.metrics.hierarchical_f1_score`; higher is better, 1 is
            a perfect match of every path.
        """
        from ..metrics import hierarchical_f1_score

        check_is_fitted(self)
        values = as_host_labels(y, self.pad_label_)
        check_consistent_length(X, values)
        true = labels_to_ids(values, self.tree_, self.pad_label_)
        pred = self.predict_node(X)
        # Node ids, not labels: node identity without a second label look-up.
        return float(
            hierarchical_f1_score(true, pred, tree=self.tree_, input_type="ids", sample_weight=sample_weight)
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        tags.classifier_tags.multi_class = True
        tags.non_deterministic = self.random_state is None
        return tags


def _check_kwargs(params: dict[str, Any], estimator: HierarchicalClassifier) -> None:
    """Unknown unprefixed parameter names get a hint at the prefix they probably need."""
    known = set(inspect.signature(type(estimator).__init__).parameters) - {"self", "kwargs"}
    for key in params:
        if key in known or key.startswith(SKORCH_PREFIXES):
            continue
        hint = "" if "__" in key else f" (did you mean module__{key}?)"
        raise ValueError(
            f"Invalid parameter {key!r} for estimator {type(estimator).__name__}: unprefixed parameters are "
            f"those of __init__, prefixed ones start with one of {', '.join(SKORCH_PREFIXES)}{hint}"
        )
