"""Checking ``X`` for the classifiers: arrays through scikit-learn's ``validate_data``, torch
tensors (kept on their device) through :func:`~._data.check_tensor`, with the same messages."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import validate_data

from ._data import check_tensor

__all__ = ["validate_X"]


def validate_X(estimator: Any, X: Any, reset: bool) -> Any:
    """``X`` checked (2-D, samples, finite, floating point); with ``reset`` the estimator's
    ``n_features_in_`` (and ``feature_names_in_``) are set, else ``X`` must match them."""
    if not isinstance(X, torch.Tensor):
        return validate_data(
            estimator, X, reset=reset, accept_sparse="csr", dtype=[np.float32, np.float64], ensure_all_finite=True
        )
    X = check_tensor(X)
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
