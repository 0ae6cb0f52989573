"""How well a confidence matches how often the answer is right: the expected calibration error."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backend import to_numpy
from ._weights import check_sample_weight

__all__ = ["expected_calibration_error"]


def expected_calibration_error(y_correct: Any, y_confidence: Any, *, n_bins: int = 15, return_bins: bool = False,
                               sample_weight: Any = None) -> float | tuple[float, list[dict[str, float]]]:
    """Expected calibration error: the gap between confidence and accuracy, averaged over bins.

    The answers are sorted into ``n_bins`` equal-width bins of their confidence; in each bin
    the gap is ``|mean confidence - fraction right|``, and the error is the gaps' mean weighted
    by the bins' counts (Naeini et al., 2015; Guo et al., 2017). 0 is perfect calibration.
    For a hierarchical classifier: ``y_correct = clf.predict_node(X) == true node ids``,
    ``y_confidence = clf.predict_confidence(X)`` (``docs/calibration.md``).

    Parameters
    ----------
    y_correct : array-like of bool of shape (n_samples,)
        Whether each answer is right.
    y_confidence : array-like of float of shape (n_samples,)
        The probability given to each answer, in [0, 1].
    n_bins : int, default=15
        Equal-width bins over [0, 1]; a confidence of exactly 1 falls in the last.
    return_bins : bool, default=False
        Also return the non-empty bins: ``lo``, ``hi``, mean ``confidence``, ``accuracy`` and
        ``count`` of each (a reliability curve).
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the answers: the bins' means, and their share of the error, are weighted
        (a bin's ``count`` is then its total weight; a bin of zero weight is left out).

    Returns
    -------
    ece : float
    bins : list of dict
        Only with ``return_bins``.

    Raises
    ------
    ValueError
        Lengths that differ, no samples, a confidence outside [0, 1] or NaN (the message gives
        the first offending position), ``n_bins`` below 1, or weights that are negative, NaN,
        infinite, of another length or all zero.

    Examples
    --------
    >>> from hiclass_parallel.metrics import expected_calibration_error
    >>> round(expected_calibration_error([True, True, False, False], [0.9, 0.9, 0.1, 0.1], n_bins=10), 3)
    0.1
    """
    correct = np.asarray(to_numpy(y_correct)).reshape(-1)
    confidence = np.asarray(to_numpy(y_confidence), dtype=np.float64).reshape(-1)
    if correct.shape != confidence.shape:
        raise ValueError(f"y_correct has {correct.size} samples and y_confidence {confidence.size}: they must match")
    if confidence.size == 0:
        raise ValueError("expected_calibration_error needs at least one sample")
    bad = ~((confidence >= 0) & (confidence <= 1))  # NaN fails both
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"y_confidence must lie in [0, 1]; position {i} holds {float(confidence[i])!r}")
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    weight = check_sample_weight(sample_weight, confidence.size)
    if weight is not None and not weight.sum() > 0:
        raise ValueError("sample_weight is zero for every sample: there is no answer to measure")
    correct = correct.astype(bool)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, n_bins - 1)
    counts = np.bincount(which, weights=weight, minlength=n_bins)
    conf_sum = np.bincount(which, weights=confidence if weight is None else weight * confidence, minlength=n_bins)
    right = np.bincount(which, weights=correct.astype(np.float64) if weight is None else weight * correct,
                        minlength=n_bins)
    used = counts > 0
    gaps = np.abs(conf_sum[used] - right[used]) / counts[used]
    ece = float(np.sum(gaps * counts[used]) / (confidence.size if weight is None else weight.sum()))
    if not return_bins:
        return ece
    bins = [{"lo": float(edges[b]), "hi": float(edges[b + 1]), "confidence": float(conf_sum[b] / counts[b]),
             "accuracy": float(right[b] / counts[b]),
             "count": int(counts[b]) if weight is None else float(counts[b])} for b in np.flatnonzero(used)]
    return ece, bins
