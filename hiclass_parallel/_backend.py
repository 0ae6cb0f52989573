"""Array-namespace plumbing: one code path for NumPy, torch (CPU/CUDA), CuPy and any
array-API library, without importing a framework the caller did not use.

``array_api_compat`` picks the namespace from the input's type. Tree buffers are copied to
an input's namespace and device once and cached on the tree, so repeated calls never move
the tree from the host again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace, device, is_cupy_array, is_numpy_array, is_torch_array

__all__ = ["array_namespace", "device", "is_numpy_array", "is_torch_array", "is_cupy_array", "tree_buffer", "to_numpy"]


def _device_key(array: Any) -> str:
    return str(device(array))


def tree_buffer(tree: Any, name: str, like: Any, dtype: Any = None) -> Any:
    """``tree.<name>`` (a NumPy array) in the namespace and on the device of ``like``.

    The copy is cached on the tree, keyed by namespace, device and dtype, so it is made once
    per device: later calls are a dictionary lookup, with no host round trip.
    ``name`` is an attribute of the tree, or ``"groups:<partition>"``.
    """
    xp = array_namespace(like)

    def build() -> Any:
        if name.startswith("groups:"):
            host = tree.groups(name.split(":", 1)[1])
        else:
            host = getattr(tree, name)
        host = np.ascontiguousarray(host)
        if is_numpy_array(like):
            return host if dtype is None else host.astype(dtype, copy=False)
        # A writable copy: torch warns on (and may alias) read-only NumPy memory.
        buf = xp.asarray(np.array(host, copy=True), device=device(like))
        return buf if dtype is None else xp.astype(buf, dtype)

    return tree.cached((__name__, xp.__name__, _device_key(like), name, str(dtype)), build)


def to_numpy(array: Any) -> np.ndarray:
    """A host NumPy copy (or view) of any supported array; one transfer for device arrays."""
    if isinstance(array, np.ndarray):
        return array
    if is_torch_array(array):
        return array.detach().cpu().numpy()
    if is_cupy_array(array):
        return array.get()
    try:
        return np.asarray(array)
    except Exception:  # array-api-strict and friends expose DLPack
        return np.from_dlpack(array)
