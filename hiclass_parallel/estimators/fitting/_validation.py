"""The fit's own checks of what a classifier is given: its settings, the scale of ``X``, its labels.

Each check raises an error (or a warning, where the input is valid but surely not meant) that
names the setting or value and what to do instead, before anything is trained. The checks that
fit and predict share (``X``, the prediction settings, the device) are
:mod:`hiclass_parallel.estimators._checks`:

- settings beyond ``_parameter_constraints`` (:func:`check_params`, at the start of ``fit``
  before any data is read);
- at ``fit``, dense columns of ``X`` orders of magnitude larger than the others, named
  (:func:`warn_if_scales_differ`);
- the labels: all internal nodes under ``semantics="partial"`` (:func:`suggest_terminal`);
- continued training (``warm_start``, ``partial_fit``): changed parameters the fitted network
  cannot take (:func:`warn_ignored_changes`).

Sample and class weights are checked where they are made (:mod:`._targets`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ...exceptions import FeatureScaleWarning, IgnoredSettingWarning, caller_stacklevel
from .._checks import check_device
from ._params import check_kwargs

__all__ = ["check_params", "suggest_terminal", "warn_if_scales_differ", "warn_ignored_changes"]


# ---------------------------------------------------------------------------- settings
def check_params(estimator: Any) -> None:
    """The checks of ``fit`` beyond ``_parameter_constraints``: unknown parameter names, a module
    instance instead of a class, the device, terminal semantics without stops."""
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
