"""Saving a fitted :class:`ConformalHierarchicalClassifier` without pickle.

One folder holds the classifier exactly as :func:`~hiclass_parallel.estimators.save_classifier`
writes it (``config.json``, ``tree.npz``, ``weights.safetensors``, maybe ``prototypes.npz``)
and ``conformal.json``: the wrapper's parameters, its calibrated cut-off and the SHA-256 of
the classifier's ``config.json`` (which itself holds the digests of the other files). So the
cut-off is tied to the very model it was calibrated for: a folder whose classifier was
replaced or edited is a :class:`~hiclass_parallel.exceptions.ModelFileError` at load time,
never a cut-off applied to another model's probabilities.

The save is atomic as the classifier's is (one new folder swapped in); ``save_classifier``
refuses to overwrite such a folder (it holds a file that is not a classifier's), and
``load_classifier`` on it loads the classifier alone.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ...exceptions import ModelFileError
from ...metrics._conformal import loss_bound
from ..classifier import HierarchicalClassifier
from ..conformal import ConformalHierarchicalClassifier
from ._model_folder import read_consistent, read_record, record_digest, replace_folder
from ._persistence import CONFIG, MODEL_FILES, load_classifier, save_classifier

__all__ = ["save_conformal", "load_conformal", "CONFORMAL"]

#: The wrapper's file, beside the classifier's.
CONFORMAL = "conformal.json"
FORMAT = "hiclass_parallel.ConformalHierarchicalClassifier"
FORMAT_VERSION = 1

_PARAMS = ("alpha", "loss", "cv", "calibration_size", "random_state")
_FITTED = ("lambda_", "calibration_risk_", "n_calibration_", "semantics_", "loss_bound_")


def save_conformal(model: Any, path: str | os.PathLike) -> Path:
    """Save a fitted :class:`ConformalHierarchicalClassifier` to a folder, without pickle.

    Parameters
    ----------
    model : ConformalHierarchicalClassifier
        Fitted, around a :class:`HierarchicalClassifier` (a ``Pipeline``'s transformers or a
        :class:`ClassTextClassifier`'s vectorizer have no pickle-free format here), with a
        built-in loss (``"miss"`` or ``"tree_distance"``).
    path : str or path-like
        A folder, replaced as a whole (atomically) if it holds an earlier save; a folder
        holding other files is refused.

    Returns
    -------
    path : pathlib.Path

    Raises
    ------
    TypeError
        When the classifier is not a :class:`HierarchicalClassifier`, the loss is a callable,
        or a parameter cannot be stored as plain JSON: the message names it.

    See Also
    --------
    load_conformal : the inverse.

    Examples
    --------
    >>> import tempfile
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import (
    ...     ConformalHierarchicalClassifier, HierarchicalClassifier, load_conformal, save_conformal)
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=600, n_features=8, branching=2, depth=2, random_state=0)
    >>> model = ConformalHierarchicalClassifier(
    ...     HierarchicalClassifier(tree, max_epochs=2, random_state=0), alpha=0.2, random_state=0).fit(X, y)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     folder = save_conformal(model, d)
    ...     loaded = load_conformal(d)
    >>> loaded.lambda_ == model.lambda_, bool((loaded.predict(X) == model.predict(X)).all())
    (True, True)
    """
    from sklearn.utils.validation import check_is_fitted


    check_is_fitted(model, "lambda_")
    if not isinstance(model.estimator_, HierarchicalClassifier):
        raise TypeError(
            f"save_conformal stores a HierarchicalClassifier inside the wrapper; this one holds a "
            f"{type(model.estimator_).__name__}, whose other parts have no pickle-free format: pickle the model instead"
        )
    if not isinstance(model.loss, str):
        raise TypeError(
            f"cannot save parameter 'loss' without pickle: {model.loss!r} is a callable; only the built-in losses "
            "('miss', 'tree_distance') are stored by name. Pickle the model instead"
        )
    params = {}
    for name in _PARAMS:
        value = getattr(model, name)
        if not (value is None or isinstance(value, (str, int, float))):
            raise TypeError(
                f"cannot save parameter {name!r} without pickle: {type(value).__name__} is not a plain value "
                "(set it to an int or None before saving, or pickle the model)"
            )
        params[name] = value
    indices = model.calibration_indices_
    fitted = {name: getattr(model, name) for name in _FITTED}
    fitted["calibration_indices_"] = None if indices is None else [int(i) for i in indices]
    with tempfile.TemporaryDirectory() as scratch:
        inner = save_classifier(model.estimator_, Path(scratch) / "model")
        files = {name: (inner / name).read_bytes() for name in os.listdir(inner)}
    record = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "params": params,
        "fitted": fitted,
        "classifier_digest": hashlib.sha256(files[CONFIG]).hexdigest(),
    }
    record["digest"] = record_digest(record)
    files[CONFORMAL] = (json.dumps(record, indent=1, sort_keys=True, allow_nan=True) + "\n").encode("utf-8")
    replace_folder(path, files, MODEL_FILES + (CONFORMAL,))
    return Path(path)


def _read(folder: Path, reader: Any) -> tuple[dict[str, Any], bytes]:
    record = read_record(folder, reader, CONFORMAL, FORMAT, FORMAT_VERSION,
                         "a saved ConformalHierarchicalClassifier",
                         "not a model saved by save_conformal (a classifier alone loads with load_classifier)")
    try:
        classifier_config = reader.read(CONFIG)
    except FileNotFoundError:
        raise ModelFileError(
            f"{folder / CONFIG} is missing: {folder / CONFORMAL} was saved with a classifier"
        ) from None
    return record, classifier_config


def _check_tied(folder: Path, record: dict[str, Any], classifier_config: bytes) -> None:
    if hashlib.sha256(classifier_config).hexdigest() != record.get("classifier_digest"):
        raise ModelFileError(
            f"{folder / CONFORMAL} was calibrated for another classifier than the one in {folder} (the digest of "
            f"{CONFIG} differs): the cut-off would not hold for this model; calibrate it again and save"
        )


def _number(folder: Path, name: str, value: Any, ok: Any, what: str) -> float:
    """A saved real number for which ``ok(value)`` holds (``what`` says which), else a named error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelFileError(f"{folder / CONFORMAL}: {name}={value!r} is not a number")
    value = float(value)
    if np.isnan(value) or not ok(value):
        raise ModelFileError(f"{folder / CONFORMAL}: {name}={value!r} is out of range: it must be {what}")
    return value


def _fitted_values(folder: Path, fitted: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The calibrated values of ``conformal.json``, each checked for type and range, and against
    the others and the parameters (``params``, validated already): a value no calibration
    gives is a :class:`ModelFileError` naming the field, never an answer built on it."""
    where = folder / CONFORMAL
    n = fitted["n_calibration_"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ModelFileError(f"{where}: n_calibration_={n!r} is not a positive number of rows")
    semantics = fitted["semantics_"]
    if semantics not in ("partial", "terminal"):
        raise ModelFileError(f"{where}: semantics_={semantics!r} is not 'partial' or 'terminal'")
    bound = _number(folder, "loss_bound_", fitted["loss_bound_"], lambda v: 0 < v < np.inf, "finite and positive")
    if bound != loss_bound(params["loss"]):  # the loss is stored by name: its bound is known
        raise ModelFileError(f"{where}: loss_bound_={bound!r}, but the loss {params['loss']!r} is bounded by "
                             f"{loss_bound(params['loss'])!r}")
    # The cut-off is one of the calibration rows' subtree probabilities, or +-inf.
    cutoff = _number(folder, "lambda_", fitted["lambda_"], lambda v: np.isinf(v) or 0 <= v <= 1,
                     "a probability in [0, 1], or -inf or inf")
    if cutoff != np.inf and bound / (n + 1) > params["alpha"] + 1e-12:
        raise ModelFileError(
            f"{where}: lambda_={cutoff!r} with n_calibration_={n}: no cut-off meets alpha={params['alpha']!r} with "
            f"so few rows (the correction {bound:g}/(n+1) alone exceeds it), so lambda_ must be inf")
    risk = _number(folder, "calibration_risk_", fitted["calibration_risk_"], lambda v: 0 <= v <= bound,
                   f"a mean loss in [0, {bound:g}] (loss_bound_)")
    indices = fitted.get("calibration_indices_")
    if params["cv"] == "prefit":
        if indices is not None:
            raise ModelFileError(f"{where}: calibration_indices_ must be null with cv='prefit' (every row given to "
                                 "fit calibrates)")
    else:
        ok = isinstance(indices, list) and len(indices) == n and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
        if not ok or any(a >= b for a, b in zip(indices, indices[1:])):
            raise ModelFileError(f"{where}: calibration_indices_ must be {n} increasing row positions (n_calibration_) "
                                 f"with cv={params['cv']!r}, got {str(indices)[:80]}")
    return {"lambda_": cutoff, "calibration_risk_": risk, "n_calibration_": n, "semantics_": semantics,
            "loss_bound_": bound,
            "calibration_indices_": None if indices is None else np.asarray(indices, dtype=np.int64)}


def load_conformal(path: str | os.PathLike, *, device: Any = None, allowed: Any = (), trusted: bool = False) -> Any:
    """Load a model saved by :func:`save_conformal`, executing no code from the files.

    Parameters
    ----------
    path : str or path-like
        The folder :func:`save_conformal` wrote.
    device, allowed, trusted
        As in :func:`load_classifier`, for the classifier inside.

    Returns
    -------
    model : ConformalHierarchicalClassifier
        Fitted; answers as the saved model did.

    Raises
    ------
    ModelFileError
        When ``conformal.json`` is damaged, edited or of a newer format, was calibrated
        for another classifier than the folder holds (a digest mismatch), or holds a value
        of the wrong type or out of range (even with its digest made to match: the message
        names the field), and for every problem :func:`load_classifier` names.
    FileNotFoundError
        When the folder holds no ``conformal.json``.

    See Also
    --------
    save_conformal : the inverse (with an example).
    """
    from sklearn.base import clone


    folder = Path(path)
    record, classifier_config = read_consistent(folder, lambda reader: _read(folder, reader))
    _check_tied(folder, record, classifier_config)
    clf = load_classifier(folder, device=device, allowed=allowed, trusted=trusted)
    # The classifier is read by a second pass over the folder: a save in between would pair
    # this cut-off with another model, so the pairing is checked again afterwards.
    _, after = read_consistent(folder, lambda reader: _read(folder, reader))
    if after != classifier_config:
        raise ModelFileError(f"{folder} was replaced while it was loaded; load it again")
    params, fitted = record.get("params"), record.get("fitted")
    if not (isinstance(params, dict) and isinstance(fitted, dict)):
        raise ModelFileError(f"{folder / CONFORMAL} lacks its 'params' or 'fitted' section")
    missing = [name for name in _PARAMS if name not in params] + [name for name in _FITTED if name not in fitted]
    if missing:
        raise ModelFileError(f"{folder / CONFORMAL} is incomplete: it lacks {', '.join(missing)}")
    # The fitted model holds its own copy (as fit's cv="prefit" does): refitting the loaded
    # estimator parameter must not put another model under the cut-off.
    estimator = clf if params["cv"] == "prefit" else clone(clf)
    try:
        model = ConformalHierarchicalClassifier(estimator, **{name: params[name] for name in _PARAMS})
        model._validate_params()
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{folder / CONFORMAL} holds parameters the model does not take: {exc}") from None
    values = _fitted_values(folder, fitted, params)
    if values["semantics_"] != clf.semantics:
        raise ModelFileError(
            f"{folder / CONFORMAL} was calibrated with semantics={values['semantics_']!r}, but the classifier "
            f"predicts with {clf.semantics!r}"
        )
    vars(model).update(estimator_=copy.deepcopy(clf) if estimator is clf else clf, **values)
    return model
