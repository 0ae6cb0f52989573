"""The answer model: how a fitted classifier turns the network's paths into its answer.

``_model``: :class:`AnswerModel`, the one fitted attribute (``answer_``) holding the terms,
their weights, the scale of ``log p`` and the calibrator; ``_terms``: the protocol every term
follows (fit on training rows, ``score(X, candidates)``, its arrays for saving and export);
the terms: ``_prototypes`` (the cosine class prototypes of sparse rows, the ``Prototypes``
protocol of both kinds and the likelihood that fits the rules' weight and scale),
``_dense_prototypes`` (the Gaussian kind of dense rows), ``_flat_margins`` (the flat linear
SVM's margins, of three kinds); ``_fit_prototypes``: the rows the prototypes are built from,
their rules' weight chosen on held-out rows, rows added when training continues;
``_calibration``: the answer calibrator (:class:`BetaCalibrator`), the held-out rows it is
fitted on and how they are shown; ``_joint``: the joint fit of the terms' weights and the
scale, a conditional logit over the candidates (:func:`fit_term_weights`); ``_held_out``:
where the learnt weights are set (every weight left at ``"auto"``) and recorded.

Nothing here imports ``prediction`` or ``fitting``: decoding rows and fitting estimator clones
(the cross-fitting) are ``fitting._answer_fit``'s.
"""

from ._calibration import BetaCalibrator
from ._joint import MIN_GAIN, PENALTY, TermWeights, fit_term_weights
from ._model import AnswerModel
from ._terms import TERMS, Term, term_scores

__all__ = ["MIN_GAIN", "PENALTY", "TERMS", "AnswerModel", "BetaCalibrator", "Term", "TermWeights",
           "fit_term_weights", "term_scores"]
