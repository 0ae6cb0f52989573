"""Data plumbing of :class:`HierarchicalClassifier`: rows of X and node ids, a batch at a time.

``DataLoader`` asks :class:`TreeDataset` for a whole mini-batch at once (``__getitems__``), so
a scipy sparse matrix is sliced once per batch and only that slice is converted: made dense
for dense modules, or passed on as a torch sparse CSR tensor to modules with
``accepts_sparse = True``. The whole matrix is never made dense.

Stored zeros (entries of a sparse matrix whose value is 0, as ``X.multiply(mask)`` leaves them)
are left out of the sparse batches: a zero entry adds nothing to a score, but a sparse
gradient would hold its feature's row, and ``LazyAdam`` would move that row. So a matrix
trains the model that the same matrix after ``eliminate_zeros()`` trains, and the user's matrix
is never changed (the batches are built from its arrays, without copying it).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch.utils.data import Dataset
from torch.utils.data import default_collate

__all__ = ["TreeDataset", "collate_batch", "csr_tensor", "has_stored_zeros", "split_target"]


class _Batch(tuple):
    """A whole mini-batch built by :meth:`TreeDataset.__getitems__` (X, y)."""


def split_target(y: Any) -> tuple[Any, Any]:
    """A batch's target as ``(ids, weights)``: a weighted batch carries the pair ``(node ids,
    sample weights)`` (a tuple, or the list skorch's ``to_tensor`` makes of it), a plain batch
    the ids alone (weights ``None``)."""
    if isinstance(y, (tuple, list)) and len(y) == 2:
        return y[0], y[1]
    return y, None


def collate_batch(batch: Any) -> Any:
    """DataLoader ``collate_fn``: pass a ready :class:`_Batch` through, else the default."""
    if isinstance(batch, _Batch):
        return tuple(batch)
    return default_collate(batch)


def _torch_csr(crow: np.ndarray, col: np.ndarray, val: np.ndarray, shape: tuple[int, int]) -> torch.Tensor:
    """CSR parts as a torch sparse CSR tensor: int64 indices, float32 values."""
    with warnings.catch_warnings():  # torch flags sparse CSR as beta; the layer uses only its parts
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(crow.astype(np.int64)), torch.from_numpy(col.astype(np.int64)),
            torch.from_numpy(val.astype(np.float32, copy=False)), size=shape, check_invariants=False,
        )


def csr_tensor(X: sp.spmatrix, skip_zeros: bool = False) -> torch.Tensor:
    """A scipy sparse batch as a torch sparse CSR float32 tensor (for ``SparseLinear``);
    ``skip_zeros``: without its stored zeros."""
    X = sp.csr_matrix(X)
    if skip_zeros:
        X = X.copy()  # the batch's copy (csr_matrix may have returned the caller's matrix itself)
        X.eliminate_zeros()
    return _torch_csr(X.indptr, X.indices, X.data, X.shape)


def has_stored_zeros(X: Any) -> bool:
    """Whether a scipy sparse ``X`` stores entries whose value is 0 (one pass over its values)."""
    return sp.issparse(X) and hasattr(X, "data") and bool((np.asarray(X.data) == 0).any())


def csr_rows(X: sp.spmatrix, idx: np.ndarray, skip_zeros: bool = False) -> torch.Tensor:
    """``csr_tensor(X[idx])``, gathered straight from a CSR ``X``'s arrays (scipy's row indexing
    took about a millisecond of each training step of the text model); ``skip_zeros``: without
    the stored zeros of those rows."""
    if getattr(X, "format", None) != "csr":
        return csr_tensor(X[idx], skip_zeros)
    starts = X.indptr[idx].astype(np.int64)
    lengths = X.indptr[idx + 1].astype(np.int64) - starts
    crow = np.zeros(idx.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=crow[1:])
    pos = np.repeat(starts - crow[:-1], lengths) + np.arange(crow[-1], dtype=np.int64)
    if skip_zeros:
        keep = X.data[pos] != 0
        row = np.repeat(np.arange(idx.shape[0]), lengths)
        np.cumsum(np.bincount(row[keep], minlength=idx.shape[0]), out=crow[1:])
        pos = pos[keep]
    return _torch_csr(crow, X.indices[pos], X.data[pos], (idx.shape[0], X.shape[1]))


class TreeDataset(Dataset):
    """Rows of X (dense NumPy, torch, or scipy sparse) and node ids, fetched a batch at a time.

    Rows become float32 tensors (the module's dtype); with ``sparse_batches`` a scipy sparse
    X gives torch sparse CSR batches instead of dense ones. With ``rows``, item ``i`` is row
    ``rows[i]`` of X with target ``y[i]``. With ``weight`` (one per item, float64), a batch's
    target is the pair ``(node ids, weights)`` (:func:`split_target`), so that a batch keeps
    each target with its weight wherever the loader takes its items from.
    """

    def __init__(self, X: Any, y: np.ndarray | None = None, sparse_batches: bool = False,
                 rows: np.ndarray | None = None, weight: np.ndarray | None = None):
        self.X = X
        self.y = y
        self.sparse_batches = bool(sparse_batches) and sp.issparse(X)
        # Item i is row rows[i] of X (a multi-label sample once per label), without copying X.
        self.rows = rows
        self.weight = weight
        # Stored zeros are skipped batch by batch (the module docstring says why); looked for once.
        self.skip_zeros = self.sparse_batches and has_stored_zeros(X)

    def __len__(self) -> int:
        return int(self.X.shape[0] if self.rows is None else self.rows.shape[0])

    def _rows(self, idx: np.ndarray) -> tuple[torch.Tensor, Any]:
        X = self.X
        yb = None if self.y is None else torch.from_numpy(self.y[idx])
        if yb is not None and self.weight is not None:
            yb = (yb, torch.from_numpy(self.weight[idx]))
        if self.rows is not None:
            idx = self.rows[idx]
        if self.sparse_batches:
            Xb = csr_rows(X, idx, self.skip_zeros)
        elif sp.issparse(X):
            Xb = torch.from_numpy(X[idx].toarray().astype(np.float32, copy=False))
        elif isinstance(X, torch.Tensor):
            Xb = X[torch.as_tensor(idx, device=X.device)].to(torch.float32)
        else:
            Xb = torch.from_numpy(np.ascontiguousarray(X[idx], dtype=np.float32))
        return Xb, yb

    def __getitem__(self, i: int) -> tuple[torch.Tensor, Any]:
        Xb, yb = self._rows(np.asarray([i]))
        if isinstance(yb, tuple):
            return Xb[0], (yb[0][0], yb[1][0])
        return Xb[0], (torch.zeros((), dtype=torch.int64) if yb is None else yb[0])

    def __getitems__(self, indices: list[int]) -> _Batch:
        return _Batch(self._rows(np.asarray(indices, dtype=np.int64)))
