"""The answer model: how a fitted classifier turns the network's paths into its answer.

``_model``: :class:`AnswerModel`, the one fitted attribute (``answer_``) holding the terms,
their weights, the scale of ``log p`` and the calibrator; ``_terms``: the protocol every term
follows (fit on training rows, ``score(X, candidates)``, its arrays for saving and export);
the terms: ``_prototypes`` (the cosine class prototypes of sparse rows, the ``Prototypes``
protocol of both kinds and the likelihood that fits their own weight and scale),
``_dense_prototypes`` (the Gaussian kind of dense rows), ``_flat_margins`` (the flat linear
SVM's margins, of three kinds), ``_path_margins`` (the path-level SVM's margins summed along a
candidate's path); ``_export_terms``: each term's scores as a torch module, for
export (``Term.export_module``); ``_fit_prototypes``: the rows the prototypes are built from,
their start weight (before one is learnt), rows added when training continues;
``_calibration``: the answer calibrator (:class:`BetaCalibrator`), the held-out rows it is
fitted on and how they are shown; ``_joint``: the joint fit of the terms' weights and the
scale, a conditional logit over the candidates (:func:`fit_term_weights`); ``_held_out``:
where the learnt weights are set (every weight left at ``"auto"``) and recorded.

Nothing here imports ``prediction`` or ``fitting``: decoding rows and fitting estimator clones
(the cross-fitting) are ``fitting._answer_fit``'s.
"""

# The face: what other folders of the estimators use (tests/test_layers.py checks that they
# import nothing else from here).
from ._calibration import (CLIP, MIN_AUTO_ROWS, BetaCalibrator, CalibrationPlan, answer_correct, effective_rows,
                           held_out_size, held_out_view, plan_calibration, rejoins)
from ._dense_prototypes import GaussianPrototypes
from ._fit_prototypes import added_prototypes, fitted_prototypes, held_out_prototypes, start_weight, wants_prototypes
from ._flat_margins import NO_TARGET_MARGIN, FlatMargins
from ._held_out import learn_from_candidates, learn_on_held_out, learns_weights, not_learnt
from ._joint import MIN_GAIN, PENALTY, TermWeights, fit_term_weights
from ._model import AnswerModel
from ._path_margins import PathMargins, is_sparse, least_squares_route, level_labels
from ._prototypes import ClassPrototypes, Prototypes, last_nodes, prototypes_kind, rerank_order
from ._terms import PRIOR_TERMS, TERMS, Term, term_from_arrays, term_scores

__all__ = ["CLIP", "MIN_AUTO_ROWS", "MIN_GAIN", "NO_TARGET_MARGIN", "PENALTY", "PRIOR_TERMS", "TERMS", "AnswerModel",
           "BetaCalibrator", "CalibrationPlan", "ClassPrototypes", "FlatMargins", "GaussianPrototypes", "PathMargins",
           "Prototypes",
           "Term", "TermWeights", "added_prototypes", "answer_correct", "effective_rows",
           "fit_term_weights", "fitted_prototypes", "held_out_prototypes", "held_out_size", "held_out_view", "is_sparse",
           "last_nodes", "learn_from_candidates", "learn_on_held_out", "learns_weights", "least_squares_route", "level_labels", "not_learnt",
           "plan_calibration", "prototypes_kind", "rejoins", "rerank_order", "start_weight", "term_from_arrays",
           "term_scores", "wants_prototypes"]
