"""The ``.npz`` file format of :meth:`Tree.save <hiclass_parallel.Tree.save>` / ``Tree.load``.

NumPy arrays only, never pickle: ``parents``, ``labels`` and ``label_kind`` (``"ids"`` for
default labels, ``"int"``, ``"str"`` for files of earlier versions, ``"utf8"`` for string
labels stored as UTF-8 bytes and offsets, which keep trailing NUL characters that NumPy's
str arrays drop). Reading checks every array and names what is wrong with a damaged or
foreign file.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .exceptions import TreeError

__all__ = ["read_tree", "write_tree"]

_LABEL_KINDS = ("ids", "int", "str", "utf8")


def write_tree(path: str | os.PathLike, parents: np.ndarray, labels: np.ndarray, default_labels: bool) -> None:
    """Write ``parents`` and ``labels`` (str or int; ``default_labels``: the node ids) to ``path``."""
    extra = {}
    if labels.dtype == object:
        if not all(isinstance(v, str) for v in labels):
            kinds = sorted({type(v).__name__ for v in labels})
            raise TypeError(
                f"save supports str or int labels; these labels are of type(s) {', '.join(kinds)} and "
                "cannot round-trip without pickle"
            )
        # UTF-8 bytes and offsets, not a NumPy str array: those drop trailing NUL characters.
        encoded = [v.encode("utf-8", "surrogatepass") for v in labels.tolist()]
        kind, stored = "utf8", np.frombuffer(b"".join(encoded), dtype=np.uint8)
        extra["label_offsets"] = np.cumsum([0] + [len(e) for e in encoded], dtype=np.int64)
    else:
        kind, stored = ("ids" if default_labels else "int"), labels
    np.savez_compressed(path, parents=parents, labels=stored, label_kind=np.asarray(kind), **extra)


def read_tree(path: str | os.PathLike | Any) -> tuple[np.ndarray, Any]:
    """``(parents, labels)`` from a file written by :func:`write_tree` (a path, or a binary
    file object: errors then name its ``name`` attribute); labels ``None`` for default labels.
    Raises :class:`~hiclass_parallel.TreeError` naming the damage."""
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
        except Exception as err:  # noqa: BLE001 - damaged members: zlib, zipfile (even NotImplementedError), CRC
            raise damaged(f"an array cannot be read ({type(err).__name__}: {err})") from err
    if not all(isinstance(a, np.ndarray) for a in (kind, parents, labels, np.empty(0) if offsets is None else offsets)):
        raise damaged("a member of the archive is not a NumPy array")
    if kind.shape != () or kind.dtype.kind != "U" or str(kind) not in _LABEL_KINDS:
        raise damaged(f"label_kind is {kind!r}, expected one of {_LABEL_KINDS}")
    kind = str(kind)
    if parents.ndim != 1 or parents.dtype.kind not in "iu":
        raise damaged(f"parents must be a 1-D integer array, got {parents.dtype} of shape {parents.shape}")
    if kind == "ids":
        return parents, None
    if kind == "utf8":
        if labels.dtype != np.uint8 or labels.ndim != 1 or offsets is None or offsets.ndim != 1 \
                or offsets.dtype.kind not in "iu" or offsets.size != parents.size + 1 \
                or offsets[0] != 0 or offsets[-1] != labels.size or np.any(np.diff(offsets) < 0):
            raise damaged("its UTF-8 labels and their offsets do not match the parents")
        raw = labels.tobytes()
        try:
            values = [raw[a:b].decode("utf-8", "surrogatepass") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        except UnicodeDecodeError as err:
            raise damaged(f"a label is not valid UTF-8 ({err})") from err
        return parents, values
    expected_kind = "U" if kind == "str" else "iu"
    if labels.ndim != 1 or labels.dtype.kind not in expected_kind:
        raise damaged(f"{kind} labels must be a 1-D array, got {labels.dtype} of shape {labels.shape}")
    return parents, (labels.tolist() if kind == "str" else labels)


