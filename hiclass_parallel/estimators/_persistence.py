"""Saving a fitted classifier without pickle: safetensors weights, an ``.npz`` tree, JSON parameters.

A pickle runs code when it is loaded, so a model file from someone else is a program. The
format here is data only, and loading it executes nothing from the files:

- ``weights.safetensors``: the torch module's ``state_dict`` (safetensors stores raw tensors
  and a JSON header; loading parses them, it never unpickles);
- ``tree.npz``: the class tree, through :meth:`~hiclass_parallel.Tree.save`
  (``np.load(..., allow_pickle=False)``);
- ``config.json``: the estimator's parameters and fitted scalars.

Parameters that JSON cannot hold as plain values are refused at save time with an error that
names them (a callback object, a custom ``train_split``, a ``RandomState``...). Classes (the
``module``, the ``optimizer``, ``module__activation``...) are stored as their import path and
resolved at load time only from an allow-list (this package, ``torch.nn``, ``torch.optim``),
from names the caller passes in ``allowed=``, or anything with ``trusted=True``: importing a
module runs its code, which is the one thing this format exists to avoid.

What is not saved: the optimizer's state (Adam's moments) and skorch's training history.
A loaded model predicts exactly as the saved one; ``partial_fit`` or a warm start continues
from the saved weights with a fresh optimizer. Pickle keeps working as before.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..tree import Tree

__all__ = ["save_classifier", "load_classifier", "FORMAT_VERSION", "ALLOWED_PREFIXES"]

#: Version of the on-disk layout; :func:`load_classifier` refuses files from a newer one.
FORMAT_VERSION = 1

#: Import-path prefixes of the classes that load without ``trusted=True``.
ALLOWED_PREFIXES = ("hiclass_parallel.", "torch.nn.", "torch.optim.")

WEIGHTS, TREE, CONFIG = "weights.safetensors", "tree.npz", "config.json"

#: Fitted attributes stored as JSON scalars (besides the tree and the weights).
_FITTED = ("n_features_in_", "n_levels_", "n_scores_", "stop_", "partition_", "path_local_")


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
        if "<locals>" in qualname:
            raise TypeError(
                f"cannot save parameter {name!r} without pickle: {value!r} is defined inside a function, so it "
                "has no import path; define it at module level, or save the model with pickle"
            )
        return {"__class__": f"{value.__module__}.{qualname}"}
    if isinstance(value, (list, tuple)):
        items = [_encode(v, f"{name}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v, f"{name}[{k!r}]") for k, v in value.items()}}
    raise TypeError(
        f"cannot save parameter {name!r} without pickle: a {type(value).__module__}.{type(value).__qualname__} "
        "object is not JSON-serialisable (plain values, lists, tuples, dicts with str keys and classes "
        f"are); set {name.split('[')[0]!r} to a plain value before saving, or save the model with pickle"
    )


def _resolve_class(path: str, name: str, trusted: bool, allowed: frozenset[str]) -> type:
    if not (trusted or path in allowed or path.startswith(ALLOWED_PREFIXES)):
        raise ValueError(
            f"parameter {name!r} names the class {path!r}, which is outside the allow-list "
            f"({', '.join(p + '*' for p in ALLOWED_PREFIXES)}): importing it would run its module's code. "
            f"Pass allowed=[{path!r}] (or trusted=True) to load_classifier if you trust this file"
        )
    module, _, qualname = path.rpartition(".")
    # A nested class (Outer.Inner) has a dotted qualname: find the importable module prefix.
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        if isinstance(obj, type):
            return obj
        break
    raise ValueError(f"parameter {name!r}: cannot import the class {path!r} (module {module!r}, name {qualname!r})")


def _decode(value: Any, name: str, trusted: bool, allowed: frozenset[str]) -> Any:
    if isinstance(value, list):
        return [_decode(v, f"{name}[{i}]", trusted, allowed) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if "__class__" in value:
        return _resolve_class(value["__class__"], name, trusted, allowed)
    if "__device__" in value:
        return torch.device(value["__device__"])
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
        A folder, created if needed; ``weights.safetensors``, ``tree.npz`` and
        ``config.json`` are written in it (existing ones are replaced).

    Returns
    -------
    path : pathlib.Path
        The folder.

    Raises
    ------
    TypeError
        When a parameter cannot be stored as plain JSON (a callback object, a custom
        ``train_split``, a ``RandomState``): the message names it.

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
    ['config.json', 'tree.npz', 'weights.safetensors']
    >>> bool((loaded.predict(X) == clf.predict(X)).all())
    True
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(clf)
    if hasattr(clf, "hierarchy_"):
        raise TypeError(
            f"save_classifier stores a class tree; {type(clf).__name__} was fitted on a hierarchy with several "
            "parents (hierarchy_), which this format does not hold yet: pickle it instead"
        )
    st = _safetensors()
    params = clf.get_params(deep=False)
    tree = params.pop("tree")
    encoded = {name: _encode(value, name) for name, value in sorted(params.items())}
    fitted = {name: _encode(getattr(clf, name), name) for name in _FITTED}
    fitted["pad_label_"] = _encode(clf.pad_label_, "pad_label_")
    fitted["module_class_"] = _encode(clf.module_class_, "module_class_")
    if hasattr(clf, "feature_names_in_"):
        fitted["feature_names_in_"] = [str(v) for v in clf.feature_names_in_]
    config = {
        "format": "hiclass_parallel.HierarchicalClassifier",
        "format_version": FORMAT_VERSION,
        "package_version": _package_version(),
        "class": f"{type(clf).__module__}.{type(clf).__qualname__}",
        "tree_given": tree is not None,
        "params": encoded,
        "fitted": fitted,
    }
    text = json.dumps(config, indent=1, sort_keys=True, allow_nan=True)

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        clf.tree_.save(folder / TREE)
    except TypeError as exc:
        raise TypeError(f"cannot save the tree without pickle: {exc}") from exc
    state = {k: v.detach().to("cpu").contiguous() for k, v in clf.net_.module_.state_dict().items()}
    # Shared tensors (tied weights) must be stored once: safetensors refuses aliases.
    st.save_file(_untie(state), str(folder / WEIGHTS), metadata={"format_version": str(FORMAT_VERSION)})
    (folder / CONFIG).write_text(text + "\n", encoding="utf-8")
    return folder


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    seen: dict[int, str] = {}
    out = {}
    for key, tensor in state.items():
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else -id(tensor)
        out[key] = tensor.clone() if ptr in seen else tensor
        seen.setdefault(ptr, key)
    return out


def _package_version() -> str:
    import hiclass_parallel  # the package's face (its version), not a layer

    return hiclass_parallel.__version__


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
        Import paths of classes outside :data:`ALLOWED_PREFIXES` that may be imported
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
    ValueError
        When the file names a class outside the allow-list (the message says which
        parameter and how to allow it), or comes from a newer format.
    """
    folder = Path(path)
    config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    if config.get("format") != "hiclass_parallel.HierarchicalClassifier":
        raise ValueError(f"{folder / CONFIG} is not a saved HierarchicalClassifier (format={config.get('format')!r})")
    if int(config["format_version"]) > FORMAT_VERSION:
        raise ValueError(
            f"{folder} was saved in format {config['format_version']}, newer than this version of hiclass_parallel "
            f"reads ({FORMAT_VERSION}); upgrade hiclass_parallel"
        )
    allowed = frozenset(allowed)
    cls = _resolve_class(config["class"], "the estimator class", trusted, allowed)
    params = {k: _decode(v, k, trusted, allowed) for k, v in config["params"].items()}
    fitted = {k: _decode(v, k, trusted, allowed) for k, v in config["fitted"].items()}
    tree = Tree.load(folder / TREE)
    if device is None:
        device = params.get("device", "cpu")
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            warnings.warn(f"the model was saved for device={str(device)!r}, which is unavailable; loading on the CPU",
                          RuntimeWarning, stacklevel=2)
            device = "cpu"
    params["device"] = device
    clf = cls(tree=tree if config["tree_given"] else None, **params)

    clf.tree_ = tree
    clf.classes_ = tree.labels
    for name in _FITTED + ("pad_label_", "module_class_"):
        setattr(clf, name, fitted[name])
    if "feature_names_in_" in fitted:
        clf.feature_names_in_ = np.asarray(fitted["feature_names_in_"], dtype=object)

    state = _safetensors().load_file(str(folder / WEIGHTS), device="cpu")
    with torch.random.fork_rng(devices=[]):  # building the net draws initial weights: leave the caller's RNG
        net = clf._build_net(None, n_rows=None)  # not trained here: max_epochs is only stored
        net.initialize()
    net.module_.load_state_dict(state, strict=True)
    net.module_.to(net.device)
    clf.net_ = net
    return clf
