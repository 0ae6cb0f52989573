"""The ``.npz`` file format of :meth:`Tree.save <hiclass_parallel.Tree.save>` / ``Tree.load``.

NumPy arrays only, never pickle: ``parents``, ``labels`` and ``label_kind`` (``"ids"`` for
default labels, ``"int"`` for integer labels, ``"utf8"`` for string labels stored as UTF-8
bytes and offsets, which keep trailing NUL characters that NumPy's
str arrays drop). A tree with ``names`` (a taxonomy that repeats a name under different
parents) also holds ``names`` and ``name_kind`` (``"int"`` or ``"utf8"``, with
``name_offsets``); its labels are then of kind ``"paths"`` when they are the paths of names,
which are rebuilt from the names on reading. Reading checks every array and names what is
wrong with a damaged or foreign file; string labels stored as a NumPy str array (``"str"``, as
unreleased versions wrote them) are refused by name.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..exceptions import TreeError

__all__ = ["read_tree", "write_tree"]

_LABEL_KINDS = ("ids", "int", "utf8", "paths")


def _encode(values: np.ndarray, what: str) -> tuple[str, np.ndarray, np.ndarray | None]:
    """``(kind, stored, offsets)`` of str or int values: UTF-8 bytes and offsets for strings
    (not a NumPy str array: those drop trailing NUL characters), the integers as they are."""
    if values.dtype != object:
        return "int", values, None
    if not all(isinstance(v, str) for v in values):
        kinds = sorted({type(v).__name__ for v in values})
        raise TypeError(
            f"save supports str or int {what}; these {what} are of type(s) {', '.join(kinds)} and "
            "cannot round-trip without pickle"
        )
    encoded = [v.encode("utf-8", "surrogatepass") for v in values.tolist()]
    offsets = np.cumsum([0] + [len(e) for e in encoded], dtype=np.int64)
    return "utf8", np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def write_tree(path: str | os.PathLike, parents: np.ndarray, labels: np.ndarray, default_labels: bool,
               names: np.ndarray | None = None, path_labels: bool = False) -> None:
    """Write ``parents`` and ``labels`` (str or int; ``default_labels``: the node ids) to ``path``,
    and the ``names`` when there are any (``path_labels``: the labels are their paths)."""
    extra = {}
    if names is not None:
        name_kind, stored_names, name_offsets = _encode(names, "names")
        extra.update(names=stored_names, name_kind=np.asarray(name_kind))
        if name_offsets is not None:
            extra["name_offsets"] = name_offsets
    if path_labels:
        kind, stored = "paths", np.zeros(0, dtype=np.uint8)
    elif labels.dtype == object:
        kind, stored, offsets = _encode(labels, "labels")
        extra["label_offsets"] = offsets
    else:
        kind, stored = ("ids" if default_labels else "int"), labels
    np.savez_compressed(path, parents=parents, labels=stored, label_kind=np.asarray(kind), **extra)


def read_tree(path: str | os.PathLike | Any) -> tuple[np.ndarray, Any, Any]:
    """``(parents, labels, names)`` from a file written by :func:`write_tree` (a path, or a
    binary file object: errors then name its ``name`` attribute); labels ``None`` for default
    labels and for labels that are the paths of the names; names ``None`` when the file has
    none. Raises :class:`~hiclass_parallel.TreeError` naming the damage."""
    where = getattr(path, "name", repr(path)) if hasattr(path, "read") else os.fspath(path)

    def damaged(why: str) -> TreeError:
        return TreeError(f"{where!s} is not a tree saved by Tree.save: {why}")

    try:
        data = np.load(path, allow_pickle=False)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as err:  # noqa: BLE001 - zipfile alone raises half a dozen kinds on damage
        raise damaged(f"not a readable .npz archive ({type(err).__name__})") from err
    if not hasattr(data, "files"):  # a bare .npy array
        raise damaged("it holds a single array, not a .npz archive")
    with data:
        missing = [name for name in ("parents", "labels", "label_kind") if name not in data.files]
        if missing:
            raise damaged(f"no {', '.join(missing)} array in the archive (it holds {', '.join(data.files) or 'nothing'})")
        try:
            kind = data["label_kind"]
            parents = data["parents"]
            labels = data["labels"]
            offsets = data["label_offsets"] if "label_offsets" in data.files else None
            names = data["names"] if "names" in data.files else None
            name_kind = data["name_kind"] if "name_kind" in data.files else None
            name_offsets = data["name_offsets"] if "name_offsets" in data.files else None
        except Exception as err:  # noqa: BLE001 - damaged members: zlib, zipfile (even NotImplementedError), CRC
            raise damaged(f"an array cannot be read ({type(err).__name__}: {err})") from err
    if not all(isinstance(a, np.ndarray) for a in (kind, parents, labels, np.empty(0) if offsets is None else offsets)):
        raise damaged("a member of the archive is not a NumPy array")
    if kind.shape == () and kind.dtype.kind == "U" and str(kind) == "str":
        raise damaged("its labels are of kind 'str', written by an unreleased version before labels were "
                      "stored as UTF-8; this version reads only the kinds " + ", ".join(map(repr, _LABEL_KINDS)))
    if kind.shape != () or kind.dtype.kind != "U" or str(kind) not in _LABEL_KINDS:
        raise damaged(f"label_kind is {kind!r}, expected one of {_LABEL_KINDS}")
    kind = str(kind)
    if parents.ndim != 1 or parents.dtype.kind not in "iu":
        raise damaged(f"parents must be a 1-D integer array, got {parents.dtype} of shape {parents.shape}")
    if names is not None:
        if name_kind is None or not isinstance(name_kind, np.ndarray) or name_kind.shape != () \
                or str(name_kind) not in ("int", "utf8"):
            raise damaged(f"name_kind is {name_kind!r}, expected 'int' or 'utf8'")
        names = _decode(names, str(name_kind), name_offsets, parents.size, "names", damaged)
    if kind == "paths":
        if names is None:
            raise damaged("its labels are paths of names, but it holds no names")
        return parents, None, names
    if kind == "ids":
        return parents, None, names
    return parents, _decode(labels, kind, offsets, parents.size, "labels", damaged), names


def _decode(stored: Any, kind: str, offsets: Any, n: int, what: str, damaged: Any) -> Any:
    """The values of one member written by :func:`_encode`."""
    if kind == "utf8":
        if not isinstance(offsets, np.ndarray) or stored.dtype != np.uint8 or stored.ndim != 1 \
                or offsets.ndim != 1 or offsets.dtype.kind not in "iu" or offsets.size != n + 1 \
                or offsets[0] != 0 or offsets[-1] != stored.size or np.any(np.diff(offsets) < 0):
            raise damaged(f"its UTF-8 {what} and their offsets do not match the parents")
        raw = stored.tobytes()
        try:
            return [raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        except UnicodeDecodeError as err:
            raise damaged(f"a {what[:-1]} is not valid UTF-8 ({err})") from err
    if not isinstance(stored, np.ndarray) or stored.ndim != 1 or stored.dtype.kind not in "iu":
        raise damaged(f"{kind} {what} must be a 1-D array, got {stored.dtype} of shape {stored.shape}")
    return stored


