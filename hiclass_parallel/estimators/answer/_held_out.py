"""Where the re-ranking weights are learnt and set: rows that neither the network nor the terms trained on.

A fresh ``fit`` learns the weight of each re-ranking term left at ``"auto"`` (the class
prototypes, the flat and the path-level linear terms) and the scale of the conditional
logit by :func:`~._joint.fit_term_weights`, on one of two sets of held-out rows:

- **the calibration share** (:func:`learn_on_held_out`), where the fit holds one out
  (``calibration="auto"`` from about 2,000 rows): the network has trained on the other rows
  only, the prototypes are those of the other rows, and the linear terms' SVMs were fitted with
  the held-out rows unlabelled; the rows are shown as new documents
  (:func:`~._calibration.held_out_view`).
- **cross-fitting**, where the fit holds none out for lack of rows: each fold's candidates are
  scored by a model fitted on the other folds (``fitting._answer_fit``, which fits the fold
  models and decodes their rows), and the weights are learnt on them here
  (:func:`learn_from_candidates`).

Elsewhere (``calibration=None`` or a validation split on a large fit, callbacks of the
user's, which fold fits would run again, torch tensors, the first call of ``partial_fit``) the
terms left at ``"auto"`` are not built (:func:`not_learnt`), and ``config_.term_weights_reason``
says why. A number given for a
term (``prototypes=8.0``) fixes its weight: that term's score joins ``log p`` with it, and only
the others are learnt.

The learnt weights and scale are set on the answer model (:class:`~._model.AnswerModel`): a
term whose weight comes out 0 is dropped from it (a linear term; the prototypes keep their
statistics with a weight of 0, as a fixed weight given later can use them), and
``config_.term_weights_reason`` records, per term, whether it was tried, its weight and its
held-out gain.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ._calibration import answer_correct
from ._joint import TermWeights, fit_term_weights
from ._model import AnswerModel
from ._prototypes import last_nodes
from ._terms import PRIOR_TERMS, TERMS, term_scores

__all__ = ["learn_from_candidates", "learn_on_held_out", "learns_weights", "not_learnt"]


def learns_weights(estimator: Any) -> bool:
    """Whether this fit learns any re-ranking weight: a term left at ``"auto"``."""
    if not type(estimator)._reranks:
        return False
    return any(isinstance(getattr(estimator, name, None), str) for name in TERMS)


def learn_on_held_out(estimator: Any, config: Any, answer: AnswerModel, candidates: Any, X: Any,
                      true: np.ndarray, sample_weight: np.ndarray | None) -> tuple[Any, AnswerModel]:
    """``(config, answer)`` with the learnt weights, from the calibration share's
    ``candidates`` (``(paths, log_prob, similarity)`` of the held-out rows ``X`` as the fit
    shows them, by the network as trained without them), scored by the ``answer`` model's
    terms (fitted without them), and their node ids ``true``; as they were where nothing is
    learnt."""
    if not learns_weights(estimator):
        return config, answer
    paths, log_prob, _ = candidates
    scores = term_scores(answer.terms, X, last_nodes(paths))
    return learn_from_candidates(estimator, config, answer, paths, log_prob, scores, true, sample_weight,
                                 "the calibration share held out of the network and the terms")


def learn_from_candidates(estimator: Any, config: Any, answer: AnswerModel, paths: np.ndarray,
                          log_prob: np.ndarray, scores: dict[str, np.ndarray], true: np.ndarray,
                          sample_weight: np.ndarray | None, where: str) -> tuple[Any, AnswerModel]:
    """``(config, answer)`` with the weights learnt on held-out rows' candidates (``paths``,
    their ``log_prob`` and each term's ``scores``, by parts that did not train on the rows)
    labelled with node ids ``true`` (``-1``: unlabelled); ``where`` names the rows in the
    record."""
    learnt = _fit(estimator, paths, log_prob, scores, true, sample_weight)
    return _apply(estimator, config, answer, learnt, where)


def _fit(estimator: Any, paths: np.ndarray, log_prob: np.ndarray, scores: dict[str, np.ndarray],
         true: np.ndarray, sample_weight: np.ndarray | None) -> TermWeights | None:
    """The joint fit on labelled rows: terms of a fixed weight join ``log p``, the others are
    learnt."""
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


def _apply(estimator: Any, config: Any, answer: AnswerModel, learnt: TermWeights | None,
           where: str) -> tuple[Any, AnswerModel]:
    """Set the learnt weights on the answer model (the scale too, where the prototypes are
    fitted; a linear term of weight 0 dropped), and the record in ``term_weights_reason``."""
    if learnt is None:
        return not_learnt(estimator, config, answer, f"fewer than the joint fit's minimum of usable rows in {where}")
    records = []
    for name in TERMS:
        if answer.term(name) is None:
            records.append(f"{name}: not tried ({_why_absent(config, name)})")
        elif name not in learnt.weights:
            records.append(f"{name}: fixed weight {getattr(estimator, name)!r}")
        else:
            records.append(learnt.describe(name))
    reason = f"learnt on {where} (scale {learnt.scale:.3g}): " + "; ".join(records)
    weights = dict(answer.weights)
    weights.update({name: learnt.weights[name] for name in answer.terms if name in learnt.weights})
    answer = answer.replace(weights=weights)
    if answer.term("prototypes") is not None and "prototypes" in learnt.weights:
        answer = answer.replace(scale=learnt.scale)
    for name in PRIOR_TERMS:
        if answer.term(name) is None or name not in learnt.weights:
            continue
        why = learnt.describe(name) + f" ({_why_absent(config, name)})"
        config = dataclasses.replace(config, **{_reason_field(name): why})
        if not answer.weight(name):  # dropped: it costs nothing at predict
            answer = answer.without(name)
    return dataclasses.replace(config, term_weights_reason=reason), answer


def not_learnt(estimator: Any, config: Any, answer: AnswerModel, why: str) -> tuple[Any, AnswerModel]:
    """``(config, answer)`` where the weights cannot be learnt (``why``): the terms left at
    ``"auto"`` are not built, so they cost nothing at predict, and a term of a fixed weight
    stays. No fixed weight serves every data set (the same weight gained on some taxonomies
    and lost on others: ``docs/prototypes.md``, "Weights learnt on held-out rows"); without
    the term the answer is the network's, which is what the term could otherwise lose to."""
    dropped = [name for name in TERMS if answer.term(name) is not None and isinstance(getattr(estimator, name), str)]
    for name in dropped:
        answer = answer.without(name)
    for name in dropped:
        if name in PRIOR_TERMS:
            config = dataclasses.replace(config, **{_reason_field(name): f"not built: {why} ({_why_absent(config, name)})"})
    built = (f"{' and '.join(dropped)} not built (their weights are left at 'auto')" if dropped
             else "no term left at 'auto' was built")
    kept = f"; kept with a fixed weight: {', '.join(answer.kept())}" if answer.kept() else ""
    return dataclasses.replace(config, term_weights_reason=f"no weight learnt: {why}: {built}{kept}"), answer


def _reason_field(name: str) -> str:
    """The configuration's field that says why the linear term ``name`` (one of
    :data:`~._terms.PRIOR_TERMS`) is kept, fixed or left out: ``config_.flat_term_reason``."""
    return f"{name}_reason"


def _why_absent(config: Any, name: str) -> str:
    """The configuration's reason for term ``name`` (the prototypes have no reason field: they
    are absent only for ``prototypes=None`` or rows that keep none)."""
    if name == "prototypes":
        return "prototypes=None or rows that keep none"
    return getattr(config, _reason_field(name), "no reason recorded")
