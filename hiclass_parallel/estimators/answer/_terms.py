"""The answer model's terms: the one protocol every re-ranking term follows.

A candidate answer ``c`` of a row ``x`` scores ``log p(c | x) + sum_i w_i * term_i(x, c)``
(:class:`~._model.AnswerModel`). A term is a fitted object that

- was fitted on training rows (its own constructor: ``from_rows``, ``fit``,
  ``fit_on_candidates``);
- scores candidates: :meth:`Term.score` of rows ``X`` (as the fit holds them: a scipy sparse
  matrix or a NumPy array) and ``nodes``, an ``(n_rows, k)`` array of candidate node ids
  (``-1``: no candidate), is an ``(n_rows, k)`` float32 array, higher for a likelier answer,
  that does not depend on the other candidates;
- gives its arrays for saving (:meth:`Term.to_arrays`) and is read back from them, checked
  against the model it belongs to (:meth:`Term.from_arrays`, through :func:`term_from_arrays`);
- gives a torch module for export (:meth:`Term.export_module`): ``module(X, nodes)`` of a
  dense float32 batch ``X`` and candidate ids ``nodes`` (a ``LongTensor``) is :meth:`Term.score`
  in torch ops that ``torch.export`` and the ONNX exporter trace, its fitted arrays as
  buffers (:mod:`._export_terms`); an exported classifier's re-ranker adds these modules'
  scores, each times its weight, and knows nothing of the kinds.

The terms (:data:`TERMS`): ``"prototypes"``, the class prototypes
(:class:`~._prototypes.ClassPrototypes`: the cosine of the row and the candidate's prototype,
sparse rows; :class:`~._dense_prototypes.GaussianPrototypes`: the Gaussian log-likelihood of
the row under the candidate's mean, dense rows), ``"flat_term"``, the flat linear term
(:class:`~._flat_margins.FlatMargins`: the one-vs-rest margin of the candidate, of whichever
SVM was fitted: against every row, of the candidates, or least-squares), and ``"path_term"``,
the path-level linear term (:class:`~._path_margins.PathMargins`: every node's one-vs-rest
margin, summed along the candidate's path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ._flat_margins import FlatMargins
from ._path_margins import PathMargins
from ._prototypes import prototypes_from_arrays

if TYPE_CHECKING:
    import torch

__all__ = ["PRIOR_TERMS", "TERMS", "Term", "term_from_arrays", "term_scores"]

#: Every term's name, as the estimator's parameter and the answer model name it, in the order
#: the re-ranked score adds them.
TERMS = ("prototypes", "flat_term", "path_term")

#: The terms other than the prototypes: decoding adds their weighted scores to ``log p`` as one
#: prior, before the prototypes' similarity, which the prototypes' own weight fit reads apart.
PRIOR_TERMS = tuple(name for name in TERMS if name != "prototypes")


@runtime_checkable
class Term(Protocol):
    """What the answer model asks of a fitted term."""

    def score(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        """``(n_rows, k)`` float32 scores of the candidate ``nodes`` of rows ``X``; higher:
        likelier."""
        ...

    def export_module(self) -> torch.nn.Module:
        """:meth:`score` as a torch module for export: ``forward(X, nodes)``, ``X`` a dense
        float32 tensor ``(batch, n_features)`` and ``nodes`` a ``LongTensor`` ``(batch, k)``
        (``-1``: no candidate), gives ``(batch, k)`` float32 scores equal to :meth:`score`'s up
        to float32 rounding, in torch ops without a Python branch on data (``torch.export``
        and ONNX trace it); the fitted arrays are buffers, not parameters."""
        ...

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The fitted term as plain arrays, for saving without pickle."""
        ...

    @classmethod
    def from_arrays(cls, arrays: Any, tree: Any, n_features: int) -> Term:
        """The inverse of :meth:`to_arrays`, checked against the model's ``tree`` and feature
        count (a ``ValueError`` naming what does not fit)."""
        ...


def term_from_arrays(name: str, arrays: Any, tree: Any, n_features: int) -> Term:
    """The saved term ``name`` (one of :data:`TERMS`) from its arrays, checked (a
    ``ValueError`` naming what does not fit)."""
    if name == "prototypes":  # of the kind its arrays name
        return prototypes_from_arrays(arrays, tree, n_features)
    if name == "flat_term":
        return FlatMargins.from_arrays(arrays, tree, n_features)
    if name == "path_term":
        return PathMargins.from_arrays(arrays, tree, n_features)
    raise ValueError(f"unknown term {name!r}; known: {list(TERMS)}")


def term_scores(terms: Mapping[str, Any], X: Any, nodes: np.ndarray) -> dict[str, np.ndarray]:
    """Each fitted term's ``(n_rows, k)`` scores of the candidate ``nodes`` of rows ``X``
    (``terms``: name in :data:`TERMS` to the fitted term; ``None`` values skipped).

    Examples
    --------
    >>> from hiclass_parallel.estimators import FlatMargins
    >>> X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> flat = FlatMargins.fit(X, np.array([2, 2, 4, 4]), n_classes=5)
    >>> scores = term_scores({"flat_term": flat, "prototypes": None}, X[:1], np.array([[2, 4]]))
    >>> list(scores), scores["flat_term"].shape, bool(scores["flat_term"][0, 0] > scores["flat_term"][0, 1])
    (['flat_term'], (1, 2), True)
    """
    unknown = set(terms) - set(TERMS)
    if unknown:
        raise ValueError(f"unknown re-ranking terms {sorted(unknown)}; known: {list(TERMS)}")
    return {name: np.asarray(term.score(X, nodes), dtype=np.float32) for name, term in terms.items()
            if term is not None}
