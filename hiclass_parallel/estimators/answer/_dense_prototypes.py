"""Class prototypes of dense rows: each class's mean, compared by a Gaussian log-likelihood.

The dense counterpart of :class:`._prototypes.ClassPrototypes` (sparse rows, cosine). A dense
network fits its training rows closely (about seven rows per class at the 11,110-class
synthetic benchmark), and its scores then say little about which of a few close classes a
row belongs to. A prototype per class is the evidence a per-class linear model would use,
at no training cost: the class's mean ``mu_c`` and one variance per feature pooled over all
classes (``var``), so that a row's similarity to class ``c`` is its log-likelihood under
``N(mu_c, diag(var))`` -- the linear discriminant of a nearest-mean classifier, up to a
constant of the row (dropped: it changes no ranking and no fitted weight).

The quadratic is formed about the mean of all training rows (:meth:`GaussianPrototypes.centre`,
derived from the stored sums and counts, so nothing more is saved): rows and class means lose
the same centre before the float32 products. Uncentred, a feature whose values are large next
to their within-class spread (a constant column of 1000, a year 2020 +- 0.5) makes
``x . (mu / var)`` and ``mu . mu / (2 var)`` huge and nearly equal, and their float32
difference is rounding noise; centred, both are of the size of the differences they rank. Any
centre near the mean serves, as long as rows and means lose the same one: it is the mean
rounded to float32, which a float32 row near it loses exactly (Sterbenz), and a float64 row
loses in float64 before the cast.

A class with few rows has a noisy mean, and a class with none has no mean at all; both borrow
from their parent (hierarchical shrinkage, McCallum et al. 1998): ``mu_c = (sum of the class's
rows + SHRINKAGE * mu_parent) / (n_c + SHRINKAGE)``, from the top level down, where the top
level's classes shrink towards the mean of all rows. The re-ranking is the same as for the
cosine (:func:`._prototypes.rerank_order`): ``log p(answer) + weight * similarity``, with the
weight fitted on the held-out rows (:func:`._prototypes.choose_weight`).

Memory: ``n_classes x n_features`` float64 sums (8 bytes per class and feature), and the
scaled means, float32, while predicting.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .._defaults import GAUSSIAN_MAX_WEIGHT, GAUSSIAN_START_WEIGHT
from .._defaults import GAUSSIAN_SHRINKAGE as SHRINKAGE

if TYPE_CHECKING:
    import torch

__all__ = ["GaussianPrototypes"]


@dataclasses.dataclass
class GaussianPrototypes:
    """Per-class sums of dense training rows (``sums``, ``(n_classes, n_features)`` float64),
    their counts, the sum of every row's squares per feature (for the pooled variance), the
    tree's ``parents`` and ``depth`` (for the shrinkage, top-down)."""

    sums: np.ndarray
    counts: np.ndarray
    squares: np.ndarray
    parents: np.ndarray
    depth: np.ndarray

    #: The kind's name in a saved model's ``prototypes.npz``.
    KIND: ClassVar[str] = "gaussian"
    #: The largest weight ``prototypes="auto"`` fits: a log-likelihood is in nats, and on the
    #: synthetic benchmarks the weights fitted were 4-420 (the network's log-probabilities of
    #: overfitted classes count for little beside it).
    MAX_WEIGHT: ClassVar[float] = GAUSSIAN_MAX_WEIGHT
    #: Without held-out rows: the log-likelihood added to the model's log-probability as it is,
    #: the model's distribution as the prior of Bayes' rule.
    DEFAULT_WEIGHT: ClassVar[float] = GAUSSIAN_START_WEIGHT

    @classmethod
    def from_rows(cls, X: Any, ids: np.ndarray, tree: Any,
                  sample_weight: np.ndarray | None = None) -> GaussianPrototypes:
        """The statistics of the rows of dense ``X`` per node id in ``ids`` (``-1``:
        unlabelled, skipped) of ``tree``'s classes, each row counted ``sample_weight`` times
        (``None``: once; the counts, sums and squares are then weighted ones)."""
        import scipy.sparse as sp

        ids = np.asarray(ids)
        rows = np.flatnonzero(ids >= 0)
        X = _host_dense(X)
        X = (X if rows.size == X.shape[0] else X[rows]).astype(np.float64, copy=False)
        n_classes = tree.n_classes
        times = np.ones(rows.size) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]
        # One sparse (class x row) membership product: np.add.at is unbuffered and much slower.
        member = sp.csr_matrix((times, (ids[rows], np.arange(rows.size))), shape=(n_classes, rows.size))
        sums = np.asarray(member @ X)
        counts = np.bincount(ids[rows], weights=times, minlength=n_classes).astype(np.float64)
        squares = np.einsum("ij,ij->j", X, X) if sample_weight is None else np.einsum("i,ij,ij->j", times, X, X)
        return cls(sums=sums, counts=counts, squares=squares,
                   parents=np.asarray(tree.parents, dtype=np.int64), depth=np.asarray(tree.depth))

    def add(self, other: GaussianPrototypes) -> None:
        """Add another set of rows' statistics (more training rows, of the same classes)."""
        self.sums = self.sums + other.sums
        self.counts = self.counts + other.counts
        self.squares = self.squares + other.squares
        self.__dict__.pop("_scaled", None)  # the cached means were of the old sums

    def sum_over_ranks(self, group: Any) -> None:
        """Data-parallel training: every rank's statistics added up (in rank order, so alike
        on every rank), as one process would have them from all the shards."""
        import torch.distributed as dist

        parts: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(parts, (self.sums, self.counts, self.squares), group=group)
        self.sums = np.sum([part[0] for part in parts], axis=0)
        self.counts = np.sum([part[1] for part in parts], axis=0)
        self.squares = np.sum([part[2] for part in parts], axis=0)
        self.__dict__.pop("_scaled", None)

    def variance(self) -> np.ndarray:
        """The within-class variance of each feature, pooled over the classes with rows
        (floored at a millionth of the mean variance, so that a constant feature does not
        divide by zero)."""
        seen = self.counts > 0
        n = self.counts.sum()
        between = (np.square(self.sums[seen]) / self.counts[seen, None]).sum(axis=0)  # n_c * mean_c ** 2
        within = np.maximum(self.squares - between, 0.0) / max(n - seen.sum(), 1.0)
        floor = max(float(within.mean()) * 1e-6, np.finfo(np.float32).tiny)
        return np.maximum(within, floor)

    def centre(self) -> np.ndarray:
        """The mean of all rows (float64, ``(n_features,)``); :meth:`score` centres rows and
        class means by it, rounded to float32, before the float32 products."""
        return self.sums.sum(axis=0) / max(self.counts.sum(), 1.0)

    def means(self) -> np.ndarray:
        """Each class's mean, shrunk towards its parent's (:data:`SHRINKAGE`), from the top down."""
        grand = self.centre()
        means = np.empty_like(self.sums)
        for level in range(int(self.depth.max(initial=-1)) + 1):
            nodes = np.flatnonzero(self.depth == level)
            prior = grand if level == 0 else means[self.parents[nodes]]
            means[nodes] = (self.sums[nodes] + SHRINKAGE * prior) / (self.counts[nodes, None] + SHRINKAGE)
        return means

    def _scaled_means(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``m_c / var`` (float32) and ``m_c . m_c / (2 var)`` per class, where ``m_c = mu_c -
        centre``, and the centre (:meth:`centre` rounded to float32), cached: the log-likelihood
        up to the row's constant is ``(x - centre) . (m_c / var) - m_c . m_c / (2 var)``."""
        scaled = self.__dict__.get("_scaled")
        if scaled is None:
            centre = self.centre().astype(np.float32)
            means, var = self.means() - centre.astype(np.float64), self.variance()
            scaled = self.__dict__["_scaled"] = (
                (means / var).astype(np.float32), (0.5 * np.square(means) / var).sum(axis=1).astype(np.float32),
                centre)
        return scaled

    def export_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """What :meth:`score` is computed from, of rows already centred (:meth:`centre`, rounded
        to float32): ``m_c / var`` and ``m_c . m_c / (2 var)`` per class, ``m_c = mu_c - centre``."""
        return self._scaled_means()[:2]

    def export_module(self) -> torch.nn.Module:
        """:meth:`score` in torch ops, for export (:class:`~._export_terms.GaussianScores`: the
        scaled means, their offsets and the centre as buffers)."""
        from ._export_terms import GaussianScores

        return GaussianScores(*self._scaled_means())

    def score(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        """The log-likelihood of each row ``i`` under each candidate ``c = nodes[i, j]``, up to a
        constant of the row, ``(n, k)`` float32; 0 for ``-1``."""
        X = _host_dense(X)
        weights, offsets, centre = self._scaled_means()
        cand = np.maximum(nodes, 0)
        out = np.empty(nodes.shape, dtype=np.float32)
        for start in range(0, X.shape[0], 256):  # (rows, k, features) stays a few MB
            stop = min(X.shape[0], start + 256)
            # float32 rows lose the float32 centre in float32, float64 rows in float64 (module docstring)
            rows = np.subtract(X[start:stop], centre, dtype=np.result_type(X.dtype, np.float32))
            rows = rows.astype(np.float32, copy=False)
            out[start:stop] = np.einsum("rf,rkf->rk", rows, weights[cand[start:stop]])
        out -= offsets[cand]
        out[nodes < 0] = 0.0
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the cached scaled means (rebuilt on first use)."""
        return {key: value for key, value in self.__dict__.items() if key != "_scaled"}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The statistics as plain arrays, for saving without pickle (the parents and depths are
        the model's tree's, restored from it)."""
        return {"kind": np.asarray(self.KIND), "sums": self.sums, "counts": self.counts, "squares": self.squares}

    @classmethod
    def from_arrays(cls, arrays: Any, tree: Any, n_features: int) -> GaussianPrototypes:
        """The inverse of :meth:`to_arrays`, checked against the model it belongs to."""
        missing = {"sums", "counts", "squares"} - set(arrays)
        if missing:
            raise ValueError(f"lacks {', '.join(sorted(missing))}")
        sums, counts, squares = (np.asarray(arrays[name]) for name in ("sums", "counts", "squares"))
        shapes = {"sums": (sums.shape, (tree.n_classes, n_features)), "counts": (counts.shape, (tree.n_classes,)),
                  "squares": (squares.shape, (n_features,))}
        for name, (shape, expected) in shapes.items():
            if shape != expected:
                raise ValueError(f"the saved class prototypes' {name} have shape {shape}, but the model has "
                                 f"{tree.n_classes} classes and {n_features} features: the files are from different models")
        for name, values in (("sums", sums), ("counts", counts), ("squares", squares)):
            if values.dtype.kind != "f" or not np.isfinite(values).all():
                raise ValueError(f"the saved class prototypes' {name} must be finite floats, got dtype {values.dtype}")
        if (counts < 0).any() or (squares < 0).any():
            raise ValueError("the saved class prototypes hold negative counts or squares")
        return cls(sums=sums.astype(np.float64), counts=counts.astype(np.float64), squares=squares.astype(np.float64),
                   parents=np.asarray(tree.parents, dtype=np.int64), depth=np.asarray(tree.depth))


def _host_dense(X: Any) -> np.ndarray:
    """``X`` as a dense host array (a torch tensor, dense or sparse, or a CuPy array, copied)."""
    import scipy.sparse as sp
    import torch

    if sp.issparse(X):
        return X.toarray()
    if isinstance(X, torch.Tensor):
        return (X if X.layout == torch.strided else X.to_dense()).detach().cpu().numpy()
    if hasattr(X, "get") and type(X).__module__.startswith("cupy"):
        return X.get()
    return np.asarray(X)

