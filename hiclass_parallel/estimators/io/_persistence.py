"""Saving a fitted classifier without pickle: safetensors weights, an ``.npz`` tree, JSON parameters.

A pickle runs code when it is loaded, so a model file from someone else is a program. The
format here is data only, and loading it executes nothing from the files:

- ``weights.safetensors``: the torch module's ``state_dict`` (safetensors stores raw tensors
  and a JSON header; loading parses them, it never unpickles);
- ``tree.npz``: the class tree, through :meth:`~hiclass_parallel.Tree.save`
  (``np.load(..., allow_pickle=False)``);
- one ``.npz`` per term of the answer model (``answer_``), where it has the term:
  ``prototypes.npz``, the class prototypes' statistics; ``flat_term.npz``, the flat linear
  term's SVM; ``path_term.npz``, the path-level linear term's SVMs;
- ``config.json``: the estimator's parameters, fitted scalars and the answer model's terms,
  weights, scale and calibrator (its three numbers), and a SHA-256 digest of the
  other files and of its own content, so that pieces of different models (or an edited
  file) are a named error at load time, never a silent mix.

Parameters that JSON cannot hold as plain values are refused at save time with an error that
names them (a callback object, a custom ``train_split``, a ``RandomState``...). Classes (the
``module``, the ``optimizer``, ``module__activation``...) are stored as their import path and
resolved at load time only from an allow-list (classes defined in this package, ``torch.nn``
or ``torch.optim``), from names the caller passes in ``allowed=``, or anything with
``trusted=True``: importing a module runs its code, which is the one thing this format exists to
avoid. A class is found by importing its module by its exact name and taking one attribute,
which must be a class defined in that module and of the kind the parameter needs (an
``nn.Module`` subclass for a network or an activation, an ``Optimizer`` subclass for the
optimizer): no attribute chains, no functions, nothing re-exported.

Nothing lost, nothing mixed (the file-system side is :mod:`._model_folder`):

- a save is atomic. Every file is written to a new hidden folder beside the target and flushed
  to disk, then that folder takes the target's place (on Linux, by one atomic exchange of the
  two folders; elsewhere, by two renames, between which the path is briefly absent). The old
  model loads until the new one is complete; a failure at any write (a full disk, a read-only
  file system, an interrupt) leaves it as it was;
- a folder holding any file other than a model's (:data:`MODEL_FILES`) is refused at save
  time, so user data is never deleted;
- a load reads each file once and checks the digest on, and parses, those same bytes, all
  through one handle of the folder: a load racing a save sees the old model or the new one
  (retrying, a bounded number of times, a read that the swap cut short) and otherwise a
  :class:`~hiclass_parallel.exceptions.ModelFileError`, never a raw ``EOFError`` or
  ``BadZipFile``;
- only regular files are read (a FIFO or a symlink to a device is refused before it is
  read), and every array is checked (dtype, shape against the tree and feature count, finite
  values, and class prototypes whose statistics stay finite in float32).

What is not saved: the optimizer's state (Adam's moments) and skorch's training history.
A loaded model predicts exactly as the saved one; ``partial_fit`` or a warm start continues
from the saved weights with a fresh optimizer. Pickle keeps working as before.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import importlib
import io
import json
import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..._version import __version__
from ...exceptions import ModelFileError
from ...labels._paths import check_pad_not_a_label
from ...ops.groups import n_outputs
from ...tree import PARTITIONS, Tree
from .._checks import check_device
from ..answer import PRIOR_TERMS, TERMS, AnswerModel, BetaCalibrator, term_from_arrays
from ..classifier import HierarchicalClassifier
from ..fitting import FitConfig, attach_net, build_net
from ..networks import FitRandom, drawing_from, draws_from_fit_generator, module_capabilities
from ._model_folder import FolderReader, read_consistent, read_npz, replace_folder

__all__ = ["save_classifier", "load_classifier", "FORMAT_VERSION", "ALLOWED_MODULES"]

#: Version of the on-disk layout, written into every saved ``config.json``:
#: :func:`load_classifier` reads this version only, and names an older or a newer one.
#: Version 4: the answer model as one entry (``answer_``) in place of the separate class
#: prototypes, flat term and calibrator.
FORMAT_VERSION = 4

#: Packages whose classes (defined in them or their submodules) load without ``trusted=True``.
ALLOWED_MODULES = ("hiclass_parallel", "torch.nn", "torch.optim")

WEIGHTS, TREE, CONFIG = "weights.safetensors", "tree.npz", "config.json"

#: The answer model's class prototypes, where it has them: plain arrays (CSR parts of the
#: cosine kind's sums; the Gaussian kind's sums, counts and squares) and the kind's name, in an
#: ``.npz`` read with ``allow_pickle=False``.
PROTOTYPES = "prototypes.npz"

#: The answer model's flat linear term, where it has one: its SVM's target node ids, weights
#: and intercepts, in an ``.npz`` read with ``allow_pickle=False``.
FLAT_TERM = "flat_term.npz"

#: The answer model's path-level linear term, where it has one: every node's SVM weights and
#: intercept on a training row's path (the tree's paths are the tree file's).
PATH_TERM = "path_term.npz"

#: The file of each term of the answer model (its ``to_arrays``).
TERM_FILES = {"prototypes": PROTOTYPES, "flat_term": FLAT_TERM, "path_term": PATH_TERM}

#: Every file a saved model's folder may hold: :func:`save_classifier` replaces a folder holding
#: only these, and refuses one holding anything else.
MODEL_FILES = (CONFIG, TREE, WEIGHTS, *TERM_FILES.values())

#: The ``format`` field of ``config.json``.
FORMAT = "hiclass_parallel.HierarchicalClassifier"

#: Fitted attributes stored as JSON scalars besides the resolved configuration (``config_``,
#: saved whole), the answer model (``answer_``: its terms' names, their weights, the scale and
#: the calibrator; the terms' arrays in :data:`TERM_FILES`), the tree and the weights.
_FITTED = ("n_features_in_", "pad_label_")


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError as exc:  # pragma: no cover - exercised where safetensors is missing
        raise ImportError(
            "saving without pickle needs the safetensors package: pip install 'hiclass_parallel[persist]' "
            "(or pip install safetensors)"
        ) from exc
    return safetensors.torch


# ---------------------------------------------------------------------------- JSON encoding
def _encode(value: Any, name: str) -> Any:
    """A parameter value as plain JSON, or a TypeError naming the parameter."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, torch.device):
        return {"__device__": str(value)}
    if isinstance(value, type):
        qualname = value.__qualname__
        if "." in qualname:  # defined in a function (<locals>) or nested in a class
            raise TypeError(
                f"cannot save parameter {name!r} without pickle: {value!r} is defined inside a function or "
                "another class, so it has no import path of one name; define it at module level, or save the "
                "model with pickle"
            )
        return {"__class__": f"{value.__module__}:{qualname}"}
    if isinstance(value, (list, tuple)):
        items = [_encode(v, f"{name}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v, f"{name}[{k!r}]") for k, v in value.items()}}
    if _is_sparse(value) and value.ndim == 2:
        # The class features of class text (module__class_features): a CSR matrix as three
        # lists, checked whole on load.
        csr = value.tocsr()
        if csr.dtype not in (np.float32, np.float64):
            raise TypeError(f"cannot save parameter {name!r} without pickle: a sparse matrix of {csr.dtype} "
                            "(float32 and float64 are stored)")
        return {"__csr__": {"shape": [int(n) for n in csr.shape], "dtype": str(csr.dtype),
                            "indptr": csr.indptr.tolist(), "indices": csr.indices.tolist(), "data": csr.data.tolist()}}
    raise TypeError(
        f"cannot save parameter {name!r} without pickle: a {type(value).__module__}.{type(value).__qualname__} "
        "object is not JSON-serialisable (plain values, lists, tuples, dicts with str keys and classes "
        f"are); set {name.split('[')[0]!r} to a plain value before saving, or save the model with pickle"
    )


def _is_sparse(value: Any) -> bool:
    import scipy.sparse as sp

    return sp.issparse(value)


def _decode_csr(value: Any, name: str) -> Any:
    """A CSR matrix saved by :func:`_encode`, every part checked before it is built: a named
    ``ValueError`` for any damage, never a matrix that indexes out of its bounds."""
    import scipy.sparse as sp

    if not isinstance(value, dict) or set(value) != {"shape", "dtype", "indptr", "indices", "data"}:
        raise ValueError(f"parameter {name!r}: a saved sparse matrix holds shape, dtype, indptr, indices and data")
    shape = value["shape"]
    if not (isinstance(shape, list) and len(shape) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise ValueError(f"parameter {name!r}: shape {shape!r} is not two non-negative integers")
    if value["dtype"] not in ("float32", "float64"):
        raise ValueError(f"parameter {name!r}: dtype {value['dtype']!r} is not float32 or float64")
    parts = {}
    for key, kind in (("indptr", int), ("indices", int), ("data", float)):
        items = value[key]
        ok = isinstance(items, list) and all(
            isinstance(v, (int, float) if kind is float else int) and not isinstance(v, bool) for v in items)
        if not ok:
            raise ValueError(f"parameter {name!r}: {key} is not a list of {kind.__name__}s")
        parts[key] = items
    indptr = np.asarray(parts["indptr"], dtype=np.int64)
    indices = np.asarray(parts["indices"], dtype=np.int64)
    data = np.asarray(parts["data"], dtype=value["dtype"])
    rows, cols = shape
    if (indptr.size != rows + 1 or (indptr.size and (indptr[0] != 0 or indptr[-1] != indices.size))
            or (np.diff(indptr) < 0).any() or indices.size != data.size):
        raise ValueError(f"parameter {name!r}: indptr, indices and data do not describe a {rows} x {cols} CSR matrix")
    if indices.size and (indices.min() < 0 or indices.max() >= cols):
        raise ValueError(f"parameter {name!r}: column indices out of range [0, {cols})")
    if not np.isfinite(data).all():
        raise ValueError(f"parameter {name!r}: the matrix holds values that are not finite")
    return sp.csr_matrix((data, indices, indptr), shape=(rows, cols))


def _module_allowed(module: str) -> bool:
    """Whether ``module`` is in the allow-list (a package of :data:`ALLOWED_MODULES` or below it).

    ``__main__`` modules are never allowed: importing ``hiclass_parallel.__main__`` runs the
    command line.
    """
    return "__main__" not in module.split(".") and any(
        module == root or module.startswith(root + ".") for root in ALLOWED_MODULES
    )


def _split_class_path(path: Any, name: str) -> tuple[str, str]:
    """``(module, class name)`` of a saved class path ``"module:Name"``. A nested or malformed
    name is a named error."""
    if not isinstance(path, str):
        raise ValueError(f"parameter {name!r}: a class must be saved as a string, got {path!r}")
    module, sep, qualname = path.partition(":")
    ok = r"[A-Za-z_][A-Za-z0-9_]*"
    if not (sep and re.fullmatch(rf"{ok}(\.{ok})*", module) and re.fullmatch(ok, qualname)):
        raise ValueError(
            f"parameter {name!r}: {path!r} is not a class path of the form 'package.module:ClassName' "
            "(one class defined at module level)"
        )
    return module, qualname


def _resolve_class(path: Any, name: str, trusted: bool, allowed: frozenset[str], kind: type | None) -> type:
    """The class ``path`` names, imported only if the allow-list (or the caller) permits it.

    The module is imported by its exact name and one attribute is taken from it; the result
    must be a class defined in that very module (not an object re-exported there, such as a
    module's ``ctypes`` or ``subprocess``), and a subclass of ``kind`` when the field needs one
    (``nn.Module`` for a network, ``Optimizer`` for an optimizer). Every check that can be
    made on the string is made before anything is imported.
    """
    module, qualname = _split_class_path(path, name)
    consented = trusted or f"{module}.{qualname}" in allowed or f"{module}:{qualname}" in allowed
    if not (consented or _module_allowed(module)):
        raise ValueError(
            f"parameter {name!r} names the class {module}.{qualname!r}, which is outside the allow-list "
            f"(classes defined in {', '.join(ALLOWED_MODULES)} and their submodules): importing it would run "
            f"its module's code. Pass allowed=[{f'{module}.{qualname}'!r}] (or trusted=True) to "
            "load_classifier if you trust this file"
        )
    try:
        obj = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"parameter {name!r}: cannot import the class {qualname!r} from {module!r} ({exc})") from None
    if not isinstance(obj, type) or obj.__module__ != module or obj.__qualname__ != qualname:
        # An attribute that is a module, a function or a class imported from elsewhere: the
        # allow-list speaks of where a class is defined, never of what a module can reach.
        raise ValueError(
            f"parameter {name!r}: {module}.{qualname} is not a class defined in {module!r} "
            f"(it is {obj!r}); refusing to load it"
        )
    if kind is not None and not issubclass(obj, kind) and not (consented and name not in _KINDS):
        raise ValueError(
            f"parameter {name!r}: {module}.{qualname} is not a {kind.__module__}.{kind.__qualname__} "
            "subclass, which this parameter needs; refusing to load it"
        )
    return obj


def _kind(name: str) -> type:
    """The base class a class stored in parameter ``name`` must derive from."""
    if name in _KINDS:
        return _KINDS[name]()
    return torch.nn.Module  # module__activation and any other class-valued module argument


#: Parameters that hold a class of a fixed kind (resolved lazily: the estimator imports this module).
_KINDS = {
    "the estimator class": lambda: _estimator_base(),
    "module": lambda: torch.nn.Module,
    "module_class_": lambda: torch.nn.Module,
    "module_class": lambda: torch.nn.Module,
    "optimizer": lambda: torch.optim.Optimizer,
    "default_optimizer": lambda: torch.optim.Optimizer,
}


def _estimator_base() -> type:
    return HierarchicalClassifier


def _decode(value: Any, name: str, trusted: bool, allowed: frozenset[str]) -> Any:
    if isinstance(value, list):
        return [_decode(v, f"{name}[{i}]", trusted, allowed) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if "__class__" in value:
        keys = re.findall(r"\['(\w+)'\]", name)  # a class inside a dict: its kind is its key's
        return _resolve_class(value["__class__"], name, trusted, allowed, _kind(keys[-1] if keys else name.split("[")[0]))
    if "__device__" in value:
        return torch.device(value["__device__"])
    if "__csr__" in value:
        return _decode_csr(value["__csr__"], name)
    if "__tuple__" in value:
        return tuple(_decode(v, f"{name}[{i}]", trusted, allowed) for i, v in enumerate(value["__tuple__"]))
    if "__dict__" in value:
        return {k: _decode(v, f"{name}[{k!r}]", trusted, allowed) for k, v in value["__dict__"].items()}
    raise ValueError(f"parameter {name!r}: unknown encoded value {value!r}")


# ---------------------------------------------------------------------------- save / load
def save_classifier(clf: Any, path: str | os.PathLike) -> Path:
    """Save a fitted :class:`HierarchicalClassifier` to a folder, without pickle.

    Parameters
    ----------
    clf : HierarchicalClassifier
        A fitted classifier.
    path : str or path-like
        A folder, created if needed, that will hold ``weights.safetensors``, ``tree.npz``,
        ``config.json`` and, where the model has class prototypes, ``prototypes.npz``. A
        folder already there (an earlier save) is replaced as a whole, atomically: the old
        model stays loadable until the new one is complete (see the module's notes). A
        folder holding any other file is refused, never emptied.

    Returns
    -------
    path : pathlib.Path
        The folder.

    Raises
    ------
    TypeError
        When a parameter cannot be stored as plain JSON (a callback object, a custom
        ``train_split``, a ``RandomState``): the message names it.
    FileExistsError
        When ``path`` is a file, or a folder holding files other than a saved model's: the
        message names them.
    OSError
        When writing fails (a full disk, no write permission in the folder's parent, where the
        new folder is made): nothing at ``path`` has changed.

    See Also
    --------
    load_classifier : the inverse.

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import HierarchicalClassifier, load_classifier, save_classifier
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=200, n_features=8, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     folder = save_classifier(clf, d)
    ...     sorted(p.name for p in folder.iterdir())
    ...     loaded = load_classifier(d)
    ['config.json', 'prototypes.npz', 'tree.npz', 'weights.safetensors']
    >>> bool((loaded.predict(X) == clf.predict(X)).all())
    True
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(clf)
    if hasattr(clf, "hierarchy_"):
        # Label sets, on a DAG or on a plain tree alike: the folder holds one answer per row.
        over = "a plain tree" if clf.hierarchy_.is_tree else "a hierarchy with several parents"
        raise TypeError(
            f"save_classifier stores classifiers of one label per row on a class tree; {type(clf).__name__} "
            f"predicts label sets (fitted over {over}, hierarchy_), which this format does not hold: "
            "pickle it instead"
        )
    st = _safetensors()
    params = clf.get_params(deep=False)
    tree = params.pop("tree")
    encoded = {name: _encode(value, name) for name, value in sorted(params.items())}
    fitted = {name: _encode(getattr(clf, name), name) for name in _FITTED}
    fitted["config_"] = {"__dict__": {k: _encode(v, k) for k, v in clf.config_.fields().items()}}
    if hasattr(clf, "feature_names_in_"):
        fitted["feature_names_in_"] = [str(v) for v in clf.feature_names_in_]
    fitted["answer_"], term_files = _answer_to_save(clf.answer_)
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "package_version": __version__,
        "class": f"{type(clf).__module__}:{type(clf).__qualname__}",
        "tree_given": tree is not None,
        "params": encoded,
        "fitted": fitted,
    }

    # Every file is made in memory first, so that its digest is of the very bytes written.
    tree_file = io.BytesIO()
    try:
        clf.tree_.save(tree_file)
    except TypeError as exc:
        raise TypeError(f"cannot save the tree without pickle: {exc}") from exc
    files = {TREE: tree_file.getvalue()}
    state = {k: v.detach().to("cpu").contiguous() for k, v in clf.net_.module_.state_dict().items()}
    # Shared tensors (tied weights) must be stored once: safetensors refuses aliases.
    files[WEIGHTS] = st.save(_untie(state), metadata={"format_version": str(FORMAT_VERSION)})
    files.update(term_files)
    config["digests"] = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    config["digests"][CONFIG] = _config_digest(config)
    files[CONFIG] = (json.dumps(config, indent=1, sort_keys=True, allow_nan=True) + "\n").encode("utf-8")
    replace_folder(path, files, MODEL_FILES)
    return Path(path)


def _file_digest(path: Path) -> str:
    """SHA-256 of a file on disk (for tools and tests that edit a saved folder and re-digest it)."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of the configuration's content without its own digest (canonical JSON)."""
    content = {k: v for k, v in config.items() if k != "digests"}
    digests = {k: v for k, v in config.get("digests", {}).items() if k != CONFIG}
    text = json.dumps([content, digests], sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    seen: dict[int, str] = {}
    out = {}
    for key, tensor in state.items():
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else -id(tensor)
        out[key] = tensor.clone() if ptr in seen else tensor
        seen.setdefault(ptr, key)
    return out


def load_classifier(
    path: str | os.PathLike,
    *,
    device: str | torch.device | None = None,
    allowed: Iterable[str] = (),
    trusted: bool = False,
) -> Any:
    """Load a classifier saved by :func:`save_classifier`, executing no code from the files.

    Parameters
    ----------
    path : str or path-like
        The folder :func:`save_classifier` wrote.
    device : str or torch.device, default=None
        Where the loaded network lives. ``None``: the saved ``device`` parameter, or the CPU
        (with a warning) when that is a CUDA device and none is available.
    allowed : iterable of str, default=()
        Import paths of classes outside :data:`ALLOWED_MODULES` that may be imported
        (e.g. ``["mypackage.nets.MyModule"]`` for a custom ``module``).
    trusted : bool, default=False
        Import any class the file names. Only for files you trust: importing runs code.

    Returns
    -------
    clf : HierarchicalClassifier
        Fitted; predicts as the saved classifier did. The optimizer state and the training
        history are not restored.

    Raises
    ------
    ModelFileError
        A :class:`ValueError`, naming the file: when a file is missing, is not a regular file
        (a FIFO, a device, a folder, also behind a symlink: refused before it is read), is
        damaged or not of its format (an ``.npz`` that is a bare ``.npy`` or holds object
        arrays, class prototypes of the wrong shape or dtype, or whose statistics are not
        finite in float32); when the files do not belong together or were modified after
        saving (their digests differ), or disagree (tree size, partition, stops, pad label,
        weight shapes); when the folder was saved in another format than :data:`FORMAT_VERSION`
        (older or newer: the message says which); when another process kept
        replacing the folder while it was read (after a bounded number of retries).
    ValueError
        When the file names a class outside the allow-list (the message says which
        parameter and how to allow it) or an object that is not a class of the kind its
        parameter needs; when ``device`` is not available here.
    FileNotFoundError
        When there is no folder, or no ``config.json`` in it.

    Notes
    -----
    Each file is read once, whole, into memory; its digest is checked on those bytes and the
    same bytes are parsed, all through one handle of the folder. A load running while
    another process saves into the same path therefore gets the old model or the new one,
    never a mix: a read that raced the swap is retried.
    """
    folder = Path(path)
    config, data = read_consistent(folder, lambda reader: _read_model(folder, reader))
    allowed = frozenset(allowed)
    # Every class is resolved (and checked) before anything is constructed or called.
    cls = _resolve_class(config["class"], "the estimator class", trusted, allowed, _kind("the estimator class"))
    params = {k: _decode(v, k, trusted, allowed) for k, v in _field(config, "params", dict).items()}
    fitted = {k: _decode(v, k, trusted, allowed) for k, v in _field(config, "fitted", dict).items()}
    missing = [name for name in _FITTED + ("config_", "answer_") if name not in fitted]
    if missing:
        raise ModelFileError(f"{folder / CONFIG} is incomplete: its 'fitted' section lacks {', '.join(missing)}")
    tree_file = io.BytesIO(data[TREE])
    tree_file.name = str(folder / TREE)  # named in a TreeError
    tree = Tree.load(tree_file)
    fit_config = _fit_config(folder, tree, fitted)
    if device is None:
        device = params.get("device", "cpu")
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            warnings.warn(f"the model was saved for device={str(device)!r}, which is unavailable; loading on the CPU",
                          RuntimeWarning, stacklevel=2)
            device = "cpu"
    check_device(device)
    params["device"] = device
    clf = cls(tree=tree if config.get("tree_given") else None, **params)
    targets = cls._targets(tree if config.get("tree_given") else None, clf.pad_label, cls.__name__,
                           sep=getattr(clf, "path_sep", None))
    targets._set(tree, fitted["pad_label_"])
    vars(clf).update(targets.fitted_attributes(), targets_=targets, config_=fit_config,
                     n_features_in_=fitted["n_features_in_"])
    if "feature_names_in_" in fitted:
        clf.feature_names_in_ = np.asarray(fitted["feature_names_in_"], dtype=object)
    clf.answer_ = _answer_from_saved(folder, fitted["answer_"], tree, fitted["n_features_in_"], data)
    try:
        state = _safetensors().load(data[WEIGHTS])
    except Exception as exc:  # noqa: BLE001 - safetensors' own SafetensorError, and others on damage
        raise ModelFileError(f"{folder / WEIGHTS} is not a safetensors file ({type(exc).__name__}: {exc})") from None
    net = build_net(clf, fit_config, targets, seed=None)  # not trained here
    # Initialising draws weights that the saved ones replace at once: from a throwaway private
    # generator where the module draws from one (torch's global stream, which other threads may
    # be drawing from, is never touched), else inside fork_rng, as a fit does.
    if draws_from_fit_generator(net.module):
        with drawing_from(FitRandom(seed=0)):
            net.initialize()
    else:
        with torch.random.fork_rng(devices=[]):
            net.initialize()
    try:
        net.module_.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelFileError(f"{folder / WEIGHTS} does not fit the network its config.json describes: {exc}") from None
    net.module_.to(net.device)
    attach_net(clf, net)
    return clf


def _field(config: dict[str, Any], name: str, kind: type) -> Any:
    if name not in config:
        raise ModelFileError(f"config.json lacks the field {name!r}: it was not written by save_classifier")
    if not isinstance(config[name], kind):
        raise ModelFileError(f"config.json: the field {name!r} should be a {kind.__name__}, got {config[name]!r}")
    return config[name]


def _read_model(folder: Path, reader: FolderReader) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The parsed ``config.json`` and the bytes of the files it names, read once each through
    ``reader`` and checked against its digests (those bytes are the ones parsed afterwards)."""
    try:
        config = _parse_config(folder, reader.read(CONFIG))
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"no {CONFIG} in the folder: not a model saved by save_classifier",
                                str(folder)) from None
    names = (TREE, WEIGHTS)
    digests = config.get("digests") if isinstance(config.get("digests"), dict) else {}
    saved_terms = _saved_term_names(config.get("fitted"))
    names += tuple(file for term, file in TERM_FILES.items() if file in digests or term in saved_terms)
    data = {}
    for name in names:
        try:
            data[name] = reader.read(name)
        except FileNotFoundError:
            raise ModelFileError(f"{folder / name} is missing: {folder / CONFIG} was saved with it") from None
    _check_digests(folder, config, data)
    return config, data


def _parse_config(folder: Path, data: bytes) -> dict[str, Any]:
    """The parsed ``config.json``, checked to be a saved classifier of a format this version reads."""
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelFileError(f"{folder / CONFIG} is not valid JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        what = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise ModelFileError(f"{folder / CONFIG} is not a saved HierarchicalClassifier (format={what!r})")
    version = _field(config, "format_version", int)
    if isinstance(version, bool) or version < 1:
        raise ModelFileError(f"{folder / CONFIG}: format_version={version!r} is not a format version")
    if version != FORMAT_VERSION:
        newer = version > FORMAT_VERSION
        raise ModelFileError(
            f"{folder} was saved in format {version}, {'newer' if newer else 'older'} than the one this version "
            f"of hiclass_parallel reads ({FORMAT_VERSION}): "
            + ("upgrade hiclass_parallel" if newer else "fit the model again with this version and save it")
        )
    return config


def _check_digests(folder: Path, config: dict[str, Any], data: dict[str, bytes]) -> None:
    """The files (``data``: their bytes) belong together and are as :func:`save_classifier`
    wrote them."""
    digests = _field(config, "digests", dict)
    if digests.get(CONFIG) != _config_digest(config):
        raise ModelFileError(
            f"{folder / CONFIG} was modified after it was saved (its content does not match its digest); "
            "refusing to load it"
        )
    for name in data:  # the tree, the weights and every term's file read
        if digests.get(name) != hashlib.sha256(data[name]).hexdigest():
            raise ModelFileError(
                f"{folder / name} is not the file saved with {folder / CONFIG} (its SHA-256 differs): "
                "the folder mixes files of different models, or one was modified"
            )


def _answer_to_save(answer: AnswerModel) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The answer model as ``config.json`` holds it (its terms' names, their weights, the scale
    and the calibrator's numbers) and each term's file (:data:`TERM_FILES`): the one place a
    save reads ``answer_``."""
    files = {}
    for name, term in answer.terms.items():
        buffer = io.BytesIO()
        np.savez(buffer, **term.to_arrays())
        files[TERM_FILES[name]] = buffer.getvalue()
    record = {"terms": sorted(answer.terms), "weights": {k: float(v) for k, v in answer.weights.items()},
              "scale": float(answer.scale),
              "calibrator": None if answer.calibrator is None else answer.calibrator.to_dict()}
    return _encode(record, "answer_"), files


def _saved_term_names(fitted: Any) -> set[str]:
    """The term names a parsed ``config.json``'s ``fitted`` section lists (unchecked: the files
    to read; :func:`_answer_from_saved` checks them)."""
    saved = fitted.get("answer_") if isinstance(fitted, dict) else None
    inner = saved.get("__dict__") if isinstance(saved, dict) else None
    terms = inner.get("terms") if isinstance(inner, dict) else None
    return {name for name in terms if isinstance(name, str)} if isinstance(terms, list) else set()


def _answer_from_saved(folder: Path, saved: Any, tree: Any, n_features: int, data: dict[str, bytes]) -> AnswerModel:
    """The answer model from ``config.json``'s ``answer_`` entry (decoded) and its terms' files
    (``data``: their bytes), the one place a load builds ``answer_``. Every part is checked
    before it is used: the entry's fields and values, each term's arrays (kind, dtype, shape
    against the tree and the feature count, finite values; the class prototypes' statistics
    finite in float32), no term file without its term; a named :class:`ModelFileError`
    otherwise."""
    where = f"{folder / CONFIG}: answer_"
    fields = {"terms", "weights", "scale", "calibrator"}
    if not isinstance(saved, dict) or set(saved) != fields:
        raise ModelFileError(f"{where} must hold exactly {sorted(fields)}, got {saved!r}")
    names = saved["terms"]
    if not isinstance(names, list) or not all(isinstance(n, str) and n in TERMS for n in names) \
            or len(set(names)) != len(names):
        raise ModelFileError(f"{where}: terms must be distinct names of {list(TERMS)}, got {names!r}")
    for name, file in TERM_FILES.items():
        if name not in names and file in data:
            raise ModelFileError(f"{folder / file} is there but {folder / CONFIG} describes no {name} term")
    terms = {}
    for name in names:
        if TERM_FILES[name] not in data:
            raise ModelFileError(f"{folder / TERM_FILES[name]} is missing: {folder / CONFIG} describes a {name} term")
        # No array of a term is larger than (classes + 1) x (features + 1) float64s.
        limit = 8 * (tree.n_classes + 1) * (n_features + 1) + 1024
        arrays = read_npz(data[TERM_FILES[name]], folder / TERM_FILES[name], limit)
        try:
            terms[name] = term_from_arrays(name, arrays, tree, n_features)
        except (ValueError, TypeError) as exc:
            raise ModelFileError(f"{folder / TERM_FILES[name]}: {exc}") from None
    try:
        calibrator = None if saved["calibrator"] is None else BetaCalibrator.from_dict(saved["calibrator"])
        return AnswerModel(terms=terms, weights=saved["weights"], scale=saved["scale"], calibrator=calibrator)
    except (ValueError, TypeError) as exc:
        raise ModelFileError(f"{where}: {exc}") from None


def _fit_config(folder: Path, tree: Tree, fitted: dict[str, Any]) -> FitConfig:
    """The saved :class:`FitConfig`, checked: its fields agree with each other, with the module
    class as it is now and with the tree."""
    saved = fitted["config_"]
    fields = {f.name for f in dataclasses.fields(FitConfig)}
    # fields with a default (added since the format's version) may be missing
    required = {f.name for f in dataclasses.fields(FitConfig) if f.default is dataclasses.MISSING}
    if not isinstance(saved, dict) or not required <= set(saved) <= fields:
        raise ModelFileError(f"{folder / CONFIG}: config_ must hold exactly the fields {sorted(fields)}")
    problems = []
    if saved["partition"] not in PARTITIONS:
        problems.append(f"partition={saved['partition']!r} is not one of {sorted(PARTITIONS)}")
    if saved["training"] not in ("path_local", "full"):
        problems.append(f"training={saved['training']!r} is not 'path_local' or 'full'")
    if not isinstance(saved["stop"], bool):
        problems.append(f"stop={saved['stop']!r} is not a bool")
    for name in ("n_levels", "n_scores", "n_features", "max_epochs"):
        if isinstance(saved[name], bool) or not isinstance(saved[name], int) or saved[name] < 0:
            problems.append(f"{name}={saved[name]!r} is not a count")
    if not isinstance(saved["lr"], (int, float)) or isinstance(saved["lr"], bool):
        problems.append(f"lr={saved['lr']!r} is not a number")
    for term in PRIOR_TERMS:  # the linear terms' start weights, fields of the configuration
        weight = saved.get(term, 0.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < float("inf"):
            problems.append(f"{term}={weight!r} is not a weight >= 0")
    capabilities = module_capabilities(saved["module_class"])
    saved_capabilities = saved["capabilities"]
    if saved_capabilities != dict(vars(capabilities)):
        problems.append(
            f"the module {saved['module_class'].__qualname__} can do other things now than when the model was "
            f"saved ({saved_capabilities} then, {dict(vars(capabilities))} now)"
        )
    if not problems:
        if saved["n_levels"] != tree.n_levels:
            problems.append(f"n_levels={saved['n_levels']} but the tree has {tree.n_levels} levels")
        if saved["n_features"] != fitted["n_features_in_"]:
            problems.append(f"n_features={saved['n_features']} but n_features_in_={fitted['n_features_in_']}")
        expected = int(n_outputs(tree, partition=saved["partition"], stop=saved["stop"]))
        if saved["n_scores"] != expected:
            problems.append(
                f"n_scores={saved['n_scores']} but the tree ({tree.n_classes} classes, "
                f"partition={saved['partition']!r}, stop={saved['stop']}) needs {expected}"
            )
        if saved["training"] == "path_local" and not (saved["partition"] == "sibling" and capabilities.scores_columns):
            problems.append("training='path_local' needs the sibling partition and a module that scores columns")
    if problems:
        raise ModelFileError(f"{folder} does not hold one consistent model: " + "; ".join(problems))
    try:
        check_pad_not_a_label(tree, fitted["pad_label_"])
    except ValueError as exc:
        raise ModelFileError(f"{folder / CONFIG}: {exc}") from None
    return FitConfig(**{**saved, "capabilities": capabilities})
