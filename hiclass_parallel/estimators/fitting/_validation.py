"""Every check of what a classifier is given, in one place: its settings, ``X`` and its labels.

Each check raises an error (or a warning, where the input is valid but surely not meant) that
names the setting or value and what to do instead, before anything is trained or predicted:

- settings beyond ``_parameter_constraints`` (:func:`check_params`, :func:`check_device`, at
  the start of ``fit`` before any data is read: torch's own errors here are an
  ``AssertionError`` "Torch not compiled with CUDA enabled" or a list of every device type
  torch knows); the settings read at prediction (:data:`PREDICTION_PARAMS`), which may change
  after fit (``set_params``), held to the constructor's constraints where prediction reads them
  (:func:`check_prediction_params`), and a weight given to a re-ranking term the fit did not
  build (:func:`warn_unprepared_terms`); :class:`NotBool` for numbers that ``True`` must not pass as;
- ``X`` (:func:`validate_X`): arrays through scikit-learn's ``validate_data``, torch tensors
  (kept on their device) through :func:`check_tensor` (sparse ones through
  :func:`sparse_tensor_to_csr`), with the same messages; the column indices of a CSR ``X``
  (:func:`check_column_indices`); then, on every route, values that float32 (what the network
  computes in) cannot hold (:func:`check_float32_range`); at ``fit``, dense columns orders of
  magnitude larger than the others, named (:func:`warn_if_scales_differ`);
- the labels: all internal nodes under ``semantics="partial"`` (:func:`suggest_terminal`);
- continued training (``warm_start``, ``partial_fit``): changed parameters the fitted network
  cannot take (:func:`warn_ignored_changes`).

Sample and class weights are checked where they are made (:mod:`._weights`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.utils._param_validation import Interval, validate_parameter_constraints
from sklearn.utils.validation import validate_data

from ...exceptions import FeatureScaleWarning, IgnoredSettingWarning, caller_stacklevel

__all__ = ["PREDICTION_PARAMS", "NotBool", "check_column_indices", "check_device", "check_float32_range",
           "check_params", "check_prediction_params", "check_tensor", "sparse_tensor_to_csr", "suggest_terminal",
           "validate_X", "warn_if_scales_differ", "warn_ignored_changes", "warn_unprepared_terms"]


# ---------------------------------------------------------------------------- settings
#: The parameters prediction reads (``decision_function``, ``predict*``, ``score``), which may
#: be changed after fit.
PREDICTION_PARAMS = ("semantics", "decoding", "threshold", "top_k", "prototypes", "prototype_candidates",
                     "flat_term", "batch_size")


class NotBool(Interval):
    """An :class:`~sklearn.utils._param_validation.Interval` that no ``bool`` satisfies: where
    ``True`` would read as "on" but mean the number 1 (``prototypes=True`` is not ``"auto"``)."""

    def is_satisfied_by(self, val: Any) -> bool:
        return not isinstance(val, bool) and super().is_satisfied_by(val)

    def __str__(self) -> str:
        return f"{super().__str__()} (not a bool)"


def check_prediction_params(estimator: Any) -> None:
    """Raise ``InvalidParameterError`` (naming the parameter, its value and what it may be)
    unless the estimator's :data:`PREDICTION_PARAMS` meet its ``_parameter_constraints``:
    ``set_params`` after fit validates nothing, and an unknown ``decoding`` or a negative
    ``prototypes`` would otherwise act as some other setting."""
    constraints = type(estimator)._parameter_constraints
    names = [name for name in PREDICTION_PARAMS if name in constraints and hasattr(estimator, name)]
    validate_parameter_constraints({name: constraints[name] for name in names},
                                   {name: getattr(estimator, name) for name in names},
                                   caller_name=type(estimator).__name__)


def warn_unprepared_terms(estimator: Any) -> None:
    """Warn (:class:`~hiclass_parallel.exceptions.IgnoredSettingWarning`) for each re-ranking
    term given a weight after fit that the fit did not build, naming the setting and the refit
    that would build it.

    ``prototypes`` and ``flat_term`` may change after fit, but only the weight of a term the
    fit built: without ``prototypes_`` (a fit with ``prototypes=None``) or ``flat_term_`` (a
    fit that kept no flat term) a number would change nothing, silently. ``"auto"`` stands for
    the fit's choice, none included, and ``None`` or 0 ask for no term: neither warns.
    """
    if not getattr(type(estimator), "_reranks", False):
        return
    terms = (("prototypes", "prototypes_", "the fit built no class prototypes"),
             ("flat_term", "flat_term_", "the fit kept no flat term"))
    for name, fitted, missing in terms:
        value = getattr(estimator, name, None)
        if value is None or isinstance(value, str) or value == 0 or getattr(estimator, fitted, None) is not None:
            continue
        reason = getattr(estimator.config_, "flat_term_reason", "") if name == "flat_term" else ""
        # The predict methods reach here from different depths: point at the user's line.
        warnings.warn(
            f"{name}={value!r} asks to re-rank the answers, but {missing}"
            f"{f' ({reason})' if reason else ''}, so predictions ignore it; fit again with {name}={value!r} "
            "to build it",
            IgnoredSettingWarning,
            stacklevel=caller_stacklevel(),
        )


def check_device(device: Any) -> None:
    """Raise ``ValueError`` unless ``device`` names a torch device that this machine has.

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``...

    Examples
    --------
    >>> check_device("cpu")
    >>> check_device("nonsense")
    Traceback (most recent call last):
    ...
    ValueError: device='nonsense' is not a torch device: use 'cpu', 'cuda' or 'cuda:N' (a GPU index), or 'mps'
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"device={device!r} is not a torch device: use 'cpu', 'cuda' or 'cuda:N' (a GPU index), or 'mps'"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "torch was built without CUDA" if torch.version.cuda is None else "torch sees no CUDA GPU"
            raise ValueError(f"device={device!r} but {why} on this machine: use device='cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r} but this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})"
            )
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"device={device!r} but torch sees no MPS (Apple GPU) device here: use device='cpu'")


def check_params(estimator: Any) -> None:
    """The checks of ``fit`` beyond ``_parameter_constraints``: unknown parameter names, a module
    instance instead of a class, the device, terminal semantics without stops."""
    from ._params import check_kwargs

    check_kwargs({k: None for k in vars(estimator) if not k.endswith("_") and not k.startswith("_")}, estimator)
    module = estimator.module
    if module is not None and (isinstance(module, torch.nn.Module) or not isinstance(module, type)):
        raise TypeError(
            f"module must be a torch.nn.Module class, not an instance ({type(module).__name__} given): "
            "pass the class and set its arguments with module__* parameters, e.g. module__hidden_units=64"
        )
    if module is not None and not issubclass(module, torch.nn.Module):
        raise TypeError(f"module must be a subclass of torch.nn.Module, got {module!r}")
    check_device(estimator.device)
    if estimator.semantics == "terminal" and estimator.stop is False:
        raise ValueError(
            "semantics='terminal' needs stop=True (or stop=None): without stop scores the model cannot "
            "learn where a path ends"
        )


# ---------------------------------------------------------------------------- X
#: The largest magnitude a float32 holds; a larger finite float64 becomes ``inf`` in the network.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def validate_X(estimator: Any, X: Any, reset: bool) -> Any:
    """``X`` checked (2-D, samples, finite, floating point); with ``reset`` the estimator's
    ``n_features_in_`` (and ``feature_names_in_``) are set, else ``X`` must match them; every
    value must fit in float32 (:func:`check_float32_range`)."""
    if not isinstance(X, torch.Tensor):
        return check_float32_range(check_column_indices(validate_data(
            estimator, X, reset=reset, accept_sparse="csr", dtype=[np.float32, np.float64], ensure_all_finite=True
        )))
    X = check_float32_range(check_tensor(X))
    n_features = int(X.shape[1])
    if reset:
        estimator.n_features_in_ = n_features
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
    elif n_features != estimator.n_features_in_:
        raise ValueError(
            f"X has {n_features} features, but {type(estimator).__name__} is expecting "
            f"{estimator.n_features_in_} features as input."
        )
    return X


#: A dense column whose root mean square is this many times the median column's is named by
#: :func:`warn_if_scales_differ` (two orders of magnitude: a year beside unit-scale features).
SCALE_RATIO = 100.0
#: Rows :func:`warn_if_scales_differ` looks at (evenly spaced): the check costs O(rows x
#: columns) at most this many rows, on any X.
SCALE_ROWS = 10_000


def warn_if_scales_differ(estimator: Any, X: Any) -> None:
    """Warn (:class:`~hiclass_parallel.exceptions.FeatureScaleWarning`), naming them, when
    columns of a dense ``X`` are orders of magnitude larger than the others.

    A column's scale is its root mean square (over at most :data:`SCALE_ROWS` rows): the
    magnitude the network's first layer sees, offset included (``1990 + u`` is large
    although it varies little). Columns more than :data:`SCALE_RATIO` times the median
    column's are named (``feature_names_in_`` where ``X`` had names). Sparse ``X`` is not
    checked.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> X = np.column_stack([np.random.default_rng(0).normal(size=(50, 3)), np.full(50, 1990.5)])
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_scales_differ(SimpleNamespace(), X)
    >>> print(str(caught[0].message).split(":")[0])
    X has columns orders of magnitude larger than the others
    """
    if sp.issparse(X) or getattr(X, "layout", torch.strided) != torch.strided or X.ndim != 2 or X.shape[1] < 2:
        return
    n = int(X.shape[0])
    rows = slice(None) if n <= SCALE_ROWS else np.linspace(0, n - 1, SCALE_ROWS).astype(np.int64)
    if isinstance(X, torch.Tensor):
        sample = X[torch.as_tensor(rows, device=X.device) if not isinstance(rows, slice) else rows]
        rms = torch.sqrt(torch.mean(sample.double() ** 2, dim=0)).cpu().numpy()
    else:
        rms = np.sqrt(np.mean(np.square(np.asarray(X[rows], dtype=np.float64)), axis=0))
    scaled = rms[rms > 0]
    if scaled.size < 2:
        return
    median = float(np.median(scaled))
    large = np.flatnonzero(rms > SCALE_RATIO * median)
    if not large.size:
        return
    names = getattr(estimator, "feature_names_in_", None)
    named = [f"{names[j]!r}" if names is not None else f"column {j}" for j in large[:5]]
    more = f" and {large.size - 5} more" if large.size > 5 else ""
    scales = ", ".join(f"{name} ({rms[j]:.3g})" for name, j in zip(named, large[:5]))
    warnings.warn(
        f"X has columns orders of magnitude larger than the others: {scales}{more}, against a median root mean "
        f"square of {median:.3g} over the {rms.size} columns. The network, initialised for inputs of unit scale, "
        "learns little from such input: standardise X (e.g. StandardScaler before the classifier in a Pipeline), "
        "or centre and scale those columns", FeatureScaleWarning, stacklevel=caller_stacklevel())


def check_float32_range(X: Any) -> Any:
    """``X`` unchanged, or a ``ValueError`` naming its first value outside float32's range.

    The network computes in float32, so a finite float64 beyond about 3.4e38 becomes ``inf``
    there and every score of its row NaN, which reads as a diverged training. One pass over
    the values (a dense array, a sparse matrix's stored values, a tensor) finds whether any
    is out of range; the offending row and column are looked for only then.

    Parameters
    ----------
    X : ndarray, scipy sparse matrix or torch.Tensor of shape (n_samples, n_features)
        Finite values (already checked).

    Returns
    -------
    X : the same object

    Examples
    --------
    >>> import numpy as np
    >>> check_float32_range(np.array([[1.0, 2.0], [3.0, -1e39]]))
    Traceback (most recent call last):
    ...
    ValueError: Input X[1, 1] = -1e+39 is outside the range of float32 (magnitude at most 3.4e+38), which the network computes in: scale the features (e.g. StandardScaler) or clip them
    """
    if isinstance(X, torch.Tensor):
        if X.dtype in (torch.float32, torch.float16, torch.bfloat16) or X.numel() == 0:
            return X
        low, high = torch.aminmax(X)  # no temporary the size of X
        if max(-float(low), float(high)) <= FLOAT32_MAX:
            return X
        row, col = (int(i) for i in torch.nonzero(X.abs() > FLOAT32_MAX)[0])
        raise _out_of_range(row, col, float(X[row, col]))
    values = X.data if sp.issparse(X) else X
    if values.dtype.itemsize <= 4 or values.size == 0 or not np.issubdtype(values.dtype, np.floating):
        return X
    if max(-float(values.min()), float(values.max())) <= FLOAT32_MAX:  # no temporary the size of X
        return X
    if sp.issparse(X):
        pos = int(np.flatnonzero(np.abs(X.data) > FLOAT32_MAX)[0])
        row, col = int(np.searchsorted(X.indptr, pos, side="right") - 1), int(X.indices[pos])
        raise _out_of_range(row, col, float(X.data[pos]))
    row, col = (int(i) for i in np.argwhere(np.abs(X) > FLOAT32_MAX)[0])
    raise _out_of_range(row, col, float(X[row, col]))


def check_column_indices(X: Any) -> Any:
    """``X`` unchanged, or a ``ValueError`` naming a stored entry of a CSR ``X`` whose column
    index lies outside ``[0, n_features)``.

    scipy checks the indices of a matrix it builds, but not those written into ``X.indices``
    afterwards (a hand-made or damaged matrix); ``validate_data`` does not check them either,
    and an index out of range would fail deep in training or prediction without naming ``X``.
    One pass over the stored indices (their minimum and maximum) decides.

    Parameters
    ----------
    X : ndarray or scipy sparse CSR matrix of shape (n_samples, n_features)

    Returns
    -------
    X : the same object

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> X = sp.csr_matrix(np.eye(3, dtype=np.float32))
    >>> X.indices[1] = 7
    >>> check_column_indices(X)
    Traceback (most recent call last):
    ...
    ValueError: X is a sparse matrix of shape (3, 3), but its stored entry 1 (row 1) has column index 7, outside [0, 3): its indices are damaged; build the matrix with scipy.sparse.csr_matrix((data, indices, indptr), shape=...), which checks them
    """
    if not sp.issparse(X) or X.format != "csr" or X.nnz == 0:
        return X
    indices = X.indices[: X.nnz]
    n_features = X.shape[1]
    if int(indices.min()) >= 0 and int(indices.max()) < n_features:
        return X
    pos = int(np.flatnonzero((indices < 0) | (indices >= n_features))[0])
    row = int(np.searchsorted(X.indptr, pos, side="right") - 1)
    raise ValueError(
        f"X is a sparse matrix of shape {X.shape}, but its stored entry {pos} (row {row}) has column index "
        f"{int(indices[pos])}, outside [0, {n_features}): its indices are damaged; build the matrix with "
        "scipy.sparse.csr_matrix((data, indices, indptr), shape=...), which checks them"
    )


def _out_of_range(row: int, col: int, value: float) -> ValueError:
    return ValueError(
        f"Input X[{row}, {col}] = {value:.6g} is outside the range of float32 (magnitude at most "
        f"{FLOAT32_MAX:.2g}), which the network computes in: scale the features (e.g. StandardScaler) or clip them"
    )


def check_tensor(X: torch.Tensor) -> torch.Tensor | sp.csr_matrix:
    """A torch X checked as ``validate_data`` checks arrays (2-D, samples, finite), made floating
    point and detached from autograd (an encoder's output that requires grad is read as its values).

    A sparse tensor (COO, CSR, CSC...) comes back as the scipy CSR matrix of its values
    (:func:`sparse_tensor_to_csr`), which every module and decoder takes.
    """
    # The classifiers never differentiate through X; a detached view (no copy) lets every route
    # (the re-ranking's NumPy reads among them) take it.
    X = X.detach()
    if X.layout != torch.strided:
        return sparse_tensor_to_csr(X)
    if X.ndim != 2:
        raise ValueError(f"Expected a 2-D X of shape (n_samples, n_features), got a tensor of shape {tuple(X.shape)}")
    if not X.is_floating_point():
        X = X.to(torch.float32)
    if X.shape[0] < 1:
        raise ValueError(f"Found array with 0 sample(s) (shape={tuple(X.shape)}) while a minimum of 1 is required.")
    if bool(torch.isnan(X).any()):
        raise ValueError("Input X contains NaN.")
    if bool(torch.isinf(X).any()):
        raise ValueError("Input X contains infinity.")
    return X


def sparse_tensor_to_csr(X: torch.Tensor) -> sp.csr_matrix:
    """A 2-D torch sparse tensor as a scipy CSR matrix (on the host), checked as ``validate_data``
    checks a scipy X: samples, finite stored values, float32 or float64.

    Batches of a torch sparse tensor cannot be sliced by row (torch has no row indexing for
    sparse layouts); the scipy CSR route is the one sparse route the classifiers have, and it
    keeps the input sparse: only the stored values move, never a dense copy.
    """
    if X.ndim != 2 or X.dense_dim() != 0:
        raise ValueError(
            f"a torch sparse X must be 2-D with scalar values, shape (n_samples, n_features); got a {X.layout} "
            f"tensor of shape {tuple(X.shape)} with {X.dense_dim()} dense dimension(s)"
        )
    coo = (X if X.layout == torch.sparse_coo else X.to_sparse_coo()).coalesce().cpu()
    values = coo.values()
    if values.dtype not in (torch.float32, torch.float64):
        values = values.to(torch.float32)  # as check_tensor makes dense tensors floating point
    rows, cols = coo.indices().numpy()
    out = sp.csr_matrix((values.numpy(), (rows, cols)), shape=tuple(X.shape))
    if out.shape[0] < 1:
        raise ValueError(f"Found array with 0 sample(s) (shape={out.shape}) while a minimum of 1 is required.")
    if np.isnan(out.data).any():
        raise ValueError("Input X contains NaN.")
    if np.isinf(out.data).any():
        raise ValueError("Input X contains infinity.")
    return out


# ---------------------------------------------------------------------------- labels, continued training
def warn_ignored_changes(names: list[str]) -> None:
    """Warn that ``warm_start`` / ``partial_fit`` cannot apply the changed parameters ``names``.

    The network is built once; continuing trains it as it is. Parameters it is built from
    (``module__*`` for the architecture, ``callbacks``, ``early_stopping``...: see
    :func:`~._params.changed_since_built`) take effect only in a fresh fit (``warm_start=False``).
    """
    if names:
        warnings.warn(
            f"{', '.join(names)} changed since the network was built, but warm_start/partial_fit continue "
            "training the fitted network as it is, so the change is ignored; fit with warm_start=False to "
            "apply it",
            IgnoredSettingWarning,
            stacklevel=6,  # the caller of fit / partial_fit
        )


def suggest_terminal(semantics: str, tree: Any, ids: np.ndarray) -> None:
    """Warn when labels are internal nodes but ``semantics="partial"``.

    Under partial semantics an internal label is a coarse label whose finer class is
    unknown, and predictions end at leaves: when every label is an internal node (the
    WordNet glosses: each synset's target is its parent), the labels are answers, and
    ``semantics="terminal"`` predicts them. When some labels are internal and some leaves,
    the warning says how many rows are internal and what ``"terminal"`` would do instead.
    """
    if semantics != "partial":
        return
    labelled = np.asarray(ids).reshape(-1)
    labelled = labelled[labelled >= 0]
    if labelled.size == 0 or tree.is_leaf.all():
        return
    internal = ~tree.is_leaf[labelled]
    if internal.all():
        warnings.warn(
            "every label in y is an internal node of the tree, but semantics='partial' reads them as coarse "
            "labels and predicts leaves only. If the labelled node is the answer, use semantics='terminal' "
            "(it adds stop scores so that predictions can end at internal nodes)",
            UserWarning,
            stacklevel=5,
        )
    elif internal.any():
        # Mixed: a user's taxonomy often labels some rows at a category that has subcategories.
        example = tree.labels[labelled[np.flatnonzero(internal)[0]]]
        warnings.warn(
            f"{int(internal.sum())} of {labelled.size} rows of y are labelled at internal nodes of the tree (e.g. "
            f"{example!r}), the others at leaves. semantics='partial' (the default) reads those rows as coarse "
            "labels (the finer class unknown) and predicts leaves only; semantics='terminal' reads every label as "
            "the answer and can predict internal nodes",
            UserWarning,
            stacklevel=caller_stacklevel(),
        )
