"""The fit of the answer model (``answer_``): its terms, their weights, the scale and the calibrator.

The fit pipeline (:mod:`._fit`) trains the network and calls, in order:

1. :func:`fit_linear_terms`: the linear terms' SVMs (the flat term, the path-level term), of
   the rows the network has trained on so far (the calibration share's rows unlabelled), where
   the configuration keeps them;
2. :func:`fit_on_held_out`, where the fit holds a calibration share out: the rows are decoded
   by the network as trained without them (the dispatcher ``predict`` runs), every ``"auto"``
   weight learnt jointly on them, and the calibrator fitted on the answers ``predict`` will give;
3. :func:`fitted_answer`, at the end: the answer model of the prototypes of every training
   row, the linear terms and the weights, scale and calibrator of step 2;
4. where no rows were held out and a weight is left at ``"auto"``, :func:`learn_by_cross_fitting`:
   the weights learnt on the candidates of :data:`FOLDS` fold models, each scoring the rows
   it did not train on (where that cannot run, the terms left at ``"auto"`` are not built).

When training continues, :func:`drop_stale` drops what the new weights or rows make stale.
What is learnt and how is :mod:`..answer` (the pure parts: the terms, the joint fit, the
calibrator's map); this module is where they meet the network, decoding and estimator clones.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils import _safe_indexing, check_random_state

from ...exceptions import caller_stacklevel
from ..answer import (TERMS, AnswerModel, BetaCalibrator, FlatMargins, PathMargins, answer_correct, fitted_prototypes,
                      held_out_prototypes, held_out_view, last_nodes, learn_from_candidates, learn_on_held_out,
                      learns_weights, not_learnt, start_weight, term_scores)
from ..prediction import decode, decoder_of

from .._defaults import CROSS_FIT_MAX_ROWS, FOLDS

__all__ = ["CROSS_FIT_MAX_ROWS", "FOLDS", "cross_fitted_candidates", "drop_stale", "fit_linear_terms",
           "fit_on_held_out", "fitted_answer", "fold_batch_size", "learn_by_cross_fitting"]


@dataclasses.dataclass
class HeldOut:
    """What the calibration share decided: the terms' weights and the scale (the answer model
    of the held-out fit, whose prototypes are of the fit rows only) and the calibrator."""

    answer: AnswerModel
    calibrator: BetaCalibrator


def fit_linear_terms(estimator: Any, net: Any, targets: Any, config: Any, X: Any, ids: np.ndarray | None,
                     weights: np.ndarray | None, plan: Any, on_candidates: bool, seed: int,
                     path_solver: str = "auto") -> dict[str, Any]:
    """The linear terms the configuration keeps (``config.flat_term``, ``config.path_term``
    above 0), name to fitted term, of the rows ``X`` (node ids ``ids``, weights ``weights``) the
    network has trained on so far: every row without calibration, the calibration ``plan``'s
    held-out rows counting as unlabelled. Predict keeps these models, which lack only the
    held-out rows (a few percent), so the calibrator sees the very terms predict adds; each is
    fitted once, not twice.

    ``on_candidates``: the flat term is the SVM of the candidates, each target trained against
    the rows whose ``prototype_candidates`` most probable answers of the network as trained
    so far hold it (the answers the re-ranking will compare); else the SVM against every row.
    The path-level term (:class:`~..answer.PathMargins`) is solved by ``path_solver`` (the
    configuration's cheaper route: one least-squares system, or one SVM a level)."""
    if not (config.flat_term or config.path_term):
        return {}
    fit_ids = ids
    if plan is not None:
        fit_ids = ids.copy()
        fit_ids[plan.held_rows] = -1
    if weights is not None:  # a row of weight 0 is no row: a target only such rows name is none
        fit_ids = np.where(weights > 0, fit_ids, -1)
    terms = {}
    if config.flat_term and not on_candidates:
        terms["flat_term"] = FlatMargins.fit(X, fit_ids, targets.tree.n_classes, weights, random_state=seed)
    elif config.flat_term:
        decoder = decoder_of(estimator, net, targets, config, AnswerModel(), rows=_checked)
        # (its inference loader draws from a throwaway generator: the fit's stream stays as it is)
        paths, _, _ = decoder.model_paths(X, min(decoder.prototype_candidates, decoder.n_candidates))
        terms["flat_term"] = FlatMargins.fit_on_candidates(X, fit_ids, last_nodes(paths), targets.tree.n_classes,
                                                           weights, random_state=seed)
    if config.path_term:
        terms["path_term"] = PathMargins.fit(X, fit_ids, targets.tree, weights, random_state=seed, solver=path_solver)
    return terms


def fit_on_held_out(estimator: Any, net: Any, targets: Any, config: Any, X: Any, ids: np.ndarray, plan: Any,
                    sample_weight: np.ndarray | None = None,
                    linear: dict[str, Any] | None = None) -> tuple[HeldOut, Any]:
    """The weights, scale and calibrator chosen on the calibration ``plan``'s held-out rows of
    ``X`` (``ids``: every row's node id; each row counted with its ``sample_weight``), decoded
    by the net as trained so far, and the configuration (with the learnt weights' record).

    The prototypes are those of the rows the net trained on so far, their weight and scale
    chosen on the held-out rows for ``prototypes="auto"`` (beside the ``linear`` terms' scores
    at their start weights, fitted on the same rows: :func:`fit_linear_terms`), then every ``"auto"`` weight learnt jointly
    (:func:`~..answer._held_out.learn_on_held_out`). The calibrator
    is fitted on the answers re-ranked with those weights: the answers ``predict`` will give.

    The rows are decoded by a :class:`~..prediction._decode.Decoder` of ``net`` (the
    dispatcher :func:`~..prediction._decode.decode` that ``predict`` runs); the estimator is
    not touched (it is marked fitted once, at the end of the fit)."""
    ids = np.asarray(ids)
    true = ids[plan.held_rows]
    held_weight = None if sample_weight is None else sample_weight[plan.held_rows]
    view = held_out_view(X, plan.fit_rows, plan.held_rows)
    linear = linear or {}
    linear_only = AnswerModel(dict(linear), {name: float(getattr(config, name)) for name in linear})

    def decoder_with(answer: AnswerModel) -> Any:
        return decoder_of(estimator, net, targets, config, answer, rows=_checked)

    def with_prototypes(prototypes: Any, weight: float = 0.0, scale: float = 1.0) -> AnswerModel:
        if prototypes is None:
            return linear_only
        return linear_only.replace(terms={"prototypes": prototypes, **linear_only.terms},
                                   weights={"prototypes": weight, **linear_only.weights}, scale=scale)

    # The prototypes of the rows the model trained on so far (their weight and scale chosen
    # on the held-out rows, beside the linear terms' scores), and those rows' candidates
    # decoded with them (the loaders draw from throwaway generators: the fit's stream stays).
    prototypes, (weight, scale), candidates = held_out_prototypes(
        estimator, targets, X, ids, plan, lambda p: decoder_with(with_prototypes(p)).candidates(view), sample_weight,
        prior=lambda paths: decoder_with(linear_only).prior(view, paths))
    answer = with_prototypes(prototypes, weight, scale)
    if learns_weights(estimator):  # every "auto" weight at once, on these rows
        config, answer = learn_on_held_out(estimator, config, answer,
                                           candidates or decoder_with(answer).candidates(view), view, true, held_weight)
    decoder = decoder_with(answer)
    if decoder.weight is None:
        candidates = None  # no re-ranking by the prototypes: the candidates are decoded again
    paths, log_prob, _ = decode(decoder, view, candidates=candidates)  # the answers predict will give
    labelled = true >= 0
    correct = answer_correct(paths[labelled], true[labelled], estimator.semantics)
    calibrator = BetaCalibrator.fit(np.exp(log_prob[labelled].astype(np.float64)), correct,
                                    sample_weight=None if held_weight is None else held_weight[labelled])
    return HeldOut(answer=answer, calibrator=calibrator), config


def fitted_answer(estimator: Any, targets: Any, config: Any, X: Any, dataset: Any, sample_weight: np.ndarray | None,
                  linear: dict[str, Any], held_out: HeldOut | None) -> AnswerModel:
    """The fitted answer model: the prototypes of every training row ``X`` (node ids the ``y``
    of ``dataset``; ``None``: streamed, none), the ``linear`` terms (:func:`fit_linear_terms`),
    and the weights, scale and calibrator the calibration share chose (``held_out``; ``None``:
    the start weights (or the numbers given), no calibrator)."""
    prototypes = fitted_prototypes(estimator, targets, X, dataset, sample_weight)
    terms, weights = {}, {}
    if prototypes is not None:
        terms["prototypes"] = prototypes
        weights["prototypes"] = start_weight(estimator, X) if held_out is None else held_out.answer.weight("prototypes")
    for name, term in linear.items():
        if held_out is None or held_out.answer.term(name) is not None:
            terms[name] = term  # (a weight learnt on the calibration share as 0 dropped it there)
            weights[name] = float(getattr(config, name)) if held_out is None else held_out.answer.weight(name)
    if held_out is None:
        return AnswerModel(terms, weights)
    return AnswerModel(terms, weights, scale=held_out.answer.scale, calibrator=held_out.calibrator)


def learn_by_cross_fitting(estimator: Any, X: Any, y: Any, ids: np.ndarray, sample_weight: np.ndarray | None,
                           targets: Any, config: Any, answer: AnswerModel, seed: int | None,
                           partial: bool = False) -> tuple[Any, AnswerModel]:
    """``(config, answer)`` with the weights learnt by cross-fitting (:data:`FOLDS` folds) on
    the rows ``X`` labelled ``y`` (node ids ``ids``) of a fit that held none out (the folds
    drawn over the rows of positive ``sample_weight`` only: a row of weight 0 is none); a linear
    term of weight 0 dropped. As they were, with the reason in ``config_.term_weights_reason``, where
    cross-fitting does not apply (``partial``: the first call of ``partial_fit``, which trains
    one call's rows for one epoch)."""
    if not learns_weights(estimator):
        return config, answer
    refusal = "partial_fit trains one call's rows (fit learns them)" if partial else \
        _cross_fit_refusal(estimator, X, answer, sample_weight)
    if refusal is not None:
        return not_learnt(estimator, config, answer, refusal)
    if not hasattr(y, "__getitem__"):  # an array-like that only converts (``__array__``): index its array
        y = np.asarray(y)
    if sample_weight is not None and not np.all(sample_weight > 0):
        # A row of weight 0 is no row, as in the network's fit and the terms': the folds are
        # drawn over the other rows only, so the fit learns what the fit without those rows learns.
        kept = np.flatnonzero(sample_weight > 0)
        X, y, ids, sample_weight = X[kept], _safe_indexing(y, kept), ids[kept], sample_weight[kept]
    try:
        paths, log_prob, scores = cross_fitted_candidates(estimator, X, y, sample_weight, targets, config, answer, seed)
    except ValueError as exc:  # a fold the terms cannot be fitted on (one target, say)
        return not_learnt(estimator, config, answer, f"a fold's fit failed ({exc})")
    return learn_from_candidates(estimator, config, answer, paths, log_prob, scores, ids, sample_weight,
                                 f"{FOLDS}-fold cross-fitting")


def cross_fitted_candidates(estimator: Any, X: Any, y: Any, sample_weight: np.ndarray | None, targets: Any,
                            config: Any, answer: AnswerModel, seed: int | None
                            ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Every row's candidates (``paths``, ``log_prob``) and the terms' scores of them, in the
    rows' order, each fold's scored by a model fitted on the other folds only (its network and
    the terms the fit's ``answer`` holds). A fold's network trains as many epochs in batches
    about as large as the fit's (``config``; :func:`fold_batch_size`): each row is seen as often
    as in the final model, and a fold costs its share of the rows, where the epoch rule for
    fewer rows would train about as many steps as the whole fit (``y``: indexable by row
    positions)."""
    n = X.shape[0]
    fold_of = check_random_state(seed).permutation(n) % FOLDS
    params = {"calibration": None, "warm_start": False, "verbose": 0,
              "max_epochs": config.max_epochs,
              "tree": targets.tree if estimator.tree is None else estimator.tree,
              **{name: None if answer.term(name) is None else _fixed(getattr(estimator, name)) for name in TERMS}}
    parts = []
    for fold in range(FOLDS):
        train, held = np.flatnonzero(fold_of != fold), np.flatnonzero(fold_of == fold)
        model = clone(estimator).set_params(**params, batch_size=fold_batch_size(train.size, config.batch_size),
                                            random_state=None if seed is None else seed + 1 + fold)
        with warnings.catch_warnings():
            # A fold's warnings (its labels, its settings) are the fit's own, which the final
            # fit on every row gives once.
            warnings.simplefilter("ignore")
            model.fit(X[train], _safe_indexing(y, train),
                      **({} if sample_weight is None else {"sample_weight": sample_weight[train]}))
        if model.targets_.tree.n_classes != targets.tree.n_classes:
            raise ValueError("a fold's tree differs from the fit's")
        view = held_out_view(X, train, held)
        decoder = decoder_of(model, model.net_, model.targets_, model.config_, model.answer_, rows=_checked)
        paths, log_prob, _ = decoder.candidates(view)
        scores = term_scores(model.answer_.terms, view, last_nodes(paths))
        parts.append((held, paths, log_prob, scores))
    k = min(part[1].shape[1] for part in parts)
    depth = max(part[1].shape[2] for part in parts)
    order = np.argsort(np.concatenate([part[0] for part in parts]), kind="stable")
    paths = np.concatenate([np.pad(p[1][:, :k], ((0, 0), (0, 0), (0, depth - p[1].shape[2])), constant_values=-1)
                            for p in parts])[order]
    log_prob = np.concatenate([p[2][:, :k] for p in parts])[order]
    scores = {name: np.concatenate([p[3][name][:, :k] for p in parts])[order] for name in parts[0][3]}
    return paths, log_prob, scores


def fold_batch_size(rows: int, batch_size: int) -> int:
    """The batch of a fold's network of ``rows`` rows, where the fit trains in batches of
    ``batch_size``: the rows split into the nearest whole number of batches of that size, and
    each batch as large as that split needs.

    An epoch of the fold then costs its share of the fit's rows: counted in whole batches of
    ``batch_size``, a fold's last batch (often a small one) would cost a whole step, which on a
    few hundred rows adds a fifth to the folds' training on average. A batch is at most 1.5
    times ``batch_size`` (folds are cross-fitted on fits of under
    :data:`CROSS_FIT_MAX_ROWS` rows only).

    Examples
    --------
    >>> fold_batch_size(284, 128), fold_batch_size(340, 128), fold_batch_size(100, 128)
    (142, 114, 100)
    """
    steps = max(1, int(rows / batch_size + 0.5))
    return -(-rows // steps)


def _cross_fit_refusal(estimator: Any, X: Any, answer: AnswerModel, sample_weight: np.ndarray | None) -> str | None:
    """Why this fit cannot learn its weights by cross-fitting (``None``: it can); rows of
    ``sample_weight`` 0 are not counted."""
    if not answer.terms:
        return "no re-ranking term was fitted"
    if X is None or not (sp.issparse(X) or isinstance(X, np.ndarray)):
        return "the rows are not a NumPy array or a scipy sparse matrix"
    n_rows = X.shape[0] if sample_weight is None else int(np.count_nonzero(sample_weight > 0))
    if n_rows >= CROSS_FIT_MAX_ROWS:
        return (f"{n_rows:,} rows, at least {CROSS_FIT_MAX_ROWS:,}, and no calibration share held out "
                "(calibration=None, a validation split or too much weight held out) to learn them on")
    if estimator.callbacks:
        return "callbacks are set, which the folds' fits would run again"
    if estimator.train_split is not None or estimator.early_stopping:
        return "a validation split is set"
    return None


def _fixed(requested: Any) -> float:
    """A fold's weight for a term: any number builds it (its scores, not its weight, are read)."""
    return 1.0 if isinstance(requested, str) else float(requested)


def _checked(X: Any) -> Any:
    """Rows the fit already checked (``validate_X``), as they are."""
    return X


#: What continuing training drops from the answer model, why (each was fitted for the weights or
#: the rows before), and the configuration's record of it.
_STALE_ON_CONTINUE = {
    "calibrator": ("it was fitted for the weights before this epoch, on rows held out of them. predict_confidence "
                   "now gives the model's own probability; fit afresh to calibrate again", {}),
    "flat_term": ("its linear SVM was fitted on the earlier rows only and cannot add this call's. The answers are "
                  "now re-ranked without it; fit afresh to keep it",
                  {"flat_term_reason": "dropped when training continued"}),
    "path_term": ("its linear SVMs were fitted on the earlier rows only and cannot add this call's. The answers are "
                  "now re-ranked without it; fit afresh to keep it",
                  {"path_term_reason": "dropped when training continued"}),
}


def drop_stale(estimator: Any, answer: AnswerModel) -> tuple[AnswerModel, Any]:
    """The answer model and configuration once training goes on: the calibrator, a map fitted
    for other weights, and the linear terms' SVMs, models of the rows before, go, each said once
    (a ``UserWarning`` at the user's line), and ``config_`` records it."""
    config = estimator.config_
    for part, (why, config_fields) in _STALE_ON_CONTINUE.items():
        if part == "calibrator" and answer.calibrator is not None:
            answer = answer.replace(calibrator=None)
        elif part != "calibrator" and answer.term(part) is not None:
            answer = answer.without(part)
        else:
            continue
        warnings.warn(f"continuing training drops the answer model's {part.replace('_', ' ')}: {why}", UserWarning,
                      stacklevel=caller_stacklevel())
        config = dataclasses.replace(config, **config_fields)
    return answer, config
