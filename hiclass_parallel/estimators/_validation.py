"""Checking ``X`` for the classifiers: arrays through scikit-learn's ``validate_data``, torch
tensors (kept on their device) through :func:`~._data.check_tensor`, with the same messages;
then, on every route, values that float32 (what the network computes in) cannot hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.utils.validation import validate_data

from ._data import check_tensor

__all__ = ["check_float32_range", "validate_X"]

#: The largest magnitude a float32 holds; a larger finite float64 becomes ``inf`` in the network.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def validate_X(estimator: Any, X: Any, reset: bool) -> Any:
    """``X`` checked (2-D, samples, finite, floating point); with ``reset`` the estimator's
    ``n_features_in_`` (and ``feature_names_in_``) are set, else ``X`` must match them; every
    value must fit in float32 (:func:`check_float32_range`)."""
    if not isinstance(X, torch.Tensor):
        return check_float32_range(validate_data(
            estimator, X, reset=reset, accept_sparse="csr", dtype=[np.float32, np.float64], ensure_all_finite=True
        ))
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


def _out_of_range(row: int, col: int, value: float) -> ValueError:
    return ValueError(
        f"Input X[{row}, {col}] = {value:.6g} is outside the range of float32 (magnitude at most "
        f"{FLOAT32_MAX:.2g}), which the network computes in: scale the features (e.g. StandardScaler) or clip them"
    )
