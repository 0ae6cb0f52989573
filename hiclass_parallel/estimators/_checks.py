"""The checks that fit and predict share: ``X``, the prediction settings, the device, decidable scores.

Each check raises an error (or a warning, where the input is valid but surely not meant) that
names the setting or value and what to do instead, before anything is trained or predicted.
They sit below every sub-package of :mod:`hiclass_parallel.estimators` so that fitting,
prediction, the answer model and saving read the same checks without importing each other
(the fit's own checks -- its settings, the labels, continued training -- are
``fitting/_validation``):

- ``X`` (:func:`validate_X`): arrays through scikit-learn's ``validate_data``, torch tensors
  (kept on their device) through :func:`check_tensor` (sparse ones through
  :func:`sparse_tensor_to_csr`), with the same messages; the column indices of a CSR ``X``
  (:func:`check_column_indices`); then, on every route, values that float32 (what the network
  computes in) cannot hold (:func:`check_float32_range`);
- the settings read at prediction (:data:`PREDICTION_PARAMS`), which may change after fit
  (``set_params``), held to the constructor's constraints where prediction reads them
  (:func:`check_prediction_params`), a weight given to a re-ranking term the fit did not build
  (:func:`warn_unprepared_terms`), the rows per prediction batch
  (:func:`inference_batch_size`); :class:`NotBool` for numbers that ``True`` must not pass as;
- the device (:func:`check_device`: at the start of ``fit`` before any data is read, and when a
  saved model is loaded onto one; torch's own errors here are an ``AssertionError`` "Torch not
  compiled with CUDA enabled" or a list of every device type torch knows);
- scores the trained network gave finite input (:func:`check_decidable`): NaN or infinite
  scores mean training diverged, :class:`~hiclass_parallel.exceptions.DivergedError`, never
  empty paths.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.utils._param_validation import Interval, validate_parameter_constraints
from sklearn.utils.validation import validate_data

from ..exceptions import DivergedError, IgnoredSettingWarning, caller_stacklevel
from ._defaults import BATCH_SIZE

__all__ = ["FLOAT32_MAX", "PREDICTION_PARAMS", "NotBool", "check_column_indices", "check_decidable", "check_device",
           "check_float32_range", "check_prediction_params", "check_tensor", "diverged_message",
           "inference_batch_size", "sparse_tensor_to_csr", "validate_X", "warn_unprepared_terms"]


# ---------------------------------------------------------------------------- prediction settings, the device
#: The parameters prediction reads (``decision_function``, ``predict*``, ``score``), which may
#: be changed after fit.
PREDICTION_PARAMS = ("semantics", "decoding", "threshold", "top_k", "prototypes", "prototype_candidates",
                     "flat_term", "path_term", "batch_size")


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

    ``prototypes``, ``flat_term`` and ``path_term`` may change after fit, but only the weight
    of a term the fit built: without the answer model's (``answer_``) class prototypes (a fit
    with ``prototypes=None``) or linear term (a fit that kept none) a number would change nothing,
    silently. ``"auto"`` stands for
    the fit's choice, none included, and ``None`` or 0 ask for no term: neither warns.
    """
    if not getattr(type(estimator), "_reranks", False):
        return
    terms = (("prototypes", "the fit built no class prototypes"), ("flat_term", "the fit kept no flat term"),
             ("path_term", "the fit kept no path-level term"))
    for name, missing in terms:
        value = getattr(estimator, name, None)
        if value is None or isinstance(value, str) or value == 0 or estimator.answer_.term(name) is not None:
            continue
        reason = getattr(estimator.config_, f"{name}_reason", "") if name != "prototypes" else ""
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


def inference_batch_size(requested: int | str) -> int:
    """Rows per prediction batch: ``batch_size``, or the default training batch for ``"auto"``.

    Examples
    --------
    >>> inference_batch_size(64), inference_batch_size("auto") == BATCH_SIZE
    (64, True)
    """
    return BATCH_SIZE if isinstance(requested, str) else int(requested)


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


# ---------------------------------------------------------------------------- decidable scores
def diverged_message(n_bad: int, n_rows: int, lr: Any) -> str:
    """The message of :class:`~hiclass_parallel.exceptions.DivergedError`: how many rows of
    finite input the trained network scored NaN or infinite, at which ``lr``, and what to change."""
    lr = f"{lr:.3g}" if isinstance(lr, (int, float)) else lr
    return (
        f"{n_bad} of {n_rows} sample(s) of finite input got NaN or infinite scores from the trained network "
        f"(lr={lr}): training diverged, though the loss stayed finite. Lower lr (e.g. by 10x), scale X "
        "(e.g. StandardScaler), or use the default optimizer"
    )


def check_decidable(n_bad: int, n_rows: int, lr: Any = None) -> None:
    """Raise :class:`~hiclass_parallel.exceptions.DivergedError` when ``n_bad`` of ``n_rows`` rows got NaN or ``+inf`` scores.

    ``X`` is checked finite before prediction, so non-finite scores come from the network's
    weights: an answer would be an empty path, which is not an answer.
    """
    if n_bad:
        raise DivergedError(diverged_message(n_bad, n_rows, lr))
