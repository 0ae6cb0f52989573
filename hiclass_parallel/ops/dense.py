"""Dense level tensors: the paper's tensor methods, faithful, for any array namespace.

- :func:`partition_scores`: eq. (masked_fill), scores ``(..., C)`` -> ``(..., L, C)``;
- :func:`labels_to_paths`: eq. (y_tree), node ids ``(...)`` -> ancestral paths ``(..., L)``;
- :func:`flatten_for_training`: section 3.1, the ``(N, C)`` score rows and ``(N,)`` labels of
  every labelled level, padded rows removed.

Inputs may be NumPy arrays, torch tensors (CPU or CUDA), CuPy arrays or any array-API array;
results are of the same kind on the same device. These materialise ``(..., L, C)`` exactly
as the paper does (hence the module's name); the lean engine in
:mod:`hiclass_parallel.ops.groups` avoids it and is tested against these.
"""

from __future__ import annotations

import math
from typing import Any

from .._backend import (
    array_namespace,
    device,
    is_cupy_array,
    is_numpy_array,
    is_torch_array,
    tree_buffer,
)
from ..tree import PAD, Tree

__all__ = ["flatten_for_training", "labels_to_paths", "partition_scores"]


def _check_scores(scores: Any, tree: Tree, name: str = "scores") -> None:
    shape = tuple(scores.shape)
    if len(shape) < 1 or shape[-1] != tree.n_classes:
        raise ValueError(
            f"{name} have shape {shape}: the last axis must hold one score per class of the tree ({tree.n_classes})"
        )


def _check_mask_value(xp: Any, dtype: Any, mask_value: float) -> None:
    if not xp.isdtype(dtype, "real floating") and not math.isfinite(mask_value):
        raise ValueError(f"mask_value {mask_value} cannot be stored in scores of dtype {dtype}; use a float dtype")


def partition_scores(scores: Any, tree: Tree, mask_value: float = -math.inf, out: Any = None) -> Any:
    """Partition scores by level of depth: the paper's masked fill (eq. masked_fill).

    ``out[..., l, c] = scores[..., c]`` where class ``c`` lives at level ``l``, and
    ``mask_value`` elsewhere (where ``tree.mask[l, c]`` is True).

    Parameters
    ----------
    scores : array of shape (..., n_classes)
        Scores (logits) of any float dtype, in any supported namespace and device.
    tree : Tree
        The class tree.
    mask_value : float, default=-inf
        The paper's masking value mu: ``-inf``, a finite value, or ``nan``.
    out : array of shape (..., n_levels, n_classes), default=None
        Preallocated output of the same dtype, namespace and device (saves the allocation,
        which on CPU costs more than the fill itself for large trees).

    Returns
    -------
    array of shape (..., n_levels, n_classes)
        Same dtype, namespace and device as ``scores``.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree, partition_scores
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> partition_scores(np.arange(9.0), tree, mask_value=np.nan)
    array([[ 0.,  1., nan, nan, nan, nan, nan, nan, nan],
           [nan, nan,  2.,  3.,  4.,  5., nan, nan, nan],
           [nan, nan, nan, nan, nan, nan,  6.,  7.,  8.]])
    """
    xp = array_namespace(scores)
    _check_scores(scores, tree)
    _check_mask_value(xp, scores.dtype, mask_value)
    shape = (*scores.shape[:-1], tree.n_levels, tree.n_classes)
    if out is not None:
        if tuple(out.shape) != shape or out.dtype != scores.dtype:
            raise ValueError(
                f"out has shape {tuple(out.shape)} and dtype {out.dtype}; expected shape {shape} and dtype {scores.dtype}"
            )
        if array_namespace(out) is not xp:
            raise TypeError("out must be of the same array kind as scores")
    if is_numpy_array(scores) or is_torch_array(scores) or is_cupy_array(scores):
        if out is not None and not _is_c_contiguous(out):
            out[...] = partition_scores(scores, tree, mask_value)  # rare: a strided view
            return out
        # One pass to fill, then a scatter of the B*C scores to their own level: each class is
        # unmasked at exactly one level, so this writes the output once instead of reading
        # a broadcast copy of the scores L times (as a `where` would). The scatter uses one
        # flat index per class, depth * C + c, into rows of L*C elements (one cached buffer).
        flat = _flat_level_index(tree, scores)
        if out is None:
            out = _empty_output(xp, shape, scores)
        n_rows = math.prod(shape[:-2])
        rows = xp.reshape(out, (n_rows, tree.n_levels * tree.n_classes))
        source = xp.reshape(scores, (n_rows, tree.n_classes))
        if is_numpy_array(scores):
            # NumPy runs one thread: fill and scatter a block of rows while it is in cache, so
            # the output travels to memory once; a separate scatter pass would fetch a cache
            # line per write (docs/performance.md, "The paper's table"). The loop runs over
            # memory blocks, not over samples.
            step = max(1, _BLOCK_BYTES // max(1, rows.shape[1] * rows.itemsize))
            for start in range(0, n_rows, step):
                block = rows[start : start + step]
                block.fill(mask_value)
                block[:, flat] = source[start : start + step]
        else:
            out[...] = mask_value
            if is_torch_array(scores):
                rows.index_copy_(1, flat, source)
            else:
                rows[:, flat] = source
        return out
    mask = tree_buffer(tree, "mask", scores)
    result = xp.where(mask, xp.asarray(mask_value, dtype=scores.dtype), xp.expand_dims(scores, axis=-2))
    if out is None:
        return result
    out[...] = result
    return out


def labels_to_paths(labels: Any, tree: Tree, check: bool = True) -> Any:
    """Map node ids to their ancestral paths: the paper's gather (eq. y_tree).

    Parameters
    ----------
    labels : integer array of any shape (...)
        Node ids ``0..n_classes-1``, at any depth of the tree.
    tree : Tree
        The class tree.
    check : bool, default=True
        Raise :class:`IndexError` on ids out of range. On a GPU this costs one small
        device-to-host transfer; pass False in a hot loop whose ids are known to be valid.

    Returns
    -------
    array of shape (..., n_levels)
        Paths padded with ``-1``, of the dtype, namespace and device of ``labels``.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree, labels_to_paths
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> labels_to_paths(np.array([3, 6, 1, 5, 2]), tree)
    array([[ 0,  3, -1],
           [ 0,  3,  6],
           [ 1, -1, -1],
           [ 1,  5, -1],
           [ 0,  2, -1]])
    """
    xp = array_namespace(labels)
    if not xp.isdtype(labels.dtype, "integral"):
        raise TypeError(f"labels must be integer node ids, got dtype {labels.dtype}; map labels with tree.to_ids first")
    flat = xp.reshape(labels, (-1,))
    if check and flat.shape[0]:
        low, high = int(xp.min(flat)), int(xp.max(flat))
        if low < 0 or high >= tree.n_classes:
            bad = low if low < 0 else high
            raise IndexError(f"label id {bad} is out of range: the tree has node ids 0..{tree.n_classes - 1}")
    # The device keeps one int32 copy of P_cl (the smallest that holds WordNet's ids); only
    # the gathered (B, L) rows are cast to the labels' dtype.
    paths = xp.take(tree_buffer(tree, "paths", labels), flat, axis=0)
    if paths.dtype != labels.dtype:
        paths = xp.astype(paths, labels.dtype)
    return xp.reshape(paths, (*labels.shape, tree.n_levels))


def flatten_for_training(partitioned: Any, paths: Any) -> tuple[Any, Any]:
    """Flatten batch and level, dropping padded rows (the paper's section 3.1).

    Parameters
    ----------
    partitioned : array of shape (..., n_levels, n_classes)
        Output of :func:`partition_scores`.
    paths : integer array of shape (..., n_levels)
        Output of :func:`labels_to_paths`.

    Returns
    -------
    rows : array of shape (n_rows, n_classes)
        One row of masked scores per labelled level of every sample.
    targets : array of shape (n_rows,)
        The ancestral label of each row; feed both to a flat cross-entropy.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree, partition_scores, labels_to_paths, flatten_for_training
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> scores = np.zeros((5, 9))
    >>> rows, targets = flatten_for_training(partition_scores(scores, tree), labels_to_paths(np.array([3, 6, 1, 5, 2]), tree))
    >>> rows.shape, targets.tolist()
    ((10, 9), [0, 3, 0, 3, 6, 1, 1, 5, 0, 2])
    """
    xp = array_namespace(partitioned, paths)
    if tuple(partitioned.shape[:-1]) != tuple(paths.shape):
        raise ValueError(
            f"partitioned scores of shape {tuple(partitioned.shape)} do not match paths of shape {tuple(paths.shape)}"
        )
    rows = xp.reshape(partitioned, (-1, partitioned.shape[-1]))
    targets = xp.reshape(paths, (-1,))
    keep = targets != PAD
    return rows[keep], targets[keep]


def _is_c_contiguous(array: Any) -> bool:
    if is_torch_array(array):
        return array.is_contiguous()
    return bool(array.flags.c_contiguous)


def _flat_level_index(tree: Tree, like: Any) -> Any:
    """``depth * n_classes + arange(n_classes)`` (int64) on the device of ``like``, cached.

    The position of each class's score in a row of ``n_levels * n_classes`` partitioned
    scores: one buffer of ``8 * C`` bytes serves the whole scatter.
    """
    xp = array_namespace(like)

    def build() -> Any:
        import numpy as np

        host = tree.depth.astype(np.int64) * tree.n_classes + np.arange(tree.n_classes, dtype=np.int64)
        if is_numpy_array(like):
            host.flags.writeable = False
            return host
        return xp.asarray(host, device=device(like))  # a private host copy: sharing it is safe

    return tree.cached((__name__, "flat_level_index", xp.__name__, str(device(like))), build)


def _empty_output(xp: Any, shape: tuple[int, ...], scores: Any) -> Any:
    """An uninitialised output of ``shape`` like ``scores``.

    A fresh CPU output of the paper's size costs more to fault in page by page than to write:
    Linux maps it 4 KiB at a time unless asked for transparent huge pages, which NumPy does for
    large arrays and torch's allocator does not (unless the process starts with
    ``THP_MEM_ALLOC_ENABLE=1``). Large torch CPU outputs therefore wrap a NumPy allocation
    (zero copy; the tensor owns it); timed by ``benchmarks/bench_paper_table.py``.
    """
    if is_torch_array(scores) and scores.device.type == "cpu" and math.prod(shape) * scores.element_size() >= _HUGE:
        import numpy as np
        import torch

        np_dtype = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}.get(scores.dtype)
        if np_dtype is not None:
            return torch.from_numpy(np.empty(shape, dtype=np_dtype))
    return xp.empty(shape, dtype=scores.dtype, device=device(scores))


#: Rows of the NumPy output filled and scattered together (bytes): well inside a CPU's L3.
_BLOCK_BYTES = 8 << 20

#: Outputs from this size on are allocated with transparent huge pages where possible (NumPy's
#: own threshold for asking the kernel for them is 4 MiB).
_HUGE = 1 << 22
