"""The answer at predict time: every decision of decoding in one function, :func:`decode`.

A decoded answer goes through four stages, each decided here and nowhere else:

1. **model paths**: the model's own best path, or its ``n`` best, from
   :func:`~hiclass_parallel.ops.decode.decoding_route`'s route (best-first from the hidden rows
   for path-locally trained models on the CPU, exhaustive over every score otherwise);
2. **re-ranking** (optional): the order of those candidates by the answer model's score
   ``log p + weight * similarity + sum_i w_i * term_i`` (:mod:`..answer._model`), the class
   prototypes' similarity and each other term's score (the linear terms' margins), when
   the model has any with a positive weight (``decoding`` "best" and "hf1", and top-``k``;
   never "threshold");
3. **decoding rule**: ``"best"`` (the first path), ``"threshold"`` (the deepest path whose
   nodes pass the threshold), ``"hf1"`` (the path of highest expected hierarchical F1 among
   the ``top_k`` candidates and their ancestors) or ``"top_k"`` (the first ``k``);
4. **output form**: one path per row (``(n, L)``) or ``k`` (``(n, k, L)``), node ids padded
   with ``-1``, and their log-probabilities under the model.

:func:`decode` reads a :class:`Decoder`: the trained net, the tree and the prediction settings.
The fitted estimator makes one of its state (``PredictMixin._decoder``); the fit makes one of
the net it has just trained to fit the answer calibrator on held-out rows, before the
estimator is fitted. Either way :func:`decoder_of` reads the answer model
(:class:`~..answer._model.AnswerModel`), the one place decoding reads it. Each call returns
the :class:`Route` it took.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from ...ops.best_first import best_first_paths
from ...ops.decode import best_paths, decoding_route, expected_hf1_paths, topk_paths
from .._checks import inference_batch_size
from ..answer import PRIOR_TERMS, AnswerModel, last_nodes, rerank_order

__all__ = ["Decoded", "Decoder", "Route", "check_semantics", "decode", "decoder_of", "host_rows", "term_label"]


def check_semantics(semantics: str, stop: bool) -> None:
    """Terminal ``semantics`` need a model trained with stop scores (``stop``): the one check,
    and its message, for every estimator that predicts (the multi-label one too)."""
    if semantics == "terminal" and not stop:
        raise ValueError(
            "semantics='terminal' needs a model trained with stop scores; this one was fitted with stop=False. "
            "Refit with stop=True, or predict with semantics='partial'"
        )


@dataclass(frozen=True)
class Route:
    """The route one :func:`decode` call took.

    Attributes
    ----------
    model : {"best_first", "exhaustive"}
        How the model's paths were found (:func:`~hiclass_parallel.ops.decode.decoding_route`).
    n_model : int or None
        How many paths per row the model gave (``None``: its best one).
    reranking : str or None
        What re-ranked the model's paths: the labels (:func:`term_label`) of the terms that
        did, joined by ``+`` (``"prototypes"``, ``"flat"``, ``"prototypes+flat"``); ``None``:
        nothing.
    rule : {"best", "threshold", "hf1", "top_k"}
        The decoding rule.
    output : {"path", "top_k"}
        One path per row, or ``k``.
    """

    model: str
    n_model: int | None
    reranking: str | None
    rule: str
    output: str


class Decoded(NamedTuple):
    """What :func:`decode` gives: node-id paths, their log-probabilities, the route taken."""

    paths: np.ndarray
    log_prob: np.ndarray
    route: Route


@dataclass
class Decoder:
    """What decoding reads: a trained net, its tree and the prediction settings.

    Attributes
    ----------
    net : TreeNet
        The trained skorch net (its ``outputs`` loop, its module's ``scorer``).
    tree : Tree
        The tree the net scores.
    partition : str
    stop : bool
    path_local : bool
        Whether the net was trained path-locally (it then scores columns on demand).
    semantics, decoding : str
    threshold : float
    top_k, prototype_candidates : int
    batch_size : int or None
        The inference loop's batch size.
    prototypes : Prototypes or None
        The fitted class prototypes (``None``: no re-ranking).
    weight : float or None
        The prototypes' weight at prediction (``None``: no re-ranking by them).
    scale : float
        The conditional logit's scale for ``"hf1"`` with prototypes (1 for a weight set by hand).
    terms : dict of str to (Term, float)
        The answer model's other terms that re-rank at prediction (the linear terms), by
        name, each with its weight (above 0); their weighted scores join ``log p`` before the
        prototypes' similarity (:meth:`prior`).
    rows : callable
        ``X`` checked for prediction (the estimator's ``validate_X``; the identity for rows
        the fit already checked).
    dataset : callable
        The dataset of checked rows, batched as the module takes them.
    """

    net: Any
    tree: Any
    partition: str
    stop: bool
    path_local: bool
    semantics: str
    decoding: str
    threshold: float
    top_k: int
    prototype_candidates: int
    batch_size: int | None
    prototypes: Any
    weight: float | None
    scale: float
    rows: Callable[[Any], Any]
    dataset: Callable[[Any], Any]
    terms: dict[str, tuple[Any, float]] = field(default_factory=dict)

    @property
    def reranking(self) -> str | None:
        """What re-ranks the model's paths (:attr:`Route.reranking`)."""
        names = (["prototypes"] if self.weight else []) + [term_label(name) for name in self.terms]
        return "+".join(names) or None

    @property
    def n_candidates(self) -> int:
        """Number of candidate answers: every node (terminal semantics) or every leaf."""
        return self.tree.n_classes if self.semantics == "terminal" else int(self.tree.is_leaf.sum())

    def check_semantics(self) -> None:
        """Terminal semantics need a model trained with stop scores (:func:`check_semantics`)."""
        check_semantics(self.semantics, self.stop)

    def per_batch(self, X: Any, fn: Callable[[torch.Tensor], Any], hidden: bool = False) -> tuple[np.ndarray, ...]:
        """``fn`` of each mini-batch's scores (or hidden representation), concatenated on the host
        (``X`` already checked by ``rows``)."""
        parts = []
        for out in self.net.outputs(self.dataset(X), hidden=hidden, batch_size=self.batch_size):
            result = fn(out)
            parts.append([t.cpu().numpy() for t in (result if isinstance(result, tuple) else (result,))])
        return tuple(np.concatenate(column) for column in zip(*parts))

    def model_route(self) -> str:
        """:func:`~hiclass_parallel.ops.decode.decoding_route`'s route for this model and
        ``decoding`` (threshold decoding reads every score)."""
        threshold = self.threshold if self.decoding == "threshold" else None
        return decoding_route(self.partition, on_demand=self.path_local, threshold=threshold, device=self.net.device)

    def model_paths(self, X: Any, k: int | None) -> tuple[np.ndarray, np.ndarray, str]:
        """Stage 1: the model's best (``k=None``) or ``k`` best paths of the checked rows ``X``,
        their log-probabilities and the route (``"best_first"`` or ``"exhaustive"``)."""
        self.check_semantics()
        kwargs = {"partition": self.partition, "stop": self.stop, "semantics": self.semantics}
        threshold = self.threshold if self.decoding == "threshold" else None
        route = self.model_route()
        if route != "exhaustive":
            def fn(hidden):
                return best_first_paths(self.net.module_.scorer(hidden), hidden.shape[0], self.tree, stop=self.stop,
                                        semantics=self.semantics, k=k, like=hidden)
            paths, log_prob = self.per_batch(X, fn, hidden=True)
        elif k is None:
            paths, log_prob = self.per_batch(X, lambda s: best_paths(s, self.tree, threshold=threshold, **kwargs))
        else:
            paths, log_prob = self.per_batch(X, lambda s: topk_paths(s, self.tree, k, **kwargs))
        return paths.astype(np.int64, copy=False), log_prob, route

    def candidates(self, X: Any, k: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The model's ``prototype_candidates`` (at least ``k``) best paths of the checked rows
        ``X``, their log-probabilities and their answers' similarities to the rows (stages 1 and
        the first half of 2)."""
        paths, log_prob, _ = self.model_paths(X, min(max(self.prototype_candidates, k), self.n_candidates))
        if self.prototypes is None:
            return paths, log_prob, np.zeros(log_prob.shape, dtype=np.float32)
        return paths, log_prob, self.prototypes.score(host_rows(X), last_nodes(paths))

    def prior(self, X: Any, paths: np.ndarray) -> np.ndarray | float:
        """``sum_i w_i * term_i`` of each candidate path's answer (``(n, k)``) over the
        :attr:`terms`, their part of the re-ranked score; 0 without any."""
        if not self.terms:
            return 0.0
        host, nodes = host_rows(X), last_nodes(paths)  # once for every term
        return sum((np.float32(weight) * term.score(host, nodes) for term, weight in self.terms.values()), start=0.0)


def term_label(name: str) -> str:
    """A term's label in :attr:`Route.reranking` and in explanations: its name without
    ``_term`` (``"flat_term"``: ``"flat"``).

    Examples
    --------
    >>> term_label("flat_term"), term_label("prototypes")
    ('flat', 'prototypes')
    """
    return name.removesuffix("_term")


def host_rows(X: Any) -> Any:
    """Rows as the re-ranking terms compare them: on the host (scipy, NumPy)."""
    if isinstance(X, torch.Tensor):
        return (X if X.layout == torch.strided else X.to_dense()).cpu().numpy()
    return X


def decoder_of(estimator: Any, net: Any, targets: Any, config: Any, answer: AnswerModel,
               rows: Callable[[Any], Any]) -> Decoder:
    """The :class:`Decoder` of ``net`` trained with ``config`` on ``targets``, with the terms,
    weights and scale of the ``answer`` model, and the estimator's prediction settings as they
    are now (a term's weight: the number given, else the fitted one for ``"auto"``; the scale
    applies to fitted weights only).

    The fitted estimator makes one of its fitted state; the fit makes one of the net it has
    just trained, to fit the answer calibrator on held-out rows (``rows``: the identity for rows
    the fit already checked), without marking the estimator fitted before it is.
    """
    prototypes = answer.term("prototypes")
    weight = None if prototypes is None else _weight_at_prediction(estimator.prototypes, answer.weight("prototypes"))
    terms = {}
    for name in PRIOR_TERMS:
        term = answer.term(name)
        at_prediction = None if term is None else _weight_at_prediction(getattr(estimator, name, None),
                                                                        answer.weight(name))
        if at_prediction is not None:
            terms[name] = (term, at_prediction)
    accepts_sparse = config.capabilities.accepts_sparse
    return Decoder(
        net=net, tree=targets.tree, partition=config.partition, stop=config.stop, path_local=config.path_local,
        semantics=estimator.semantics, decoding=estimator.decoding, threshold=estimator.threshold,
        top_k=estimator.top_k, prototype_candidates=estimator.prototype_candidates,
        batch_size=inference_batch_size(estimator.batch_size),
        prototypes=prototypes, weight=weight,
        scale=answer.scale if weight is not None and isinstance(estimator.prototypes, str) else 1.0,
        rows=rows, dataset=lambda X: targets.dataset(X, None, accepts_sparse), terms=terms,
    )


def _weight_at_prediction(requested: str | float | None, fitted: float) -> float | None:
    """A re-ranking term's weight at prediction (``None``: off): the parameter's number, the
    fitted weight for ``"auto"``, off for ``None`` or a weight of 0."""
    if requested is None:
        return None
    weight = float(fitted) if isinstance(requested, str) else float(requested)
    return weight if weight > 0 else None


def chosen_log_prob(paths: np.ndarray, log_prob: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """The log-probability of each row's chosen path: that of the first of its ``top_k`` paths
    (``(n, k, L)``) that passes through the chosen path's last node (the chosen path is one of
    them or an ancestor prefix of one)."""
    depth = (chosen >= 0).sum(axis=1) - 1
    rows = np.arange(chosen.shape[0])
    last = chosen[rows, np.maximum(depth, 0)]
    through = (paths == last[:, None, None]).any(axis=2)  # (n, k)
    return log_prob[rows, through.argmax(axis=1)]


def decode(decoder: Decoder, X: Any, k: int | None = None,
           candidates: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> Decoded:
    """The decoded answer of ``X``: model paths -> re-ranking -> decoding rule -> output form.

    Parameters
    ----------
    decoder : Decoder
    X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
    k : int, default=None
        ``None``: one answer per row, by the ``decoding`` rule; an int: the ``k`` best paths
        (re-ranked by the prototypes where they apply).
    candidates : tuple, default=None
        :meth:`Decoder.candidates` of these rows, already computed (the fit's calibration
        decodes its held-out rows once to fit the prototypes' weight and to answer); only for
        ``decoding="best"`` with re-ranking.

    Returns
    -------
    Decoded
        ``paths`` (``(n, L)``, or ``(n, k, L)`` for an int ``k``), ``log_prob`` (the model's,
        ``(n,)`` or ``(n, k)``) and the :class:`Route` taken.
    """
    rule = "top_k" if k is not None else decoder.decoding
    output = "top_k" if k is not None else "path"
    decoder.check_semantics()
    X = decoder.rows(X)
    rerank = decoder.reranking is not None and rule != "threshold"
    if not rerank:
        if rule == "hf1":  # the top_k best paths, then the rule

            n_model = min(decoder.top_k, decoder.n_candidates)
            paths, log_prob, model = decoder.model_paths(X, n_model)
            chosen, _ = expected_hf1_paths(paths, log_prob)
            paths, log_prob = chosen, chosen_log_prob(paths, log_prob, chosen)
        else:  # best, threshold and top-k: the model's own paths are the answer
            n_model = k
            paths, log_prob, model = decoder.model_paths(X, k)
        return Decoded(paths, log_prob, Route(model, n_model, None, rule, output))
    if rule == "hf1":
        # The path of highest expected hierarchical F1 among the candidates (the model's
        # max(top_k, prototype_candidates) best) and their ancestors, the candidates weighed by
        # softmax(scale * (log p + weight * similarity + the other terms)) (the conditional logit
        # fitted with the weight), and the model's log-probability of the chosen path.

        paths, log_prob, similarity = decoder.candidates(X, min(decoder.top_k, decoder.n_candidates))
        with np.errstate(invalid="ignore"):  # NaN rows stay NaN: expected_hf1_paths gives them the empty path
            combined = np.where(np.isneginf(log_prob), -np.inf, np.float32(decoder.scale) * (
                log_prob + np.float32(decoder.weight or 0.0) * similarity + decoder.prior(X, paths)
            )).astype(np.float32)
        chosen, _ = expected_hf1_paths(paths, combined)
        n_model = paths.shape[1]
        paths, log_prob = chosen, chosen_log_prob(paths, log_prob, chosen)
    else:  # best or top-k: the candidates ordered by log p + weight * similarity + the other terms, the first (k)
        if candidates is None:
            candidates = decoder.candidates(X, k or 1)
        paths, log_prob, similarity = candidates
        n_model = paths.shape[1]
        order = rerank_order(log_prob + decoder.prior(X, paths), similarity, decoder.weight or 0.0)[:, : (k or 1)]
        paths = np.take_along_axis(paths, order[..., None], axis=1)
        log_prob = np.take_along_axis(log_prob, order, axis=1)
        if k is None:
            paths, log_prob = paths[:, 0], log_prob[:, 0]
    return Decoded(paths, log_prob, Route(decoder.model_route(), n_model, decoder.reranking, rule, output))
