"""The class prototypes' fit: which rows build them, their weight and scale, and the rows a
continued fit adds -- every choice of the fit about the prototypes, in one place.

The fit pipeline (:mod:`..fitting._fit`) calls three functions:

- :func:`held_out_prototypes`, while it fits the answer calibrator: the prototypes of the rows
  the model trained on so far (a held-out row never meets its own contribution), with
  ``prototypes="auto"``'s weight and scale chosen on the held-out rows
  (:func:`~._prototypes.choose_weight_and_scale`, agreed over the ranks of a data-parallel fit);
- :func:`fitted_prototypes`, at the end of a fresh fit: the prototypes of every training row
  (their weight, chosen on the held-out rows or :func:`start_weight`, is the answer model's);
- :func:`added_prototypes`, when training continues: a copy of the fitted prototypes with the
  call's rows added.

Which estimators keep prototypes at all is :func:`wants_prototypes`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..networks import data_parallel_group
from ._calibration import answer_correct
from ._prototypes import Prototypes, choose_weight_and_scale, prototypes_kind

__all__ = ["added_prototypes", "fitted_prototypes", "held_out_prototypes", "start_weight",
           "wants_prototypes"]

Candidates = tuple[np.ndarray, np.ndarray, np.ndarray]


def wants_prototypes(estimator: Any, X: Any) -> bool:
    """Class prototypes (:mod:`._prototypes`) are kept for the rows ``X`` (sparse or dense;
    ``None``: streamed, which keeps none) of a one-answer classifier, unless ``prototypes=None``.
    A sparse torch tensor keeps none: its rows would be densified."""
    if getattr(X, "layout", torch.strided) != torch.strided:
        return False
    return type(estimator)._reranks and estimator.prototypes is not None and getattr(X, "ndim", 0) == 2


def held_out_prototypes(estimator: Any, targets: Any, X: Any, ids: np.ndarray, plan: Any,
                        candidates_of: Callable[[Prototypes], Candidates],
                        sample_weight: np.ndarray | None = None,
                        prior: Callable[[np.ndarray], np.ndarray | float] | None = None,
                        ) -> tuple[Prototypes | None, tuple[float, float], Candidates | None]:
    """The prototypes of the calibration ``plan``'s fit rows of ``X`` (``ids``: every row's node
    id; each row counted with its ``sample_weight``), their ``(weight, scale)`` and the held-out
    rows' candidates to re-rank (``decoding="best"``; ``None`` otherwise); ``(None, (0, 1),
    None)`` without prototypes.

    ``candidates_of(prototypes)`` decodes the held-out rows with those prototypes (the model's
    paths as trained so far, their log-probabilities and similarities), once: for the weight
    and for the answers. With ``prototypes="auto"`` the weight and scale are fitted on them,
    beside ``prior(paths)``, the other terms of the re-ranked score (the flat term's; ``None``:
    none).
    """
    if not wants_prototypes(estimator, X):
        return None, (0.0, 1.0), None
    fit_weight = None if sample_weight is None else sample_weight[plan.fit_rows]
    prototypes = _prototypes_of(estimator, targets, X[plan.fit_rows], ids[plan.fit_rows], sample_weight=fit_weight)
    weight_and_scale = (start_weight(estimator, X), 1.0)
    fitting, reranking = isinstance(estimator.prototypes, str), estimator.decoding == "best"
    candidates = candidates_of(prototypes) if fitting or reranking else None
    if fitting:
        held_weight = None if sample_weight is None else sample_weight[plan.held_rows]
        paths, log_prob, similarity = candidates
        scored = (paths, log_prob + (0.0 if prior is None else prior(paths)), similarity)
        fitted = _choose_weight(estimator, scored, ids[plan.held_rows], type(prototypes), held_weight)
        weight_and_scale = _agreed(estimator, fitted)
    return prototypes, weight_and_scale, candidates if reranking else None


def fitted_prototypes(estimator: Any, targets: Any, X: Any, dataset: Any,
                      sample_weight: np.ndarray | None) -> Prototypes | None:
    """The prototypes of a fresh fit's rows ``X`` (``None``: streamed; node ids the ``y`` of
    the training ``dataset``, read only when the rows keep prototypes); ``None`` when the
    estimator keeps none."""
    if not wants_prototypes(estimator, X):
        return None
    return _prototypes_of(estimator, targets, X, np.asarray(dataset.y), sample_weight=sample_weight)


def added_prototypes(estimator: Any, targets: Any, prototypes: Prototypes | None, X: Any, dataset: Any,
                     sample_weight: np.ndarray | None) -> Prototypes | None:
    """The fitted ``prototypes`` with a continued fit's rows ``X`` (node ids the ``y`` of the
    call's ``dataset``, read only when the rows keep prototypes) added, in a new object
    (``add`` builds new arrays) that replaces the old one only once training succeeded: a
    failed call leaves the fitted prototypes as they were. ``prototypes`` as they are when
    there are none or the rows keep none."""
    if prototypes is None or not wants_prototypes(estimator, X):
        return prototypes
    prototypes = copy.copy(prototypes)
    prototypes.add(_prototypes_of(estimator, targets, X, np.asarray(dataset.y), class_text=False,
                                  sample_weight=sample_weight))
    return prototypes


def _prototypes_of(estimator: Any, targets: Any, X: Any, ids: np.ndarray, class_text: bool = True,
                   sample_weight: np.ndarray | None = None) -> Prototypes:
    """The class prototypes of the rows ``X`` (node ids ``ids``; each row counted with its
    ``sample_weight``), with each class's text (``module__class_features``, in the space of
    ``X``; unless ``class_text=False``, for rows added to prototypes that have it) as one more
    row of its class, summed over the ranks of a data-parallel fit."""
    import scipy.sparse as sp

    prototypes = prototypes_kind(X).from_rows(X, ids, targets.tree, sample_weight=sample_weight)
    text = estimator._skorch_kwargs("module__").get("class_features") if class_text else None
    if sp.issparse(X) and sp.issparse(text) and text.shape == (len(targets.classes), X.shape[1]):
        # A class no training row has gets its name as its prototype (a class seen in training
        # gets its name as one row more): without it the re-ranking would pass over classes
        # the class text can place.
        prototypes.add_sums(sp.csr_matrix(text)[targets.node_rows()])
    group = data_parallel_group(estimator)
    if group is not None:
        prototypes.sum_over_ranks(group[0])
    return prototypes


def start_weight(estimator: Any, X: Any) -> float:
    """The prototypes' weight when none is chosen on held-out rows: the parameter's, or the
    default of the prototypes of rows like ``X``."""
    return prototypes_kind(X).DEFAULT_WEIGHT if isinstance(estimator.prototypes, str) else float(estimator.prototypes)


def _agreed(estimator: Any, values: tuple[float, ...]) -> tuple[float, ...]:
    """The mean of every rank's ``values`` in a data-parallel fit (each fitted them on its own
    held-out rows), so that all ranks predict alike; ``values`` otherwise."""
    group = data_parallel_group(estimator)
    if group is None:
        return values
    import torch.distributed as dist

    parts: list[Any] = [None] * dist.get_world_size(group[0])
    dist.all_gather_object(parts, tuple(float(v) for v in values), group=group[0])
    return tuple(float(v) for v in np.mean(parts, axis=0))


def _choose_weight(estimator: Any, candidates: Candidates, true: np.ndarray, kind: type[Prototypes],
                   sample_weight: np.ndarray | None = None) -> tuple[float, float]:
    """``prototypes="auto"``: the weight and scale fitted on the held-out rows' ``candidates``
    (the model's paths as trained so far, their log-probabilities and similarities) and node
    ids ``true`` (weighted by ``sample_weight``), within the bounds of the prototypes' ``kind``."""
    paths, log_prob, similarity = candidates
    n, k, depth = paths.shape
    correct = answer_correct(paths.reshape(n * k, depth), np.repeat(true, k), estimator.semantics).reshape(n, k)
    labelled = true >= 0
    return choose_weight_and_scale(log_prob[labelled], similarity[labelled], correct[labelled], kind.MAX_WEIGHT,
                                   kind.DEFAULT_WEIGHT,
                                   sample_weight=None if sample_weight is None else sample_weight[labelled])
