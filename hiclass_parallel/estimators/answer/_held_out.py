"""Where the re-ranking weights are learnt: rows that neither the network nor the terms trained on.

With ``term_weights="learnt"``, a fresh ``fit`` learns the weight of each re-ranking term left
at ``"auto"`` (the class prototypes, the flat linear term) and the scale of the conditional
logit by :func:`~._joint.fit_term_weights`, on one of two sets of held-out rows:

- **the calibration share** (:func:`learn_on_held_out`), where the fit holds one out
  (``calibration="auto"`` from about 2,000 rows): the network has trained on the other rows
  only, the prototypes are those of the other rows, and the flat term's SVM was fitted with the
  held-out rows unlabelled; the rows are shown as new documents (``held_out_view``).
- **cross-fitting** (:func:`learn_by_cross_fitting`), where the fit holds none out for lack of
  rows (fewer than :data:`CROSS_FIT_MAX_ROWS`): the rows are split into :data:`FOLDS` folds,
  and each fold's candidates are scored by a model (network, prototypes, flat term) fitted on
  the other folds, with the same settings, epochs and batch size, no calibration and fixed
  weights. Every row is then held out once, and the final model is the one fitted on every
  row. The cost is :data:`FOLDS` more fits on ``(FOLDS - 1) / FOLDS`` of the rows each.

Elsewhere (``calibration=None`` or a validation split on a large fit, callbacks of the
user's, which fold fits would run again, torch tensors) the weights stay the rules' of
``term_weights="rules"``, and ``config_.term_weights_reason`` says why. A number given for a
term (``prototypes=8.0``) fixes its weight: that term's score joins ``log p`` with it, and only
the others are learnt.

The learnt weights are set where decoding, persistence and export already read them: the
prototypes' ``weight`` and ``scale``, and ``config_.flat_term`` (0 drops ``flat_term_``, which
then costs nothing at predict); ``config_.term_weights_reason`` records, per term, whether it
was tried, its weight and its held-out gain.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from ._joint import TermWeights, fit_term_weights
from ._terms import term_scores

__all__ = ["CROSS_FIT_MAX_ROWS", "FOLDS", "learn_by_cross_fitting", "learn_on_held_out", "learns_weights"]

#: Folds of the cross-fitting: two more fits on half the rows each, about twice the network's
#: own fit in all (three folds, each on two thirds of the rows, cost half as much again and
#: were no more accurate on the small subtrees of ``docs/performance.md``).
FOLDS = 2

#: Cross-fitting serves fits of fewer rows than this: from it, ``calibration_size="auto"``'s
#: share (5%) holds out the 100 rows the calibrator needs, and the weights are learnt there at
#: no cost beyond decoding them.
CROSS_FIT_MAX_ROWS = 2000


def learns_weights(estimator: Any) -> bool:
    """Whether this fit learns any re-ranking weight: ``term_weights="learnt"`` and a term
    left at ``"auto"``."""
    if getattr(estimator, "term_weights", "rules") != "learnt" or not type(estimator)._reranks:
        return False
    return any(isinstance(getattr(estimator, name, None), str) for name in ("prototypes", "flat_term"))


def learn_on_held_out(estimator: Any, config: Any, prototypes: Any, flat: Any, candidates: Any, X: Any,
                      true: np.ndarray, sample_weight: np.ndarray | None) -> Any:
    """The configuration with the learnt weights (``prototypes``' weight and scale set in
    place), from the calibration share's ``candidates`` (``(paths, log_prob, similarity)`` of
    the held-out rows ``X`` as the fit shows them, by the network as trained without them)
    and their node ids ``true``; ``config`` as it was where nothing is learnt."""
    if not learns_weights(estimator):
        return config
    paths, log_prob, _ = candidates
    scores = term_scores(_terms(prototypes, flat), X, _last_nodes(paths))
    learnt = _fit(estimator, paths, log_prob, scores, true, sample_weight, config, prototypes)
    return _apply(estimator, config, prototypes, learnt, "the calibration share held out of the network and the terms")


def learn_by_cross_fitting(estimator: Any, X: Any, y: Any, ids: np.ndarray, sample_weight: np.ndarray | None,
                           targets: Any, config: Any, prototypes: Any, flat: Any, seed: int | None,
                           partial: bool = False) -> tuple[Any, Any]:
    """``(config, flat)`` with the weights learnt by cross-fitting (:data:`FOLDS` folds) on
    the rows ``X`` labelled ``y`` (node ids ``ids``) of a fit that held none out; the prototypes' weight and
    scale set in place, ``flat`` ``None`` where the flat term is dropped. As they were, with
    the reason in ``config_.term_weights_reason``, where cross-fitting does not apply (``partial``:
    the first call of ``partial_fit``, which trains one call's rows for one epoch)."""
    if not learns_weights(estimator):
        return config, flat
    refusal = "partial_fit trains one call's rows (fit learns them)" if partial else \
        _cross_fit_refusal(estimator, X, prototypes, flat)
    if refusal is not None:
        return dataclasses.replace(config, term_weights_reason=f"the rules' weights: {refusal}"), flat
    try:
        paths, log_prob, scores = cross_fitted_candidates(estimator, X, y, sample_weight, targets, config, prototypes,
                                                          flat, seed)
    except ValueError as exc:  # a fold the terms cannot be fitted on (one target, say)
        return dataclasses.replace(config, term_weights_reason=f"the rules' weights: a fold's fit failed ({exc})"), flat
    learnt = _fit(estimator, paths, log_prob, scores, ids, sample_weight, config, prototypes)
    config = _apply(estimator, config, prototypes, learnt, f"{FOLDS}-fold cross-fitting")
    return config, (flat if config.flat_term else None)


def cross_fitted_candidates(estimator: Any, X: Any, y: Any, sample_weight: np.ndarray | None, targets: Any,
                            config: Any, prototypes: Any, flat: Any, seed: int | None
                            ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Every row's candidates (``paths``, ``log_prob``) and the terms' scores of them, in the
    rows' order, each fold's scored by a model fitted on the other folds only (its network,
    prototypes and flat term: those of the fit, ``prototypes`` and ``flat``, where they are
    not ``None``). A fold's network trains as many epochs in batches as large as the fit's
    (``config``): each row is seen as often as in the final model, and a fold costs its share
    of the rows, where the epoch rule for fewer rows would train about as many steps as the
    whole fit."""
    from sklearn.base import clone
    from sklearn.utils import _safe_indexing, check_random_state

    from ..calibration._calibration import held_out_view
    from ..prediction._decode import decoder_of

    n = X.shape[0]
    fold_of = check_random_state(seed).permutation(n) % FOLDS
    params = {"calibration": None, "term_weights": "rules", "warm_start": False, "verbose": 0,
              "max_epochs": config.max_epochs, "batch_size": config.batch_size,
              "tree": targets.tree if estimator.tree is None else estimator.tree,
              "prototypes": None if prototypes is None else _fixed(estimator.prototypes),
              "flat_term": None if flat is None else _fixed(estimator.flat_term)}
    parts = []
    for fold in range(FOLDS):
        train, held = np.flatnonzero(fold_of != fold), np.flatnonzero(fold_of == fold)
        model = clone(estimator).set_params(**params, random_state=None if seed is None else seed + 1 + fold)
        with warnings.catch_warnings():
            # A fold's warnings (its labels, its settings) are the fit's own, which the final
            # fit on every row gives once.
            warnings.simplefilter("ignore")
            model.fit(X[train], _safe_indexing(y, train),
                      **({} if sample_weight is None else {"sample_weight": sample_weight[train]}))
        if model.targets_.tree.n_classes != targets.tree.n_classes:
            raise ValueError("a fold's tree differs from the fit's")
        view = held_out_view(X, train, held)
        decoder = decoder_of(model, model.net_, model.targets_, model.config_, model.prototypes_,
                             rows=lambda rows: rows, flat=model.flat_term_)
        paths, log_prob, _ = decoder.candidates(view)
        scores = term_scores(_terms(model.prototypes_, model.flat_term_), view, _last_nodes(paths))
        parts.append((held, paths, log_prob, scores))
    k = min(part[1].shape[1] for part in parts)
    depth = max(part[1].shape[2] for part in parts)
    order = np.argsort(np.concatenate([part[0] for part in parts]), kind="stable")
    paths = np.concatenate([np.pad(p[1][:, :k], ((0, 0), (0, 0), (0, depth - p[1].shape[2])), constant_values=-1)
                            for p in parts])[order]
    log_prob = np.concatenate([p[2][:, :k] for p in parts])[order]
    scores = {name: np.concatenate([p[3][name][:, :k] for p in parts])[order] for name in parts[0][3]}
    return paths, log_prob, scores


def _cross_fit_refusal(estimator: Any, X: Any, prototypes: Any, flat: Any) -> str | None:
    """Why this fit cannot learn its weights by cross-fitting (``None``: it can)."""
    import scipy.sparse as sp

    if prototypes is None and flat is None:
        return "no re-ranking term was fitted"
    if X is None or not (sp.issparse(X) or isinstance(X, np.ndarray)):
        return "the rows are not a NumPy array or a scipy sparse matrix"
    if X.shape[0] >= CROSS_FIT_MAX_ROWS:
        return (f"{X.shape[0]:,} rows, at least {CROSS_FIT_MAX_ROWS:,}, and no calibration share held out "
                "(calibration=None, a validation split or too much weight held out) to learn them on")
    if estimator.callbacks:
        return "callbacks are set, which the folds' fits would run again"
    if estimator.train_split is not None or estimator.early_stopping:
        return "a validation split is set"
    return None


def _fixed(requested: Any) -> float:
    """A fold's weight for a term: any number builds it (its scores, not its weight, are read)."""
    return 1.0 if isinstance(requested, str) else float(requested)


def _terms(prototypes: Any, flat: Any) -> dict[str, Any]:
    return {"prototypes": prototypes, "flat_term": flat}


def _last_nodes(paths: np.ndarray) -> np.ndarray:
    from ..prototypes._prototypes import last_nodes

    return last_nodes(paths)


def _fit(estimator: Any, paths: np.ndarray, log_prob: np.ndarray, scores: dict[str, np.ndarray],
         true: np.ndarray, sample_weight: np.ndarray | None, config: Any, prototypes: Any) -> TermWeights | None:
    """The joint fit on labelled rows: terms of a fixed weight join ``log p``, the others are
    learnt."""
    from ..calibration._calibration import answer_correct

    n, k, depth = paths.shape
    correct = answer_correct(paths.reshape(n * k, depth), np.repeat(true, k), estimator.semantics).reshape(n, k)
    labelled = np.asarray(true) >= 0
    base = np.asarray(log_prob, dtype=np.float64)[labelled]
    learnt = {}
    for name, score in scores.items():
        requested = getattr(estimator, name, None)
        if isinstance(requested, str):
            learnt[name] = score[labelled]
        else:
            base = base + float(requested) * score[labelled]
    return fit_term_weights(base, learnt, correct[labelled],
                            None if sample_weight is None else np.asarray(sample_weight)[labelled])


def _apply(estimator: Any, config: Any, prototypes: Any, learnt: TermWeights | None, where: str) -> Any:
    """Set the learnt weights: the prototypes' weight and scale in place, the flat term's in
    the configuration returned; the record in ``term_weights_reason``."""
    if learnt is None:
        return dataclasses.replace(config, term_weights_reason=(
            f"the rules' weights: fewer than the joint fit's minimum of usable rows in {where}"))
    records = []
    for name in ("prototypes", "flat_term"):
        fitted = prototypes is not None if name == "prototypes" else bool(config.flat_term)
        if not fitted:
            records.append(f"{name}: not tried ({'prototypes=None or rows that keep none' if name == 'prototypes' else config.flat_term_reason})")
        elif name not in learnt.weights:
            records.append(f"{name}: fixed weight {getattr(estimator, name)!r}")
        else:
            records.append(learnt.describe(name))
    reason = f"learnt on {where} (scale {learnt.scale:.3g}): " + "; ".join(records)
    if prototypes is not None and "prototypes" in learnt.weights:
        prototypes.weight, prototypes.scale = learnt.weights["prototypes"], learnt.scale
    if config.flat_term and "flat_term" in learnt.weights:
        weight = learnt.weights["flat_term"]
        why = learnt.describe("flat_term") + f" ({config.flat_term_reason})"
        config = dataclasses.replace(config, flat_term=weight, flat_term_reason=why)
    return dataclasses.replace(config, term_weights_reason=reason)
