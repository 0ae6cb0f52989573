"""The fitted answer model (``answer_``): the terms, their weights, the scale and the calibrator.

A fitted one-answer classifier holds one :class:`AnswerModel`. A candidate answer ``c`` of a
row ``x`` scores

    log p(c | x) + sum_i weights[i] * terms[i].score(x, c)

where ``log p`` is the network's log-probability of the path and each term follows the
protocol of :mod:`._terms`. The model's re-ranking takes the best of the network's
``prototype_candidates`` most probable answers by this score; ``decoding="hf1"`` weighs the
candidates by ``softmax(scale * score)``, the conditional logit fitted with the weights
(``scale`` is the inverse of its temperature); the calibrator maps the network's probability
of the chosen answer to the probability that it is right.

Decoding (``prediction._decode.decoder_of``), persistence (``io._persistence``) and export
(``io._export``) each read the answer model in one function; the fit builds it
(``fitting._answer_fit``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._calibration import BetaCalibrator
from ._terms import TERMS

__all__ = ["AnswerModel"]


@dataclasses.dataclass
class AnswerModel:
    """The answer model of a fitted classifier (``answer_``).

    Attributes
    ----------
    terms : dict of str to Term
        Each fitted re-ranking term by name (``"prototypes"``, ``"flat_term"``, ``"path_term"``: the protocol
        of :mod:`~hiclass_parallel.estimators.answer._terms`); a term the fit did not keep is
        absent and costs nothing at predict.
    weights : dict of str to float
        Each term's weight in nats per unit of its score, as the fit set it (learnt on held-out
        rows, the start weight where none was learnt, or the number given); 0: kept but not scored. A number
        given to the estimator after the fit (``prototypes=8.0``) replaces it at predict.
    scale : float, default=1.0
        The coefficient of the re-ranked score in the fitted conditional logit over the
        candidates (the inverse of a temperature), which ``decoding="hf1"`` weighs them by;
        1 where nothing was fitted.
    calibrator : BetaCalibrator or None, default=None
        The map from the network's probability of the answer to the probability that it is
        right (``predict_confidence``); ``None``: the network's own probability.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel.estimators import FlatMargins
    >>> from hiclass_parallel.estimators.answer import AnswerModel
    >>> X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> answer = AnswerModel(terms={"flat_term": FlatMargins.fit(X, np.array([2, 2, 4, 4]), n_classes=5)},
    ...                      weights={"flat_term": 4.0})
    >>> answer.weight("flat_term"), answer.term("prototypes") is None, answer.kept()
    (4.0, True, ['flat_term'])
    >>> answer.without("flat_term").kept()
    []
    """

    terms: dict[str, Any] = dataclasses.field(default_factory=dict)
    weights: dict[str, float] = dataclasses.field(default_factory=dict)
    scale: float = 1.0
    calibrator: BetaCalibrator | None = None

    def __post_init__(self) -> None:
        unknown = (set(self.terms) | set(self.weights)) - set(TERMS)
        if unknown:
            raise ValueError(f"unknown answer-model terms {sorted(unknown)}; known: {list(TERMS)}")
        if set(self.weights) != set(self.terms):
            raise ValueError(f"the answer model's weights {sorted(self.weights)} must name its terms "
                             f"{sorted(self.terms)}, one weight each")
        for name, weight in self.weights.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < math.inf:
                raise ValueError(f"the weight of term {name!r} must be a finite number >= 0, got {weight!r}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or \
                not 0 < self.scale < math.inf:
            raise ValueError(f"the answer model's scale must be a finite number > 0, got {self.scale!r}")

    def term(self, name: str) -> Any | None:
        """The fitted term ``name``; ``None`` where the model has none."""
        return self.terms.get(name)

    def weight(self, name: str) -> float:
        """The fitted weight of term ``name``; 0 where the model has none."""
        return float(self.weights.get(name, 0.0))

    def kept(self) -> list[str]:
        """The terms with a weight above 0, in the order the score adds them."""
        return [name for name in TERMS if self.weight(name) > 0]

    def without(self, name: str) -> AnswerModel:
        """A copy without the term ``name`` (its weight too); the other parts shared."""
        return dataclasses.replace(self, terms={k: v for k, v in self.terms.items() if k != name},
                                   weights={k: v for k, v in self.weights.items() if k != name})

    def replace(self, **changes: Any) -> AnswerModel:
        """A copy with ``changes`` (fields of this class), checked as a new one is."""
        return dataclasses.replace(self, **changes)
