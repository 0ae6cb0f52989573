"""Saving a whole fitted model without pickle: the classifier and the scikit-learn parts around it.

:func:`save_model` takes a fitted :class:`HierarchicalClassifier`, a ``Pipeline`` (or
:class:`HierarchicalPipeline`) of scikit-learn transformers ending in one, a
:class:`ClassTextClassifier`, or a :class:`ConformalHierarchicalClassifier` around any of
these. One folder holds it:

- ``model.json``: what the model is (the layers, the pipeline's step names, the class-text
  settings), the SHA-256 of every other file and a digest of itself;
- ``transformers.skops``: the pipeline's fitted transformers, and ``vectorizer.skops``: a
  class-text classifier's vectorizer (fitted and as given), in the ``skops.io`` format: a zip of
  a JSON schema and ``.npy`` arrays;
- ``classifier/``: the classifier as :func:`save_classifier` writes it, or ``conformal/``: the
  conformal wrapper as :func:`save_conformal` writes it.

Loading runs no code from the files. Before ``skops.io`` reads a part, every node of its schema
is checked against :func:`trusted_types`, an explicit allow-list of the scikit-learn
transformers (text vectorizers, ``FeatureUnion``, ``ColumnTransformer``, scalers,
``TruncatedSVD``, ``Normalizer``...), containers and NumPy types: a type not on the list is
refused by name (``allowed=`` adds names the caller trusts), and a function or a method (which
``skops`` could call) is refused whatever its name. The classifier keeps the package's own
format, loaded by :func:`load_classifier` with its own allow-list. A part whose bytes do not
match ``model.json`` (edited, damaged, from another save) is a
:class:`~hiclass_parallel.exceptions.ModelFileError`, as is a classifier folder swapped for
another model's.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import json
import os
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..._version import __version__
from ...exceptions import ModelFileError
from ..class_text import ClassTextClassifier
from ..classifier import HierarchicalClassifier
from ..conformal import ConformalHierarchicalClassifier
from ..pipeline import HierarchicalPipeline
from ._conformal_persistence import CONFORMAL, load_conformal, save_conformal
from ._model_folder import FolderReader, read_consistent, read_record, record_digest, replace_folder
from ._persistence import MODEL_FILES, load_classifier, save_classifier

__all__ = ["save_model", "load_model", "trusted_types", "TRUSTED_TRANSFORMERS", "TRUSTED_VALUES"]

MODEL = "model.json"
TRANSFORMERS = "transformers.skops"
VECTORIZER = "vectorizer.skops"
FORMAT = "hiclass_parallel.model"
FORMAT_VERSION = 1

#: The scikit-learn transformers a saved model's parts may hold, by import path (their class is
#: looked up where the installed scikit-learn defines it, so private module paths follow it).
TRUSTED_TRANSFORMERS = (
    "sklearn.feature_extraction.text.CountVectorizer",
    "sklearn.feature_extraction.text.TfidfVectorizer",
    "sklearn.feature_extraction.text.TfidfTransformer",
    "sklearn.feature_extraction.text.HashingVectorizer",
    "sklearn.feature_extraction.DictVectorizer",
    "sklearn.pipeline.Pipeline",
    "sklearn.pipeline.FeatureUnion",
    "sklearn.compose.ColumnTransformer",
    "sklearn.preprocessing.StandardScaler",
    "sklearn.preprocessing.MaxAbsScaler",
    "sklearn.preprocessing.MinMaxScaler",
    "sklearn.preprocessing.RobustScaler",
    "sklearn.preprocessing.Normalizer",
    "sklearn.preprocessing.OneHotEncoder",
    "sklearn.preprocessing.OrdinalEncoder",
    "sklearn.preprocessing.FunctionTransformer",  # only without a function: functions are refused
    "sklearn.decomposition.TruncatedSVD",
    "sklearn.decomposition.PCA",
    "sklearn.impute.SimpleImputer",
)

#: Values inside those transformers: containers, NumPy arrays, dtypes and scalar types, SciPy
#: sparse matrices.
TRUSTED_VALUES = (
    "builtins.dict", "builtins.list", "builtins.tuple", "builtins.set", "builtins.str", "builtins.int",
    "builtins.float", "builtins.bool", "builtins.slice", "builtins.NoneType",
    "numpy.ndarray", "numpy.dtype", "numpy.float16", "numpy.float32", "numpy.float64", "numpy.int8",
    "numpy.int16", "numpy.int32", "numpy.int64", "numpy.uint8", "numpy.uint16", "numpy.uint32", "numpy.uint64",
    "numpy.bool_", "numpy.bool", "numpy.str_", "numpy.object_",
    "scipy.sparse._csr.csr_matrix", "scipy.sparse._csc.csc_matrix", "scipy.sparse._csr.csr_array",
    "scipy.sparse._csc.csc_array",
)

#: How ``skops`` stores a value; the kinds that hold code to call (functions, methods, partial
#: objects, objects rebuilt by ``__reduce__``) are not here, so they are refused.
TRUSTED_NODES = frozenset({
    "ObjectNode", "DictNode", "ListNode", "TupleNode", "SetNode", "JsonNode", "NdArrayNode", "DTypeNode",
    "TypeNode", "SliceNode", "SparseMatrixNode",
})


@functools.cache
def trusted_types() -> frozenset[str]:
    """Every type name a part may hold: :data:`TRUSTED_TRANSFORMERS` by their public path and
    where the installed scikit-learn defines them, and :data:`TRUSTED_VALUES`."""
    import importlib

    names = set(TRUSTED_VALUES)
    for path in TRUSTED_TRANSFORMERS:
        module, _, name = path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):  # pragma: no cover - a scikit-learn without it
            continue
        names.update({path, f"{cls.__module__}.{cls.__qualname__}"})
    return frozenset(names)


def _skops() -> Any:
    try:
        import skops.io
    except ImportError as exc:  # pragma: no cover - exercised where skops is missing
        raise ImportError(
            "saving a whole model needs the skops package for its scikit-learn parts: "
            "pip install 'hiclass_parallel[persist]' (or pip install skops)"
        ) from exc
    return skops.io


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------- the layers
def _layers(model: Any) -> dict[str, Any]:
    """The model taken apart: conformal wrapper, pipeline, class text, classifier."""
    from sklearn.pipeline import Pipeline
    from sklearn.utils.validation import check_is_fitted


    layers: dict[str, Any] = {"conformal": None, "pipeline": None, "class_text": None}
    inner = model
    if isinstance(inner, ConformalHierarchicalClassifier):
        check_is_fitted(inner, "lambda_")
        layers["conformal"], inner = inner, inner.estimator_
    if isinstance(inner, Pipeline):
        if inner.memory is not None:
            raise TypeError("cannot save a Pipeline with memory= (a cache of fitted steps): set memory=None")
        for name, step in inner.steps[:-1]:
            if not (step is None or step == "passthrough" or hasattr(step, "transform")):
                raise TypeError(f"step {name!r} of the Pipeline is not a transformer: {step!r}")
        kind = "HierarchicalPipeline" if isinstance(inner, HierarchicalPipeline) else "Pipeline"
        if type(inner) not in (Pipeline, HierarchicalPipeline):
            raise TypeError(f"save_model saves a Pipeline or a HierarchicalPipeline, not a {type(inner).__name__}")
        layers["pipeline"] = inner
        layers["pipeline_class"] = kind
        inner = inner.steps[-1][1]
    if isinstance(inner, ClassTextClassifier):
        check_is_fitted(inner, "classifier_")
        layers["class_text"], inner = inner, inner.classifier_
    if not isinstance(inner, HierarchicalClassifier) or hasattr(inner, "hierarchy_"):
        raise TypeError(
            f"save_model saves a HierarchicalClassifier, a Pipeline or a ClassTextClassifier ending in one, or a "
            f"ConformalHierarchicalClassifier around them; the model ends in a {type(inner).__name__}: pickle it instead"
        )
    check_is_fitted(inner)
    layers["classifier"] = inner
    return layers


def _json_label(value: Any, what: str) -> Any:
    """A class label as JSON (tuples of names as lists); anything else a named TypeError."""
    import numpy as np

    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, tuple):
        return {"tuple": [_json_label(v, what) for v in value]}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot save {what} without pickle: the label {value!r} is not a string, a number or a tuple")


def _label_from_json(value: Any, where: Path) -> Any:
    if isinstance(value, dict) and set(value) == {"tuple"} and isinstance(value["tuple"], list):
        return tuple(_label_from_json(v, where) for v in value["tuple"])
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ModelFileError(f"{where}: {value!r} is not a saved class label")


# ---------------------------------------------------------------------------- saving
def save_model(model: Any, path: str | os.PathLike) -> Path:
    """Save a whole fitted model to a folder, without pickle: the classifier and its scikit-learn parts.

    Parameters
    ----------
    model : estimator
        Fitted: a :class:`HierarchicalClassifier`; a ``Pipeline`` or
        :class:`HierarchicalPipeline` whose steps before the last are scikit-learn
        transformers of :data:`TRUSTED_TRANSFORMERS` (text vectorizers, ``FeatureUnion``,
        ``ColumnTransformer``, scalers, ``TruncatedSVD``, ``Normalizer``...) and whose last
        step is a :class:`HierarchicalClassifier` or a :class:`ClassTextClassifier`; a
        :class:`ClassTextClassifier`; or a :class:`ConformalHierarchicalClassifier` around
        any of these.
    path : str or path-like
        A folder, replaced as a whole (atomically) if it holds an earlier save; a folder
        holding other files is refused.

    Returns
    -------
    path : pathlib.Path

    Raises
    ------
    TypeError
        When a part has no pickle-free format here (another final estimator, a transformer
        holding a function, a ``Pipeline`` with ``memory=``): the message names it.

    See Also
    --------
    load_model : the inverse.

    Examples
    --------
    >>> import tempfile
    >>> from sklearn.feature_extraction.text import TfidfVectorizer
    >>> from hiclass_parallel.estimators import HierarchicalClassifier, load_model, make_pipeline, save_model
    >>> texts = ["red apple", "green pear", "steel saw", "cordless drill"] * 10
    >>> paths = ["food/fruit/apple", "food/fruit/pear", "tools/saw", "tools/drill"] * 10
    >>> model = make_pipeline(TfidfVectorizer(), HierarchicalClassifier(path_sep="/", max_epochs=5, random_state=0))
    >>> model = model.fit(texts, paths)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     folder = save_model(model, d)
    ...     loaded = load_model(d)
    >>> loaded.predict(["a red apple"]).tolist() == model.predict(["a red apple"]).tolist()
    True
    """
    sio = _skops()
    layers = _layers(model)
    files: dict[str, bytes] = {}
    record: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION, "package_version": __version__}
    pipeline = layers["pipeline"]
    if pipeline is not None:
        names = [name for name, _ in pipeline.steps]
        record["pipeline"] = {"class": layers["pipeline_class"], "names": names, "verbose": bool(pipeline.verbose),
                              "transform_input": (None if pipeline.transform_input is None
                                                  else [str(v) for v in pipeline.transform_input])}
        files[TRANSFORMERS] = _dump(sio, [step for _, step in pipeline.steps[:-1]], "the Pipeline's transformers")
    class_text = layers["class_text"]
    if class_text is not None:
        given = None if class_text.class_text is None else [
            [_json_label(label, "class_text"), str(text)] for label, text in dict(class_text.class_text.items()).items()]
        record["class_text"] = {
            "class_text": given, "missing_text": class_text.missing_text,
            "fit_vectorizer_on_class_text": bool(class_text.fit_vectorizer_on_class_text),
            "class_texts_": None if class_text.class_texts_ is None else [str(t) for t in class_text.class_texts_],
        }
        files[VECTORIZER] = _dump(sio, [class_text.vectorizer, class_text.vectorizer_], "the class text's vectorizer")
    with tempfile.TemporaryDirectory() as scratch:
        if layers["conformal"] is not None:
            # The conformal file ties its cut-off to the classifier it holds: saved around the
            # classifier alone, the wrapper's own format, then put back around the parts on load.
            wrapper = copy.copy(layers["conformal"])
            vars(wrapper).update(estimator_=layers["classifier"], estimator=layers["classifier"])
            inner, sub = save_conformal(wrapper, Path(scratch) / "part"), "conformal"
        else:
            inner, sub = save_classifier(layers["classifier"], Path(scratch) / "part"), "classifier"
        for name in sorted(os.listdir(inner)):
            files[f"{sub}/{name}"] = (Path(inner) / name).read_bytes()
    record["inner"] = sub
    record["digests"] = {name: _digest(data) for name, data in sorted(files.items())}
    record["digest"] = record_digest(record)
    files[MODEL] = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
    replace_folder(path, files, _owned())
    return Path(path)


def _owned() -> tuple[str, ...]:
    """Every file a whole model's folder may hold."""
    return (MODEL, TRANSFORMERS, VECTORIZER) + tuple(f"classifier/{n}" for n in MODEL_FILES) + tuple(
        f"conformal/{n}" for n in MODEL_FILES + (CONFORMAL,))


def _dump(sio: Any, value: Any, what: str) -> bytes:
    """``skops.io`` bytes of ``value``, refused at save time if loading would refuse them."""
    data = sio.dumps(value)
    found = _schema_types(data, Path(what))
    refused = sorted(name for name, node in found if not _allowed(name, node, frozenset()))
    if refused:
        raise TypeError(
            f"cannot save {what} without pickle: it holds {', '.join(refused)}, which is not among the trusted types "
            "(scikit-learn transformers, containers, arrays; no functions): pickle the model instead"
        )
    return data


# ---------------------------------------------------------------------------- loading
def _schema_types(data: bytes, where: Path) -> set[tuple[str, str]]:
    """``(type name, node kind)`` of every value in a ``skops`` file's schema, read without
    building anything; a file that is not a ``skops`` zip is a named error."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            schema = json.loads(archive.read("schema.json").decode("utf-8"))
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, OSError) as exc:
        raise ModelFileError(f"{where} is not a skops file ({type(exc).__name__}: {exc})") from None
    found: set[tuple[str, str]] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "__class__" in node or "__loader__" in node:
                found.add((f"{node.get('__module__')}.{node.get('__class__')}", str(node.get("__loader__"))))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _allowed(name: str, node: str, extra: frozenset[str]) -> bool:
    return node in TRUSTED_NODES and (name in trusted_types() or name in extra)


def _load_part(data: bytes, where: Path, extra: frozenset[str]) -> Any:
    """A ``skops`` part, its schema checked against the allow-list before anything is built."""
    found = _schema_types(data, where)
    refused = sorted(f"{name} ({node})" for name, node in found if not _allowed(name, node, extra))
    if refused:
        raise ModelFileError(
            f"{where} holds types that are not trusted: {', '.join(refused[:5])}"
            + (f", ... ({len(refused)} in all)" if len(refused) > 5 else "")
            + "; refusing to load it (pass allowed=[...] with a type's name if you trust this file; "
            "functions and methods are never loaded)"
        )
    sio = _skops()
    try:
        return sio.loads(data, trusted=sorted(name for name, _ in found))
    except Exception as exc:  # noqa: BLE001 - skops raises many kinds on damaged files
        raise ModelFileError(f"{where} cannot be read as a skops file ({type(exc).__name__}: {exc})") from None


def _read(folder: Path, reader: FolderReader) -> tuple[dict[str, Any], dict[str, bytes]]:
    record = read_record(folder, reader, MODEL, FORMAT, FORMAT_VERSION, "a model saved by save_model",
                         "not a model saved by save_model (a classifier alone loads with load_classifier)")
    digests = record.get("digests")
    if not isinstance(digests, dict) or record.get("inner") not in ("classifier", "conformal"):
        raise ModelFileError(f"{folder / MODEL} lacks its 'digests' or 'inner' field")
    owned = set(_owned())
    data = {}
    for name, expected in digests.items():
        if name not in owned:
            raise ModelFileError(f"{folder / MODEL} names {name!r}, which is not a file of a saved model")
        try:
            data[name] = reader.read(name)
        except FileNotFoundError:
            raise ModelFileError(f"{folder / name} is missing: {folder / MODEL} was saved with it") from None
        if _digest(data[name]) != expected:
            raise ModelFileError(f"{folder / name} does not match {MODEL} (it was edited, damaged or comes from "
                                 "another save); save the model again")
    return record, data


def load_model(path: str | os.PathLike, *, device: Any = None, allowed: Iterable[str] = (),
               trusted: bool = False) -> Any:
    """Load a model saved by :func:`save_model`, executing no code from the files.

    Parameters
    ----------
    path : str or path-like
        The folder :func:`save_model` wrote.
    device : str or torch.device, default=None
        As in :func:`load_classifier`.
    allowed : iterable of str, default=()
        Names of further types you trust: classes of the classifier's parameters (as in
        :func:`load_classifier`) and types of the scikit-learn parts, such as
        ``"sklearn.preprocessing._data.PowerTransformer"`` (the name a refusal shows).
        Functions and methods are never loaded.
    trusted : bool, default=False
        As in :func:`load_classifier`, for the classifier only; the scikit-learn parts are
        always checked against the allow-list.

    Returns
    -------
    model : estimator
        The saved model, fitted, of the saved kind (a ``Pipeline`` comes back as the same
        class: ``Pipeline`` or :class:`HierarchicalPipeline`).

    Raises
    ------
    ModelFileError
        A part refused by the allow-list (named), a file edited or damaged after saving, a
        part from another save, a classifier folder swapped meanwhile, or a newer format.
    FileNotFoundError
        When the folder holds no ``model.json``.

    See Also
    --------
    save_model : the inverse (with an example).
    """
    from sklearn.base import clone
    from sklearn.pipeline import Pipeline


    folder = Path(path)
    allowed = frozenset(allowed)
    record, data = read_consistent(folder, lambda reader: _read(folder, reader))
    sub = record["inner"]
    tie = f"{sub}/config.json" if sub == "classifier" else f"{sub}/conformal.json"
    if tie not in data:
        raise ModelFileError(f"{folder / MODEL} does not list {tie}")
    # Every scikit-learn part is checked and built before the classifier is read.
    steps = _steps(record, data, folder, allowed) if "pipeline" in record else None
    text = _class_text_parts(record, data, folder, allowed) if "class_text" in record else None
    if sub == "classifier":
        conformal, clf = None, load_classifier(folder / sub, device=device, allowed=allowed, trusted=trusted)
    else:
        conformal = load_conformal(folder / sub, device=device, allowed=allowed, trusted=trusted)
        clf = conformal.estimator_
    # The part was read by a second pass over the folder: a save in between would pair these
    # parts with another classifier, so the pairing is checked again afterwards.
    _, after = read_consistent(folder, lambda reader: _read(folder, reader))
    if after.get(tie) != data[tie]:
        raise ModelFileError(f"{folder} was replaced while it was loaded; load it again")

    model: Any = clf
    if text is not None:
        model = _class_text(text, clf, clone)
    if steps is not None:
        info = record["pipeline"]
        cls = HierarchicalPipeline if info["class"] == "HierarchicalPipeline" else Pipeline
        named = list(zip(info["names"][:-1], steps)) + [(info["names"][-1], model)]
        model = cls(named, verbose=info["verbose"], transform_input=info["transform_input"])
    if conformal is not None:
        prefit = conformal.cv == "prefit"
        # as fit leaves it: a prefit wrapper answers with its own copy, so refitting the
        # estimator it was given changes nothing under its cut-off
        vars(conformal).update(estimator_=copy.deepcopy(model) if prefit else model,
                               estimator=model if prefit else clone(model))
        model = conformal
    return model


def _steps(record: dict[str, Any], data: dict[str, bytes], folder: Path, allowed: frozenset[str]) -> list:
    info = record["pipeline"]
    ok = (isinstance(info, dict) and info.get("class") in ("Pipeline", "HierarchicalPipeline")
          and isinstance(info.get("names"), list) and info["names"] and all(isinstance(n, str) for n in info["names"])
          and isinstance(info.get("verbose"), bool)
          and (info.get("transform_input") is None or isinstance(info["transform_input"], list)))
    if not ok or TRANSFORMERS not in data:
        raise ModelFileError(f"{folder / MODEL}: its 'pipeline' section is damaged")
    steps = _load_part(data[TRANSFORMERS], folder / TRANSFORMERS, allowed)
    if not isinstance(steps, list) or len(steps) != len(info["names"]) - 1:
        raise ModelFileError(f"{folder / TRANSFORMERS} does not hold the {len(info['names']) - 1} transformers "
                             f"{folder / MODEL} names")
    for name, step in zip(info["names"], steps):
        if not (step is None or step == "passthrough" or hasattr(step, "transform")):
            raise ModelFileError(f"{folder / TRANSFORMERS}: step {name!r} is not a transformer")
    return steps


def _class_text_parts(record: dict[str, Any], data: dict[str, bytes], folder: Path,
                      allowed: frozenset[str]) -> dict[str, Any]:
    info = record["class_text"]
    if not isinstance(info, dict) or VECTORIZER not in data or info.get("missing_text") not in ("empty", "label"):
        raise ModelFileError(f"{folder / MODEL}: its 'class_text' section is damaged")
    vectorizers = _load_part(data[VECTORIZER], folder / VECTORIZER, allowed)
    if not (isinstance(vectorizers, list) and len(vectorizers) == 2 and all(hasattr(v, "transform") for v in vectorizers)):
        raise ModelFileError(f"{folder / VECTORIZER} does not hold a vectorizer as given and as fitted")
    given = info.get("class_text")
    if given is not None:
        if not (isinstance(given, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[1], str)
                                                for p in given)):
            raise ModelFileError(f"{folder / MODEL}: class_text is not a list of [label, text] pairs")
        given = {_label_from_json(label, folder / MODEL): text for label, text in given}
    texts = info.get("class_texts_")
    if texts is not None and not (isinstance(texts, list) and all(isinstance(t, str) for t in texts)):
        raise ModelFileError(f"{folder / MODEL}: class_texts_ is not a list of texts")
    return {"vectorizer": vectorizers[0], "vectorizer_": vectorizers[1], "class_text": given, "class_texts_": texts,
            "missing_text": info["missing_text"],
            "fit_vectorizer_on_class_text": bool(info.get("fit_vectorizer_on_class_text"))}


def _class_text(parts: dict[str, Any], clf: Any, clone: Any) -> Any:
    unfitted = clone(clf).set_params(module__class_features=None)  # as given: fit sets the class features
    model = ClassTextClassifier(parts["vectorizer"], unfitted, parts["class_text"], missing_text=parts["missing_text"],
                                fit_vectorizer_on_class_text=parts["fit_vectorizer_on_class_text"])
    features = clf.get_params().get("module__class_features")
    vars(model).update(vectorizer_=parts["vectorizer_"], classifier_=clf, class_texts_=parts["class_texts_"],
                       class_features_=features)
    return model
