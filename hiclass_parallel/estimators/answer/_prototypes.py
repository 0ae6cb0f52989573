"""Class prototypes: each class's own evidence over the input features, to re-rank the answer.

The text model reaches every class through one hidden layer of a few hundred units (a low-rank
map from the features to the classes), so it finds the right branch well and the exact class
less well than a flat model with a weight vector per class (``docs/prototypes.md``). A
prototype gives each class a full-rank vector at no training cost: the sum of its training
rows, compared by cosine (the Rocchio classifier). Decoding takes the model's
``prototype_candidates`` most probable answers and picks the one with the highest

    log p(answer) + weight * cos(x, prototype of the answer)

``weight`` is in nats. With ``prototypes="auto"`` it is fitted on the rows the fit holds out
for calibration (:func:`choose_weight`: the likelihood of the right candidate; 0 where
prototypes do not help), or is :data:`DEFAULT_WEIGHT` when the fit holds no rows out.
Memory: one sparse matrix with at most as many non-zeros as the training rows (every row adds
to one class's sum), and :data:`FEATURES` entries per class for scoring.

Dense rows (embeddings, numeric features) get the same re-ranking with another kind of
prototype, :class:`~._dense_prototypes.GaussianPrototypes` (each class's mean, compared by a
Gaussian log-likelihood); :func:`prototypes_kind` picks the kind from the training rows. What
the estimator asks of either kind is written down once, as the protocol :class:`Prototypes`.

Only the answer changes: ``predict_proba``, ``predict_answer_proba`` and the log-probabilities
are the model's own, and the probability of the chosen answer (``predict_confidence``) is the
model's probability of that path, mapped by a calibrator fitted on the re-ranked answers.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from .._defaults import PROTOTYPE_FEATURES as FEATURES
from .._defaults import PROTOTYPES_MAX_WEIGHT as MAX_WEIGHT
from .._defaults import PROTOTYPES_MIN_ROWS as MIN_ROWS
from .._defaults import PROTOTYPES_START_WEIGHT as DEFAULT_WEIGHT
from ._calibration import effective_rows
from ._dense_prototypes import GaussianPrototypes

if TYPE_CHECKING:
    import torch

__all__ = ["ClassPrototypes", "DEFAULT_WEIGHT", "MAX_WEIGHT", "Prototypes", "choose_weight", "choose_weight_and_scale",
           "last_nodes", "prototypes_from_arrays", "prototypes_kind", "rerank_order"]


@runtime_checkable
class Prototypes(Protocol):
    """What the estimator asks of its class prototypes (the ``"prototypes"`` term of ``answer_``),
    of either kind: the answer model's term protocol (:class:`~._terms.Term`) and more.

    A kind holds per-class statistics of the training rows; the weight of its similarity in
    the re-ranked score ``log p(answer) + weight * similarity`` is the answer model's
    (:class:`~._model.AnswerModel`), not the kind's. Two kinds implement
    it: :class:`ClassPrototypes` (sparse rows, cosine) and
    :class:`~._dense_prototypes.GaussianPrototypes` (dense rows, Gaussian log-likelihood);
    :func:`prototypes_kind` picks one for the training rows, :func:`prototypes_from_arrays`
    reads a saved one. Beyond this protocol, the cosine kind takes each class's text as one
    more row (``add_sums``) and the Gaussian kind has the centre its export subtracts
    (``centre``).
    """

    #: The kind's name in a saved model's ``prototypes.npz``.
    KIND: ClassVar[str]
    #: The largest weight ``prototypes="auto"`` fits.
    MAX_WEIGHT: ClassVar[float]
    #: The weight ``prototypes="auto"`` takes without held-out rows to fit it on.
    DEFAULT_WEIGHT: ClassVar[float]

    @classmethod
    def from_rows(cls, X: Any, ids: np.ndarray, tree: Any, sample_weight: np.ndarray | None = None) -> Prototypes:
        """The statistics of the rows of ``X`` per node id in ``ids`` (``-1``: unlabelled,
        skipped) of ``tree``'s classes, each row counted ``sample_weight`` times (``None``: once)."""
        ...

    def add(self, other: Prototypes) -> None:
        """Add the statistics of more training rows (of the same kind and classes)."""
        ...

    def sum_over_ranks(self, group: Any) -> None:
        """Data-parallel training: every rank's statistics added up, alike on every rank."""
        ...

    def score(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        """``(n, k)`` float32: the similarity of each row ``i`` to each candidate class
        ``nodes[i, j]``; 0 for ``-1``."""
        ...

    def export_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The two per-class arrays :meth:`score` is computed from, in float32 (what
        :meth:`export_module` holds as buffers; a saved model's are checked finite)."""
        ...

    def export_module(self) -> torch.nn.Module:
        """:meth:`score` in torch ops, for export (:meth:`~._terms.Term.export_module`)."""
        ...

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The statistics as plain arrays, with the kind's name under ``"kind"``, for saving
        without pickle."""
        ...

    @classmethod
    def from_arrays(cls, arrays: Any, tree: Any, n_features: int) -> Prototypes:
        """The inverse of :meth:`to_arrays`, checked against the model it belongs to
        (a ``ValueError`` naming what does not fit)."""
        ...


@dataclasses.dataclass
class ClassPrototypes:
    """Per-class sums of training rows (``sums``, sparse ``(n_classes, n_features)``), scored
    by the cosine of a row and a class's unit prototype."""

    sums: sp.csr_matrix

    #: The kind's name in a saved model's ``prototypes.npz``.
    KIND: ClassVar[str] = "cosine"
    MAX_WEIGHT: ClassVar[float] = MAX_WEIGHT
    DEFAULT_WEIGHT: ClassVar[float] = DEFAULT_WEIGHT

    @classmethod
    def from_rows(cls, X: Any, ids: np.ndarray, tree: Any, sample_weight: np.ndarray | None = None) -> ClassPrototypes:
        """The sums of the rows of sparse ``X`` per node id in ``ids`` (``-1``: unlabelled,
        skipped) of ``tree``'s classes, each row times its ``sample_weight`` (``None``: 1)."""
        ids = np.asarray(ids)
        n_classes = tree.n_classes
        rows = np.flatnonzero(ids >= 0)
        times = np.ones(rows.size, dtype=np.float32) if sample_weight is None else \
            np.asarray(sample_weight, dtype=np.float32)[rows]
        member = sp.csr_matrix((times, (ids[rows], rows)), shape=(n_classes, X.shape[0]))
        return cls(sums=sp.csr_matrix(member @ sp.csr_matrix(X, dtype=np.float32), dtype=np.float32))

    def add(self, other: ClassPrototypes) -> None:
        """Add another set of rows' sums (more training rows, of the same classes)."""
        self.add_sums(other.sums)

    def add_sums(self, sums: Any) -> None:
        """Add ``(n_classes, n_features)`` sums: other rows', or one row of class text per class."""
        self.sums = sp.csr_matrix(self.sums + sp.csr_matrix(sums, dtype=np.float32), dtype=np.float32)
        self.__dict__.pop("_unit", None)  # the cached unit prototypes were of the old sums

    def sum_over_ranks(self, group: Any) -> None:
        """Data-parallel training: every rank's sums added up (in rank order, so alike on
        every rank), as one process would have them from all the shards."""
        import torch.distributed as dist

        parts: list[Any] = [None] * dist.get_world_size(group)
        mine = self.sums
        dist.all_gather_object(parts, (mine.data, mine.indices, mine.indptr), group=group)
        total = sp.csr_matrix(mine.shape, dtype=np.float32)
        for data, indices, indptr in parts:
            total = total + sp.csr_matrix((data, indices, indptr), shape=mine.shape)
        self.sums = sp.csr_matrix(total, dtype=np.float32)
        self.__dict__.pop("_unit", None)

    def _unit_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Each class's :data:`FEATURES` largest sums scaled to unit L2 norm, as dense
        ``(n_classes, FEATURES)`` feature ids (``-1`` pads) and values (0 pads), cached."""
        unit = self.__dict__.get("_unit")
        if unit is None:
            sums = self.sums
            sums.sort_indices()  # equal sums then keep feature-id order (the sort is stable)
            lengths = np.diff(sums.indptr)
            row = np.repeat(np.arange(sums.shape[0]), lengths)
            order = np.argsort(_class_then_descending(row, sums.data), kind="stable")
            rank = np.arange(order.size) - np.repeat(sums.indptr[:-1], lengths)
            keep = order[rank < FEATURES]
            features = np.full((sums.shape[0], FEATURES), -1, dtype=np.int64)
            values = np.zeros((sums.shape[0], FEATURES), dtype=np.float32)
            features[row[keep], rank[rank < FEATURES]] = sums.indices[keep]
            values[row[keep], rank[rank < FEATURES]] = sums.data[keep]
            norm = np.sqrt(np.square(values, dtype=np.float64).sum(axis=1, keepdims=True))
            values = np.divide(values, norm, out=np.zeros_like(values), where=norm > 0)
            unit = self.__dict__["_unit"] = (features, values.astype(np.float32))
        return unit

    def export_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """What :meth:`score` is computed from: each class's kept feature ids (``-1`` pads) and
        unit values."""
        return self._unit_rows()

    def export_module(self) -> torch.nn.Module:
        """:meth:`score` in torch ops, for export (:class:`~._export_terms.CosineScores`: the
        kept feature ids and unit values as buffers; rows taken dense)."""
        from ._export_terms import CosineScores

        return CosineScores(*self._unit_rows())

    def score(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        """``x_i . u_c`` for each row ``i`` and candidate ``c = nodes[i, j]``, ``(n, k)`` float32,
        where ``u_c`` is the class's unit prototype: the cosine for unit-norm rows (as a
        vectorizer gives them); 0 for ``-1`` and classes without rows."""
        X = sp.csr_matrix(X, dtype=np.float32)
        if not X.has_canonical_format:  # duplicates would overwrite each other below; the caller's X stays as it is
            X = X.copy()
            X.sum_duplicates()
        n, k = nodes.shape
        features, values = self._unit_rows()
        # A chunk of rows is made dense over the features it holds (local column ids); the
        # candidates' prototype features are looked up there, and a feature the chunk lacks
        # reads the zero column at the end.
        local = np.full(X.shape[1] + 1, -1, dtype=np.int64)  # the extra -1 is the pad's (-1) entry
        out = np.zeros((n, k), dtype=np.float32)
        for start in range(0, n, 256):
            stop = min(n, start + 256)
            rows = X[start:stop]
            held = np.unique(rows.indices)
            local[held] = np.arange(held.size)
            dense = np.zeros((stop - start, held.size + 1), dtype=np.float32)
            dense[np.repeat(np.arange(stop - start), np.diff(rows.indptr)), local[rows.indices]] = rows.data
            cand = np.maximum(nodes[start:stop], 0)
            column = local[features[cand]]  # (rows, k, FEATURES)
            column[column < 0] = held.size
            found = dense[np.arange(stop - start)[:, None, None], column]
            out[start:stop] = np.einsum("rkf,rkf->rk", found, values[cand])
            local[held] = -1
        out[nodes < 0] = 0.0
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the cached unit prototypes (rebuilt on first use)."""
        return {key: value for key, value in self.__dict__.items() if key != "_unit"}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The sums as plain arrays (CSR parts), for saving without pickle."""
        return {"kind": np.asarray(self.KIND), "data": self.sums.data, "indices": self.sums.indices,
                "indptr": self.sums.indptr, "shape": np.asarray(self.sums.shape, dtype=np.int64)}

    @classmethod
    def from_arrays(cls, arrays: Any, tree: Any, n_features: int) -> ClassPrototypes:
        """The inverse of :meth:`to_arrays`, checked against the model it belongs to."""
        missing = {"data", "indices", "indptr", "shape"} - set(arrays)
        if missing:
            raise ValueError(f"lacks {', '.join(sorted(missing))}")
        n_classes = tree.n_classes
        saved_shape = np.asarray(arrays["shape"])
        if saved_shape.shape != (2,) or saved_shape.dtype.kind not in "iu":
            raise ValueError(f"the saved class prototypes' shape must be two integers, got {saved_shape!r}")
        shape = tuple(int(v) for v in saved_shape)
        if shape != (n_classes, n_features):
            raise ValueError(f"the saved class prototypes have shape {shape}, but the model has {n_classes} classes "
                             f"and {n_features} features: the files are from different models")
        data, indices, indptr = (np.asarray(arrays[name]) for name in ("data", "indices", "indptr"))
        if data.ndim != 1 or data.dtype.kind != "f" or indices.ndim != 1 or indices.dtype.kind not in "iu" \
                or indptr.ndim != 1 or indptr.dtype.kind not in "iu":
            raise ValueError(
                "the saved class prototypes' data must be a 1-D float array and their indices and indptr 1-D "
                f"integer arrays, got {data.dtype} {data.shape}, {indices.dtype} {indices.shape}, "
                f"{indptr.dtype} {indptr.shape}")
        # Kept as float32: a value beyond float32's range would become an infinity.
        if not (np.isfinite(data).all() and (np.abs(data) <= np.finfo(np.float32).max).all()):
            raise ValueError("the saved class prototypes hold values that are not finite in float32")
        try:
            sums = sp.csr_matrix((data, indices, indptr), shape=shape)
            sums.check_format(full_check=True)
        except (ValueError, TypeError, IndexError) as exc:
            raise ValueError(f"the saved class prototypes are not a valid sparse matrix: {exc}") from None
        return cls(sums=sp.csr_matrix(sums, dtype=np.float32))


def prototypes_kind(X: Any) -> type[Prototypes]:
    """The prototypes of rows like ``X``: :class:`ClassPrototypes` (cosine) for sparse rows,
    :class:`~._dense_prototypes.GaussianPrototypes` (log-likelihood) for dense ones."""
    return ClassPrototypes if sp.issparse(X) else GaussianPrototypes


def prototypes_from_arrays(arrays: Any, tree: Any, n_features: int) -> Prototypes:
    """A saved model's prototypes, of the kind its arrays name (an allow-list), checked by the
    kind (dtypes, shapes against ``tree`` and ``n_features``, finite values) and then as a
    whole: the per-class arrays they are scored with must be finite in float32 (statistics that
    are finite but huge, such as sums of 1e300, overflow there and would score every row NaN)."""
    kinds = {kind.KIND: kind for kind in (ClassPrototypes, GaussianPrototypes)}
    if "kind" not in arrays:
        raise ValueError(f"lacks kind (the kind of class prototypes, one of {sorted(kinds)})")
    kind = np.asarray(arrays["kind"])
    if kind.shape != () or kind.dtype.kind != "U":
        raise ValueError(f"its kind must be one name, got an array of {kind.dtype} of shape {kind.shape}")
    name = str(kind)
    if name not in kinds:
        raise ValueError(f"names an unknown kind of class prototypes {name!r}; known: {sorted(kinds)}")
    prototypes = kinds[name].from_arrays(arrays, tree, n_features)
    with np.errstate(all="ignore"):  # on a copy: the check leaves no cache behind
        scored_with = copy.copy(prototypes).export_arrays()
    if not all(np.isfinite(part).all() for part in scored_with):
        raise ValueError(f"the saved {name} class prototypes' statistics overflow: the per-class arrays they are "
                         "scored with are not finite in float32 (the file was not saved from a working model)")
    return prototypes


def _class_then_descending(row: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One uint64 sort key per entry: its class (``row``) in the high 32 bits, then its value,
    largest first, through the order-preserving map of float32 bits to unsigned integers (one
    integer sort instead of a lexsort, several times faster on millions of entries)."""
    bits = values.astype(np.float32).view(np.uint32)
    ascending = np.where(bits & np.uint32(0x80000000), ~bits, bits | np.uint32(0x80000000)).astype(np.uint64)
    return (row.astype(np.uint64) << np.uint64(32)) | (np.uint64(0xFFFFFFFF) - ascending)


def last_nodes(paths: np.ndarray) -> np.ndarray:
    """The answer (last node id) of each of ``(n, k, L)`` paths padded with ``-1``; ``-1``
    for an empty path."""
    length = (paths >= 0).sum(axis=2)
    last = np.take_along_axis(paths, np.maximum(length - 1, 0)[..., None], axis=2)[..., 0]
    last[length == 0] = -1
    return last


def rerank_order(log_prob: np.ndarray, similarity: np.ndarray, weight: float) -> np.ndarray:
    """Each row's candidates (columns) ordered by ``log_prob + weight * similarity``, best first.

    A candidate whose log-probability is not finite (no such path) goes last; a row with NaN
    (undecidable scores) keeps the model's order. Ties keep the model's order (stable sort).
    """
    score = np.where(np.isfinite(log_prob), log_prob + np.float32(weight) * similarity, -np.inf)
    order = np.argsort(-score, axis=1, kind="stable")
    undecidable = np.isnan(log_prob).any(axis=1)
    order[undecidable] = np.arange(log_prob.shape[1])
    return order


def choose_weight(log_prob: np.ndarray, similarity: np.ndarray, correct: np.ndarray,
                  max_weight: float = MAX_WEIGHT, default_weight: float = DEFAULT_WEIGHT) -> float:
    """The prototypes' weight fitted on labelled rows: a conditional logit over each row's
    candidates, ``softmax(a * log_prob + b * similarity)``, fitted by maximum likelihood of the
    right candidate (``correct``: ``(n, k)`` bool), and the weight ``b / a`` it implies (the
    same ranking as ``a * log_prob + b * similarity``), within ``[0, max_weight]``.

    The likelihood uses every row whose right answer is a candidate, so it is steadier than
    counting right first answers on a few hundred rows (which picked weights from 4 to 48 on
    400-row samples of one benchmark where the likelihood's stayed within 17-23). Rows whose
    right answer is not a candidate say nothing about the weight; with fewer than
    :data:`MIN_ROWS` others the weight is ``default_weight``. The bounds are the prototypes
    kind's (``MAX_WEIGHT``, ``DEFAULT_WEIGHT``; the cosine's by default).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> lp = np.log(rng.dirichlet(np.ones(5), size=400)).astype(np.float32)
    >>> sim = rng.random((400, 5)).astype(np.float32)
    >>> right = np.argmax(lp + 3.0 * sim + rng.gumbel(size=(400, 5)), axis=1)   # true weight 3
    >>> correct = np.arange(5) == right[:, None]
    >>> 2.0 < choose_weight(lp, sim, correct) < 4.5
    True
    """
    return choose_weight_and_scale(log_prob, similarity, correct, max_weight, default_weight)[0]


def choose_weight_and_scale(log_prob: np.ndarray, similarity: np.ndarray, correct: np.ndarray,
                            max_weight: float = MAX_WEIGHT, default_weight: float = DEFAULT_WEIGHT,
                            sample_weight: np.ndarray | None = None) -> tuple[float, float]:
    """:func:`choose_weight`'s weight ``b / a`` and the scale ``a`` of the same fit: the
    conditional logit's distribution over the candidates is ``softmax(a * (log_prob + weight *
    similarity))``, which ``decoding="hf1"`` weighs the candidates by. ``(default_weight, 1)``
    with fewer than :data:`MIN_ROWS` usable rows. Where the weight is clipped to
    ``max_weight``, ``a`` is still the fit's. ``sample_weight`` (one per row; ``None``: 1)
    weighs each row's likelihood, and the minimum counts what the usable rows' weights are
    worth (:func:`~._calibration.effective_rows`): a zero-weight row is not a
    usable one, and one heavy row among light ones is about one row."""
    from scipy.optimize import minimize
    from scipy.special import logsumexp, softmax

    valid = np.isfinite(log_prob)
    rows = (correct & valid).any(axis=1)

    if sample_weight is not None:
        rows &= np.asarray(sample_weight) > 0
    usable = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]
    if effective_rows(usable, int(rows.sum())) < MIN_ROWS:
        return float(default_weight), 1.0
    lp = np.where(valid, log_prob, 0.0)[rows].astype(np.float64)
    sim = similarity[rows].astype(np.float64)
    right = (correct & valid)[rows]
    right = right & (np.cumsum(right, axis=1) == 1)  # one right candidate per row
    invalid = ~valid[rows]
    w = np.ones(lp.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]

    def nll(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = theta[0] * lp + theta[1] * sim
        z[invalid] = -np.inf
        p = softmax(z, axis=1)
        value = -(w * (z[right] - logsumexp(z, axis=1))).sum()
        grad = -np.array([(w * (lp[right] - (p * lp).sum(axis=1))).sum(),
                          (w * (sim[right] - (p * sim).sum(axis=1))).sum()])
        return float(value), grad

    fit = minimize(nll, np.array([1.0, 1.0]), jac=True, method="L-BFGS-B", bounds=[(1e-3, None), (0.0, None)])
    return float(np.clip(fit.x[1] / fit.x[0], 0.0, max_weight)), float(fit.x[0])
