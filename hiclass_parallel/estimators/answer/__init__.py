"""The answer model's weights: how much the re-ranking trusts each of its terms.

``_joint``: the joint fit of the terms' weights and the scale of ``log p``, a conditional logit
over each held-out row's candidates (:func:`fit_term_weights`, :class:`TermWeights`);
``_terms``: the protocol a term follows to be scored on ``(X, candidates)``;
``_held_out``: the rows they are learnt on (the calibration share, or cross-fitting) and where
the learnt weights are set (``term_weights="learnt"``).
"""

from ._joint import MIN_GAIN, PENALTY, TermWeights, fit_term_weights
from ._terms import SCORES, term_scores

__all__ = ["MIN_GAIN", "PENALTY", "SCORES", "TermWeights", "fit_term_weights", "term_scores"]
