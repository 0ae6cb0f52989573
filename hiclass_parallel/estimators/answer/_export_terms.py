"""Each answer-model term's scores in torch ops, for export (:meth:`~._terms.Term.export_module`).

A term's export module maps ``(X, nodes)`` -- a dense float32 batch ``(batch, n_features)``
and candidate node ids ``(batch, k)`` (``-1``: no candidate) -- to the ``(batch, k)`` scores
the term's own :meth:`~._terms.Term.score` gives, up to float32 rounding. The fitted arrays
are buffers (they move with the module and are constants of an exported graph, never
trained), and every operation is a torch op of shapes fixed by the buffers and the batch: no
Python branch on data, so that ``torch.export`` and the ONNX exporter trace it as it is.

Candidate ids index the buffers; a ``-1`` reads row 0 and is then given the score the term
gives a missing candidate (0 for the prototypes, :data:`~.._defaults.NO_TARGET_MARGIN` for
the flat term) by a ``torch.where``, so a row's other candidates are unaffected.

The generic re-ranker of an exported classifier
(:class:`~hiclass_parallel.estimators.AnswerReranker`) adds these modules' scores, each times
its weight; it knows nothing of their kinds.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from .._defaults import NO_TARGET_MARGIN

__all__ = ["CosineScores", "DenseMarginScores", "GaussianScores", "PathMarginScores", "SparseMarginScores"]


def _buffer(array: np.ndarray, dtype: np.dtype) -> torch.Tensor:
    """A contiguous copy of ``array`` as a tensor of ``dtype`` (never a view of the term's own
    arrays: a buffer moved or changed in place must not change the fitted term)."""
    return torch.from_numpy(np.array(array, dtype=dtype, order="C", copy=True))


def _rows(table: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    """The rows of ``table`` of each candidate (``-1`` reads row 0), ``(batch, k, *table.shape[1:])``."""
    batch, k = nodes.shape
    picked = torch.index_select(table, 0, nodes.clamp(min=0).reshape(-1))
    return picked.reshape((batch, k) + tuple(table.shape[1:]))


class CosineScores(nn.Module):
    """The cosine class prototypes' score (:class:`~._prototypes.ClassPrototypes`): ``x . u_c``,
    ``u_c`` the class's unit prototype over its kept features; 0 for ``-1``.

    Parameters
    ----------
    features : ndarray of int of shape (n_classes, n_kept)
        Each class's kept feature ids (``-1`` pads).
    values : ndarray of float of shape (n_classes, n_kept)
        Their unit values (0 pads).

    Examples
    --------
    >>> import numpy as np, torch
    >>> module = CosineScores(np.array([[0, -1], [1, 2]]), np.array([[1.0, 0.0], [0.6, 0.8]]))
    >>> module(torch.tensor([[1.0, 0.5, 1.0]]), torch.tensor([[1, 0, -1]]))
    tensor([[1.1000, 1.0000, 0.0000]])
    """

    def __init__(self, features: np.ndarray, values: np.ndarray):
        super().__init__()
        self.register_buffer("features", _buffer(features, np.int64))
        self.register_buffer("values", _buffer(values, np.float32))

    def forward(self, X: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """``(batch, k)`` scores of the candidate ``nodes`` of the rows ``X``."""
        batch, k = nodes.shape
        features = _rows(self.features, nodes).reshape(batch, -1)
        found = torch.gather(X, 1, features.clamp(min=0)).reshape(batch, k, -1)  # a pad reads a 0 value
        score = (found * _rows(self.values, nodes)).sum(2)
        return torch.where(nodes >= 0, score, torch.zeros_like(score))


class GaussianScores(nn.Module):
    """The Gaussian class prototypes' score (:class:`~._dense_prototypes.GaussianPrototypes`):
    the log-likelihood up to the row's constant, ``(x - centre) . (m_c / var) - m_c . m_c / (2 var)``,
    ``m_c`` the class mean less the centre; 0 for ``-1``.

    Parameters
    ----------
    scaled : ndarray of float of shape (n_classes, n_features)
        ``m_c / var`` per class.
    offset : ndarray of float of shape (n_classes,)
        ``m_c . m_c / (2 var)`` per class.
    centre : ndarray of float of shape (n_features,)
        What the rows lose first (the mean of the training rows, rounded to float32), as the
        term's score subtracts it.

    Examples
    --------
    >>> import numpy as np, torch
    >>> module = GaussianScores(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0.5, 1.0]), np.array([1.0, 1.0]))
    >>> module(torch.tensor([[2.0, 1.0]]), torch.tensor([[0, 1, -1]]))
    tensor([[ 0.5000, -1.0000,  0.0000]])
    """

    def __init__(self, scaled: np.ndarray, offset: np.ndarray, centre: np.ndarray):
        super().__init__()
        self.register_buffer("scaled", _buffer(scaled, np.float32))
        self.register_buffer("offset", _buffer(offset, np.float32))
        self.register_buffer("centre", _buffer(centre, np.float32))

    def forward(self, X: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """``(batch, k)`` scores of the candidate ``nodes`` of the rows ``X``."""
        score = torch.einsum("bf,bkf->bk", X - self.centre, _rows(self.scaled, nodes)) - _rows(self.offset, nodes)
        return torch.where(nodes >= 0, score, torch.zeros_like(score))


class _MarginScores(nn.Module):
    """What both kinds of flat margins share: the row of ``coef`` of each node id and the
    intercepts; a node that was no training target, and ``-1``, score :data:`NO_TARGET_MARGIN`."""

    def __init__(self, target_rows: np.ndarray, intercept: np.ndarray):
        super().__init__()
        # the row in coef of each node id, shifted by one so that node -1 reads entry 0 (-1: none)
        self.register_buffer("target_row", _buffer(target_rows, np.int64))
        self.register_buffer("intercept", _buffer(intercept, np.float32))

    def candidate_rows(self, nodes: torch.Tensor) -> torch.Tensor:
        """The row of ``coef`` of each candidate, ``(batch, k)`` (``-1``: no training target)."""
        return torch.index_select(self.target_row, 0, (nodes + 1).reshape(-1)).reshape(nodes.shape)

    def finish(self, decision: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``decision`` (the candidates' ``x . coef``) plus their intercepts, and
        :data:`NO_TARGET_MARGIN` where ``rows`` holds no training target."""
        margin = decision + torch.index_select(self.intercept, 0, rows.clamp(min=0).reshape(-1)).reshape(rows.shape)
        return torch.where(rows >= 0, margin, torch.full_like(margin, NO_TARGET_MARGIN))


class DenseMarginScores(_MarginScores):
    """The flat term's margins (:class:`~._flat_margins.FlatMargins`) of dense weights:
    ``x . coef[c] + intercept[c]``; :data:`NO_TARGET_MARGIN` for a node that was no training target
    and for ``-1``.

    Parameters
    ----------
    target_rows : ndarray of int of shape (n_classes + 1,)
        The row of ``coef`` of node ids ``-1, 0, ..., n_classes - 1`` (``-1``: none).
    coef : ndarray of float of shape (n_targets, n_features)
    intercept : ndarray of float of shape (n_targets,)

    Examples
    --------
    >>> import numpy as np, torch
    >>> module = DenseMarginScores(np.array([-1, -1, 0, 1]), np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.0, -1.0]))
    >>> module(torch.tensor([[2.0, 3.0]]), torch.tensor([[1, 2, 0, -1]]))
    tensor([[ 2.,  2., -1., -1.]])
    """

    def __init__(self, target_rows: np.ndarray, coef: np.ndarray, intercept: np.ndarray):
        super().__init__(target_rows, intercept)
        self.register_buffer("coef", _buffer(coef, np.float32))

    def forward(self, X: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """``(batch, k)`` margins of the candidate ``nodes`` of the rows ``X``."""
        rows = self.candidate_rows(nodes)
        return self.finish(torch.einsum("bf,bkf->bk", X, _rows(self.coef, rows)), rows)


class SparseMarginScores(_MarginScores):
    """The flat term's margins of sparse weights (the SVM of the candidates): every target's
    ``x . coef[c]`` summed from the weights' ``(target, feature, value)`` entries by a scatter
    (memory: batch times the weights), then the candidates'; :data:`NO_TARGET_MARGIN` as in
    :class:`DenseMarginScores`.

    Parameters
    ----------
    target_rows : ndarray of int of shape (n_classes + 1,)
        The row of ``coef`` of node ids ``-1, 0, ..., n_classes - 1`` (``-1``: none).
    coef : scipy sparse matrix of shape (n_targets, n_features)
    intercept : ndarray of float of shape (n_targets,)

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, torch
    >>> coef = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0]]))
    >>> module = SparseMarginScores(np.array([-1, -1, 0, 1]), coef, np.array([0.0, -1.0]))
    >>> module(torch.tensor([[2.0, 3.0]]), torch.tensor([[1, 2, 0, -1]]))
    tensor([[ 2.,  2., -1., -1.]])
    """

    def __init__(self, target_rows: np.ndarray, coef: sp.spmatrix, intercept: np.ndarray):
        super().__init__(target_rows, intercept)
        coo = sp.coo_matrix(coef)
        self.register_buffer("entry_target", _buffer(coo.row, np.int64))
        self.register_buffer("entry_feature", _buffer(coo.col, np.int64))
        self.register_buffer("entry_value", _buffer(coo.data, np.float32))

    def forward(self, X: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """``(batch, k)`` margins of the candidate ``nodes`` of the rows ``X``."""
        batch = X.shape[0]
        found = torch.index_select(X, 1, self.entry_feature) * self.entry_value
        decision = torch.zeros(batch, self.intercept.shape[0], dtype=X.dtype, device=X.device)
        decision = decision.scatter_add(1, self.entry_target.expand(batch, -1), found)
        rows = self.candidate_rows(nodes)
        return self.finish(torch.gather(decision, 1, rows.clamp(min=0)), rows)


class PathMarginScores(nn.Module):
    """The path-level term's score (:class:`~._path_margins.PathMargins`): the margins of the
    nodes on each candidate's path (a :class:`DenseMarginScores` of every node), summed; 0 for
    ``-1``.

    Parameters
    ----------
    paths : ndarray of int of shape (n_classes, n_levels)
        The tree's ancestral paths (``-1`` pads).
    margins : DenseMarginScores
        Every node's margin.

    Examples
    --------
    >>> import numpy as np, torch
    >>> margins = DenseMarginScores(np.array([-1, 0, 1]), np.array([[1.0, 0.0], [0.0, 1.0]]), np.zeros(2))
    >>> module = PathMarginScores(np.array([[0, -1], [0, 1]]), margins)  # node 1 is node 0's child
    >>> module(torch.tensor([[2.0, 3.0]]), torch.tensor([[1, 0, -1]]))
    tensor([[5., 2., 0.]])
    """

    def __init__(self, paths: np.ndarray, margins: nn.Module):
        super().__init__()
        self.register_buffer("paths", _buffer(paths, np.int64))
        self.margins = margins

    def forward(self, X: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """``(batch, k)`` scores of the candidate ``nodes`` of the rows ``X``."""
        batch, k = nodes.shape
        paths = _rows(self.paths, nodes)  # (batch, k, L); a -1 candidate read row 0's path
        on_path = torch.where((nodes >= 0).unsqueeze(2), paths, torch.full_like(paths, -1))
        margin = self.margins(X, on_path.reshape(batch, -1)).reshape(on_path.shape)
        return torch.where(on_path >= 0, margin, torch.zeros_like(margin)).sum(2)
