"""The one check of ``sample_weight`` shared by every metric (tree and DAG alike).

A negative, NaN or infinite weight has no meaning in a weighted mean of scores bounded by 1
(``[1, -1]`` once gave an F1 of 1.43), so it is refused by position and value, never folded
into the sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend import to_numpy

__all__ = ["check_sample_weight"]


def check_sample_weight(sample_weight: Any, n_samples: int) -> np.ndarray | None:
    """``sample_weight`` as float64 of shape ``(n_samples,)``, or ``None`` for no weights.

    Parameters
    ----------
    sample_weight : array-like of shape (n_samples,) or None
        Weights as a list, NumPy, torch or CuPy array (moved to the host once).
    n_samples : int
        Number of samples the metric scores.

    Returns
    -------
    ndarray of float64 of shape (n_samples,) or None

    Raises
    ------
    ValueError
        When the weights are not real numbers (complex ones included), not of shape
        ``(n_samples,)``, or one of them is
        negative, NaN or infinite (the error names the first such weight and its index).

    Examples
    --------
    >>> check_sample_weight([1, 2], 2)
    array([1., 2.])
    >>> check_sample_weight([1, -1], 2)
    Traceback (most recent call last):
    ...
    ValueError: sample_weight[1] is -1.0: weights must be finite and non-negative
    """
    if sample_weight is None:
        return None
    raw = np.asarray(to_numpy(sample_weight))
    if np.iscomplexobj(raw):  # a cast to float would drop the imaginary parts without a word
        raise ValueError(f"sample_weight must be real numbers, got {raw.dtype}")
    try:
        w = raw.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"sample_weight must be numbers, got {raw.dtype}") from None
    if w.ndim != 1 or w.shape[0] != n_samples:
        raise ValueError(f"sample_weight must have shape ({n_samples},), got {w.shape}")
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        i = int(bad[0])
        more = f" ({bad.size} such weights)" if bad.size > 1 else ""
        raise ValueError(f"sample_weight[{i}] is {float(w[i])!r}: weights must be finite and non-negative{more}")
    return w
