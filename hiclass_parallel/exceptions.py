"""Errors and warnings raised by hiclass_parallel, each naming the input that caused it.

Every exception class of the package is defined here; the modules that raise them (and the
public namespaces that export them, such as :mod:`hiclass_parallel.estimators`) import them
from this one place.
"""

from __future__ import annotations

import os
import sys

__all__ = ["DivergedError", "DivergenceWarning", "FeatureScaleWarning", "IgnoredSettingWarning", "ModelFileError",
           "NonFiniteLossError", "NonMonotoneLossError", "TreeError", "UnknownClassWarning", "UnknownLabelError",
           "UnsupportedEstimatorError", "WordNetNotFoundError"]


class TreeError(ValueError):
    """A class tree is malformed (cycle, two parents, unknown parent, duplicate label, empty)."""


class DivergenceWarning(UserWarning):
    """Training went on without an error but made the model much worse: it diverged.

    Raised as a warning by ``partial_fit`` (and ``fit`` with ``warm_start=True``) when the
    model's mean loss on the rows it just trained on grew far above what it was before the
    call, as a learning rate far too high does while the loss stays finite. The new weights
    are kept; lower ``lr`` and train again, or refit.

    Examples
    --------
    >>> import warnings
    >>> from hiclass_parallel.exceptions import DivergenceWarning
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", DivergenceWarning)  # a diverging step stops the script
    ...     issubclass(DivergenceWarning, UserWarning)
    True
    """


class FeatureScaleWarning(UserWarning):
    """Dense features on very different scales: the network will learn little from them.

    Raised by ``fit`` on dense ``X`` when some columns are orders of magnitude larger than
    the others (a year such as ``1990.4`` beside features of unit scale): a network
    initialised for inputs of unit scale is swamped by them. The message names the columns;
    standardise ``X`` (a ``StandardScaler`` before the classifier in a ``Pipeline``), or
    centre and scale those columns. Sparse input is not checked (its columns are counts or
    weights, zero for most rows).

    Examples
    --------
    >>> import warnings
    >>> from hiclass_parallel.exceptions import FeatureScaleWarning
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", FeatureScaleWarning)  # badly scaled input stops the script
    ...     issubclass(FeatureScaleWarning, UserWarning)
    True
    """


class IgnoredSettingWarning(UserWarning):
    """A setting was changed on a fitted model that the fitted model cannot apply, so its
    answers ignore it.

    Raised by prediction for a re-ranking term given a weight after fit that the fit did not
    build (``prototypes=3.0`` set on a model fitted with ``prototypes=None``; ``flat_term=5.0``
    or ``path_term=5.0`` on one that kept no such term), and by continued training (``warm_start``,
    ``partial_fit``) for parameters the network is built from. The message names the setting
    and what would apply it: a fresh ``fit``.

    Examples
    --------
    >>> import warnings
    >>> from hiclass_parallel.exceptions import IgnoredSettingWarning
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", IgnoredSettingWarning)  # an ignored setting stops the script
    ...     issubclass(IgnoredSettingWarning, UserWarning)
    True
    """


class NonFiniteLossError(FloatingPointError, ValueError):
    """Training produced a NaN or infinite loss (a learning rate too high, unscaled input...).

    Subclasses :class:`FloatingPointError` (what it is) and :class:`ValueError` (what
    scikit-learn's model selection treats as a failed fit of a bad parameter setting).
    """


class DivergedError(FloatingPointError, ValueError):
    """A trained model scores finite input as NaN or infinity: training diverged.

    Subclasses :class:`FloatingPointError` and :class:`ValueError`, as
    :class:`NonFiniteLossError` does.
    """


class WordNetNotFoundError(FileNotFoundError):
    """No WordNet 3.0 dictionary files were found; the message lists where it looked."""


class ModelFileError(ValueError):
    """A folder written by :func:`~hiclass_parallel.estimators.save_classifier` cannot be loaded
    as one model: a file is missing, is not a regular file, is damaged or of a format this
    version does not read, belongs to another model or was edited after saving, or kept
    changing while it was read. The message names the file and what is wrong with it."""


class UnsupportedEstimatorError(TypeError):
    """The estimator given to
    :class:`~hiclass_parallel.estimators.ConformalHierarchicalClassifier` cannot be
    conformalized.

    It needs one answer per row on a tree: a
    :class:`~hiclass_parallel.estimators.HierarchicalClassifier` (or a ``Pipeline`` or
    :class:`~hiclass_parallel.estimators.ClassTextClassifier` ending in one). A
    :class:`~hiclass_parallel.estimators.MultiLabelHierarchicalClassifier` (label sets,
    hierarchies with several parents) is refused: a set of labels has no single answer to walk
    up from, and on a DAG a node's "subtree" counts a descendant once per path. The message
    names the estimator.
    """


class NonMonotoneLossError(ValueError):
    """A loss given to :class:`~hiclass_parallel.estimators.ConformalHierarchicalClassifier` is
    not monotone, or not bounded.

    Conformal risk control needs the loss of a row to never grow as its answer moves up the
    tree; the calibration rows showed a row where it did (or a value outside ``[0, bound]``).
    The message names the row, the two nodes and their losses.
    """


class UnknownLabelError(ValueError, KeyError):
    """One or more labels are not classes of the tree.

    Subclasses both :class:`ValueError` (what scikit-learn raises for bad ``y``) and
    :class:`KeyError` (a failed lookup), so either ``except`` clause catches it.
    """

    def __str__(self) -> str:
        # KeyError.__str__ would wrap the message in quotes; show it as written.
        return str(self.args[0]) if self.args else ""

    @classmethod
    def of(cls, unknown, name: str | None = None) -> UnknownLabelError:
        """The error naming the ``unknown`` labels (each once, in order), prefixed by the
        name of the input that holds them."""
        unknown = list({repr(v): v for v in unknown}.values())  # by repr: NaN != NaN
        noun = "label is" if len(unknown) == 1 else "labels are"
        message = f"{len(unknown)} {noun} not a class of the tree: {describe_some(unknown)}"
        return cls(message if name is None else f"{name}: {message}")


class UnknownClassWarning(UserWarning):
    """Labels being scored hold classes the fitted tree lacks (classes no training row had).

    Raised once per scoring call by the metrics, the scorers and the estimators' ``score``:
    each class the tree lacks counts as a miss and its known ancestors as hits, as the label
    path says. The message says how many rows hold such classes and shows one.

    Examples
    --------
    >>> import warnings
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.exceptions import UnknownClassWarning
    >>> from hiclass_parallel.metrics import hierarchical_f1_score
    >>> tree = Tree.from_paths([["food", "fruit"], ["tools"]])
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", UnknownClassWarning)  # expected: a held-out split
    ...     hierarchical_f1_score([["food", "nuts"]], [["food", "fruit"]], tree)
    0.5
    """


def describe_some(values, limit: int = 5) -> str:
    """A short, readable list of offending values for an error message."""
    values = list(values)
    shown = ", ".join(repr(v) for v in values[:limit])
    if len(values) > limit:
        shown += f", ... ({len(values)} in all)"
    return shown


#: The package's folder, and the model-selection code that calls estimators and scorers: a
#: warning about the user's data points at the first caller outside them, the user's line.
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_CALLERS = ("sklearn", "joblib")


def _inside(filename: str) -> bool:
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE + os.sep):
        return True
    parts = path.split(os.sep)
    return "site-packages" in parts and any(name in parts for name in _CALLERS)


def caller_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` called by the caller of this function that
    points at the first frame outside the package (and scikit-learn's model selection, which
    calls ``fit`` and the scorers): the user's line, whatever the depth of the call inside."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_back is not None and _inside(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level
