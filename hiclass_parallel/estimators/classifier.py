"""``HierarchicalClassifier``: one neural network over the whole tree, a scikit-learn citizen.

The classifier wraps a skorch :class:`~skorch.NeuralNet` (a plain ``NeuralNet`` subclass: the
targets it trains on are node ids scored by the tree loss, and ``NeuralNetClassifier``'s
accuracy scoring and stratified split do not apply to them). The wrapper owns everything
scikit-learn sees: parameters stored unchanged in ``__init__``, validation in ``fit``, fitted
state ending in ``_``; the skorch net it builds is the fitted attribute ``net_``.

Data flow: ``y`` (labels at any depth, or label paths) -> node ids (``PathEncoder``'s
reading) -> ``HierarchicalCrossEntropy`` over all levels at once (the lean loss: no
``(B, L, C)`` tensor) -> at prediction, exact decoding of the best valid path per sample.

This module holds the parameters, validation and fitting; around it: ``_params`` (the
prefixed skorch parameters and what reaches the net), ``_net`` (the skorch net, its
path-local steps and the one inference loop), ``_data`` (the dataset and its batches) and
``_predict`` (``decision_function``, ``predict_*``, ``score``).
"""

from __future__ import annotations

import contextlib
import copy
import math
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
from skorch.callbacks import EarlyStopping, ProgressBar
from skorch.dataset import ValidSplit
from torch.utils.data import DataLoader

from .._labels import as_host_labels, check_pad_not_a_label, default_pad_label, labels_to_ids, learn_tree
from ..tree import PARTITIONS, Tree
from ._checks import check_device
from ._data import TreeDataset, check_tensor, collate_batch
from ._guards import FiniteLossGuard, keep_fitted_state_on_error, suggest_terminal, warn_ignored_changes
from ._modules import MLP, SparseMLP
from ._net import TreeNet, module_kwargs, scores_columns
from ._optim import LazyAdam
from ._params import NetParamsMixin, check_kwargs
from ._predict import PredictMixin

__all__ = ["HierarchicalClassifier"]

#: Default learning rates (``lr=None``): Adam on dense modules, LazyAdam on sparse input.
DENSE_LR, SPARSE_LR = 3e-3, 5e-3

#: ``criterion__level_contrast`` of path-local training (the in-batch level softmax term of
#: :class:`~hiclass_parallel.losses.PathLocalCrossEntropy`).
LEVEL_CONTRAST = 0.3


# ---------------------------------------------------------------------------- the estimator
class HierarchicalClassifier(NetParamsMixin, PredictMixin, ClassifierMixin, BaseEstimator):
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
    decoding : {"best", "threshold", "hf1"}, default="best"
        ``"best"``: the valid path with the highest joint log-probability (the most
        probable answer: best for exact accuracy). ``"threshold"``: the path cut at its
        deepest node whose probability is at least ``threshold``. ``"hf1"``: among the
        ``top_k`` most probable answers and their ancestors, the path of highest expected
        hierarchical F1 (:func:`~hiclass_parallel.ops.expected_hf1_paths`): trades some
        exact accuracy for hF1 by backing off to a common ancestor when rivals split the
        mass.
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
    lr : float, default=None
        Learning rate. ``None``: 0.005 for modules with sparse input (:class:`SparseMLP`,
        trained by :class:`LazyAdam`), 0.003 otherwise.
    max_epochs : int, default=None
        Passes over the data in :meth:`fit` (fewer with early stopping). ``None``: 10, or
        for :class:`SparseMLP` (text) ``ceil(35 / sqrt(steps per epoch))`` within [3, 30]:
        held-out accuracy on WordNet glosses peaked after about 35 x sqrt(steps per epoch)
        steps in all at lr 0.005 (3,200 rows: 10 epochs; 8,200 rows: 7; 66,000 rows: 3;
        measured in ``docs/benchmark-text.md``): bigger data sets need more steps, but fewer
        passes.
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
    10 epochs; for sparse input :class:`SparseMLP` with lr 0.005) favour speed on CPU for
    trees of up to 100,000 classes.

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
        "decoding": [StrOptions({"best", "threshold", "hf1"})],
        "threshold": [Interval(Real, 0, 1, closed="both")],
        "top_k": [Interval(Integral, 1, None, closed="left")],
        "pad_label": "no_validation",
        "optimizer": [callable, None],
        "lr": [Interval(Real, 0, None, closed="neither"), None],
        "max_epochs": [Interval(Integral, 0, None, closed="left"), None],
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
        lr: float | None = None,
        max_epochs: int | None = None,
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

    def _check_hyperparams(self) -> None:
        check_kwargs({k: None for k in vars(self) if not k.endswith("_") and not k.startswith("_")}, self)
        module = self.module
        if module is not None and (isinstance(module, torch.nn.Module) or not isinstance(module, type)):
            raise TypeError(
                f"module must be a torch.nn.Module class, not an instance ({type(module).__name__} given): "
                "pass the class and set its arguments with module__* parameters, e.g. module__hidden_units=64"
            )
        if module is not None and not issubclass(module, torch.nn.Module):
            raise TypeError(f"module must be a subclass of torch.nn.Module, got {module!r}")
        check_device(self.device)
        if self.semantics == "terminal" and self.stop is False:
            raise ValueError(
                "semantics='terminal' needs stop=True (or stop=None): without stop scores the model cannot "
                "learn where a path ends"
            )

    # ------------------------------------------------------------------ input validation
    def _validate_X(self, X: Any, reset: bool) -> Any:
        if not isinstance(X, torch.Tensor):
            return validate_data(
                self, X, reset=reset, accept_sparse="csr", dtype=[np.float32, np.float64], ensure_all_finite=True
            )
        X = check_tensor(X)
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
        from ._streaming import fit_dataset, is_dataset  # a torch Dataset / IterableDataset

        with keep_fitted_state_on_error(self):  # a failed refit keeps the fitted model
            if is_dataset(X):
                return fit_dataset(self, X, y, epochs=None)
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
        from ._streaming import fit_dataset, is_dataset

        with keep_fitted_state_on_error(self):
            if is_dataset(X):
                return fit_dataset(self, X, y, epochs=1)
            if hasattr(self, "net_"):
                return self._continue(X, y, epochs=1)
            return self._fit_new(X, y, epochs=1, classes=classes)

    def _resolve_model(self, X: Any) -> int | None:
        """Set the model's fitted shape from the parameters, the tree and ``X`` (its kind
        picks the default module): classes, module class, partition, stops, path-local
        training, score width. Returns the fit's seed (``None`` without ``random_state``)."""
        from ..ops.groups import n_outputs

        self.classes_ = self.tree_.labels
        self.n_levels_ = self.tree_.n_levels
        self.module_class_ = self._module_class(X)
        self.partition_ = self._resolve_partition(self.module_class_)
        self.stop_ = (self.semantics == "terminal") if self.stop is None else bool(self.stop)
        self.path_local_ = (
            self.partition_ == "sibling"
            and scores_columns(self.module_class_)
            and set(self._skorch_kwargs("criterion__")) <= {"reduction", "semantics", "level_contrast"}
        )
        self.n_scores_ = int(n_outputs(self.tree_, partition=self.partition_, stop=self.stop_))
        if self.random_state is None:
            return None
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))

    def _fit_new(self, X: Any, y: Any, epochs: int | None, classes: Any = None) -> HierarchicalClassifier:
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
        self._check_targets(ids)
        seed = self._resolve_model(X)
        net = self._build_net(seed, n_rows=len(ids))
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
                ("tree", self.tree if self.tree is not None else self._fitted_hierarchy(), self._fitted_hierarchy()),
            )
            if not (now is then or now == then)
        ]
        if changed:
            raise ValueError(
                f"cannot continue training: {', '.join(changed)} changed since the model was fitted; "
                "fit afresh with warm_start=False"
            )
        warn_ignored_changes(self)
        X = self._validate_X(X, reset=False)
        ids = self._encode_y(X, y)
        self.net_.set_params(**self._changed_net_params(n_rows=len(ids)))
        # Continuing a fitted net: its weights are the user's, so a diverging epoch puts them back.
        self.net_.set_params(callbacks__finite_loss__snapshot=True)
        with self._rng(None):
            self.net_.partial_fit(self._dataset(X, ids), None, epochs=epochs)
        return self

    def _fitted_hierarchy(self) -> Any:
        """The hierarchy the model was fitted on, as the ``tree`` parameter gives it."""
        return self.tree_

    def _check_targets(self, ids: np.ndarray) -> None:
        """Advice on the encoded targets before training (a subclass may read them differently)."""
        suggest_terminal(self, ids)

    def _module_class(self, X: Any) -> type[torch.nn.Module]:
        """The network class: the user's, else SparseMLP for sparse X and MLP otherwise."""
        if self.module is not None:
            return self.module
        return SparseMLP if sp.issparse(X) else MLP

    def _max_epochs(self, n_rows: int | None) -> int:
        """``max_epochs``, or its default for this module and ``n_rows`` training rows
        (``None``: unknown, a stream without a length)."""
        if self.max_epochs is not None:
            return self.max_epochs
        if n_rows is None or not getattr(self.module_class_, "accepts_sparse", False):
            return 10
        batch = self.batch_size if self.batch_size > 0 else n_rows
        steps = max(1, math.ceil(n_rows / batch))
        return int(min(30, max(3, math.ceil(35 / math.sqrt(steps)))))

    def _lr(self) -> float:
        """``lr``, or its default for this module."""
        if self.lr is not None:
            return self.lr
        return SPARSE_LR if getattr(self.module_class_, "accepts_sparse", False) else DENSE_LR

    def _resolve_partition(self, module: type[torch.nn.Module]) -> str:
        if self.partition != "auto":
            return self.partition
        return "sibling" if scores_columns(module) else "level"

    def _dataset(self, X: Any, ids: np.ndarray | None = None) -> TreeDataset:
        return TreeDataset(X, ids, sparse_batches=getattr(self.module_class_, "accepts_sparse", False))

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

    def _criterion_params(self) -> dict[str, Any]:
        """The loss and its tree: path-local for column-scoring modules, else over every score."""
        from ..losses import HierarchicalCrossEntropy, PathLocalCrossEntropy

        if self.path_local_:
            # The in-batch level term (PathLocalCrossEntropy's level_contrast) added 0.019-0.023
            # hF1 on WordNet glosses; 0.3 of 0.1/0.3/1/3 measured best (docs/benchmark-text.md).
            return {"criterion": PathLocalCrossEntropy, "criterion__tree": self.tree_,
                    "criterion__level_contrast": LEVEL_CONTRAST}
        return {
            "criterion": HierarchicalCrossEntropy,
            "criterion__tree": self.tree_,
            "criterion__partition": self.partition_,
            # Targets were checked when y was encoded; skip the per-batch check (a GPU sync).
            "criterion__validate": False,
        }

    def _node_rows(self) -> np.ndarray:
        """For every node of ``tree_``, its class's position in ``classes_`` (the identity here)."""
        return np.arange(self.tree_.n_classes)

    def _class_feature_rows(self, features: sp.spmatrix) -> sp.csr_matrix:
        """``module__class_features`` with one row per class (``classes_`` order) as one row per
        score column: each node's class row, and under the sibling partition each stop column
        the row of the node whose children it ends at (measured better on WordNet than text-less
        stops: ``docs/benchmark-text.md``). Other shapes pass unchanged to the module's checks."""
        from ..ops.groups import stop_columns

        if features.shape[0] != len(self.classes_):
            return features
        node_rows = self._node_rows()
        rows = [node_rows]
        if self.stop_ and self.partition_ == "sibling":
            stop_col = stop_columns(self.tree_, "sibling")
            internal = np.flatnonzero(stop_col >= 0)
            rows.append(node_rows[internal[np.argsort(stop_col[internal])]])
        return sp.csr_matrix(features)[np.concatenate(rows)]

    def _build_net(self, seed: int | None, n_rows: int | None) -> TreeNet:
        module = self.module_class_
        n_stops = self.n_scores_ - self.tree_.n_classes
        sizes = {
            "n_features": (self.n_features_in_, "features in X"),
            "n_outputs": (self.n_scores_, (
                f"scores the tree needs ({self.tree_.n_classes} classes"
                + (f" + {n_stops} stops" if self.stop_ else "") + f", partition={self.partition_!r})"
            )),
        }
        module_args = module_kwargs(module, self._skorch_kwargs("module__"), sizes)
        if sp.issparse(module_args.get("class_features")):
            module_args["class_features"] = self._class_feature_rows(module_args["class_features"])

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
        callbacks.append(("finite_loss", FiniteLossGuard()))  # a NaN/inf loss stops training, named

        kwargs = self._criterion_params()
        net_params = self._net_params(n_rows)
        optimizer = self.optimizer
        if optimizer is None:
            optimizer = LazyAdam if getattr(module, "accepts_sparse", False) else torch.optim.Adam
        if (
            optimizer in (torch.optim.Adam, torch.optim.AdamW)
            and "optimizer__fused" not in net_params
            and "optimizer__foreach" not in net_params
            and torch.device(self.device).type in ("cpu", "cuda")
        ):
            # torch's default Adam steps tensor by tensor; the fused kernel took 4.7 ms instead
            # of 58 ms per step on an 11,110 x 256 output layer (benchmarks/bench_peers.py).
            kwargs["optimizer__fused"] = True
        kwargs.update(iterator_train__shuffle=True, iterator_train__collate_fn=collate_batch,
                      iterator_valid__collate_fn=collate_batch)
        kwargs.update(net_params)  # the user's prefixed parameters win over the defaults above
        kwargs.update({f"module__{k}": v for k, v in module_args.items()})
        return TreeNet(
            module=module,
            optimizer=optimizer,
            train_split=train_split,
            callbacks=callbacks,
            warm_start=False,  # warm starts are this estimator's (fit continues net_)
            criterion__stop=self.stop_,
            iterator_train=DataLoader,
            iterator_valid=DataLoader,
            predict_nonlinearity=None,
            n_scores=self.n_scores_,
            path_local=self.path_local_,
            **kwargs,
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        tags.classifier_tags.multi_class = True
        tags.non_deterministic = self.random_state is None
        return tags
