"""Ragged label paths as one rectangular array: the form scikit-learn's model selection takes.

The estimators read a list of paths of different lengths, but ``GridSearchCV`` and
``cross_validate`` check ``y`` before any estimator sees it, and scikit-learn refuses a ragged
list ("a legacy multi-label data representation"). :func:`pad_paths` right-pads the paths with
the pad label into a 2-D object array, which scikit-learn splits by rows and the estimators read
as the same paths.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from ..exceptions import describe_some
from ._paths import right_pad

__all__ = ["pad_paths"]


def pad_paths(paths: Iterable[Any], pad_label: Hashable | None = None) -> np.ndarray:
    """Right-pad label paths of different lengths into one 2-D array.

    Parameters
    ----------
    paths : iterable of sequences
        One path per sample, from the top level down (lists, tuples or 1-D arrays of names).
    pad_label : hashable, default=None
        The value that fills the short paths. ``None``: ``""`` when every name is a string,
        ``-1`` when every name is an integer, else ``None`` (which the estimators and the
        metrics always read as a pad).

    Returns
    -------
    ndarray of object of shape (n_samples, longest path)
        Each row a path followed by ``pad_label``; pass it as ``y`` to ``fit``,
        ``GridSearchCV``, ``cross_validate`` and the metrics.

    Raises
    ------
    TypeError
        When a row is a string (a path string: give ``path_sep`` to the estimator instead) or
        a scalar.
    ValueError
        When a row is empty, or holds ``pad_label`` itself (it would read as the path's end).

    Examples
    --------
    >>> pad_paths([["food", "fruit", "apple"], ["tools"]]).tolist()
    [['food', 'fruit', 'apple'], ['tools', '', '']]
    >>> pad_paths([[1, 10], [2]]).tolist()
    [[1, 10], [2, -1]]
    """
    rows = []
    for i, path in enumerate(paths):
        if isinstance(path, (str, bytes)):
            raise TypeError(f"row {i} of paths is the string {path!r}, not a path of names; path strings need no "
                            "padding: pass them with path_sep= (e.g. path_sep='/') to the estimator and the metrics")
        if not isinstance(path, (list, tuple, np.ndarray)):
            raise TypeError(f"row {i} of paths is {path!r}, not a path (a list or tuple of names)")
        rows.append(path.tolist() if isinstance(path, np.ndarray) else list(path))
    empty = [i for i, row in enumerate(rows) if not row]
    if empty:
        raise ValueError(f"paths of rows {describe_some(empty)} are empty: each path needs at least a top-level name")
    names = [name for row in rows for name in row]
    if pad_label is None:
        if all(isinstance(n, str) for n in names):
            pad_label = ""
        elif all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)) for n in names):
            pad_label = -1
    if pad_label is not None:
        clash = [i for i, row in enumerate(rows) if any(type(n) is type(pad_label) and n == pad_label for n in row)]
        if clash:
            raise ValueError(f"paths of rows {describe_some(clash)} hold the pad label {pad_label!r} as a name; "
                             "choose another pad_label")
    return right_pad(rows, pad_label)
