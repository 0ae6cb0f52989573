"""The re-ranking terms, as the joint fit of their weights reads them.

A term scores candidate answers: given rows ``X`` (as the fit holds them: a scipy sparse
matrix or a NumPy array) and ``nodes``, an ``(n_rows, k)`` array of candidate node ids
(``-1``: no candidate), it returns an ``(n_rows, k)`` float32 array, higher for a likelier
answer, that does not depend on the other candidates. The fitted terms already follow this
protocol under their own method names:

- the class prototypes (``Prototypes.similarity``, :mod:`..prototypes._prototypes`): the cosine
  of the row and the candidate's prototype (sparse rows), or the Gaussian log-likelihood of the
  row under the candidate's mean (dense rows);
- the flat linear term (``FlatMargins.margins``, :mod:`..prototypes._flat_margins`): the
  one-vs-rest margin of the candidate, of whichever SVM was fitted (against every row, of the
  candidates, or least-squares).

:data:`SCORES` names each term's method; :func:`term_scores` scores all of them at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

__all__ = ["SCORES", "TermScorer", "term_scores"]

#: Each re-ranking term (as the estimator names it) and the method that scores ``(X, nodes)``.
SCORES = {"prototypes": "similarity", "flat_term": "margins"}


class TermScorer(Protocol):
    """What the joint fit calls on a term: ``(n_rows, k)`` scores of candidate ``nodes``."""

    def __call__(self, X: Any, nodes: np.ndarray) -> np.ndarray:
        ...


def term_scores(terms: Mapping[str, Any], X: Any, nodes: np.ndarray) -> dict[str, np.ndarray]:
    """Each fitted term's ``(n_rows, k)`` scores of the candidate ``nodes`` of rows ``X``
    (``terms``: name in :data:`SCORES` to the fitted object; ``None`` values skipped).

    Examples
    --------
    >>> from hiclass_parallel.estimators import FlatMargins
    >>> X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> flat = FlatMargins.fit(X, np.array([2, 2, 4, 4]), n_classes=5)
    >>> scores = term_scores({"flat_term": flat, "prototypes": None}, X[:1], np.array([[2, 4]]))
    >>> list(scores), scores["flat_term"].shape, bool(scores["flat_term"][0, 0] > scores["flat_term"][0, 1])
    (['flat_term'], (1, 2), True)
    """
    unknown = set(terms) - set(SCORES)
    if unknown:
        raise ValueError(f"unknown re-ranking terms {sorted(unknown)}; known: {sorted(SCORES)}")
    return {name: np.asarray(getattr(term, SCORES[name])(X, nodes), dtype=np.float32)
            for name, term in terms.items() if term is not None}
