"""The joint fit of the re-ranking weights: a conditional logit over each row's candidates.

A candidate answer ``c`` of a row ``x`` scores

    log p(c | x) + sum_i w_i * term_i(x, c)

where ``log p`` is the network's log-probability of the path and each term is one re-ranking
term's score of the candidate (:mod:`._terms`). :func:`fit_term_weights` fits every ``w_i``
together, with a scale ``a`` on ``log p`` (the inverse of a temperature), by maximising the
likelihood of the right answer among each held-out row's candidates,

    P(right | x) = softmax_c(a * log p(c | x) + sum_i b_i * term_i(x, c)),   w_i = b_i / a,

a multinomial logit over the candidates (McFadden's conditional logit). The scores enter
linearly, so the negative log-likelihood is convex; an L2 penalty pulls each ``b_i`` towards 0
(:data:`PENALTY`, on the term's score standardised over the candidates, so that one number
serves a cosine in ``[0, 1]`` and a margin or log-likelihood of any spread), and L-BFGS-B
solves it with ``a > 0`` and ``b_i >= 0``: every term is built so that a higher score means a
likelier answer, and a term that points the other way is dropped, not turned around.

A term earns its place by its held-out likelihood: the fit is repeated without it (the others
refitted), and a term whose gain is under :data:`MIN_GAIN` nats is dropped (weight 0, never
scored at predict), the weakest first, until every kept term clears the margin. The margin is
the likelihood-ratio test of one parameter at the 5% level (twice the gain against the 3.84 of
a chi-squared variable of one degree of freedom), so a term of random scores is kept about one
time in twenty, and then with a weight near 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from .._defaults import JOINT_MIN_ROWS as MIN_ROWS
from .._defaults import MIN_GAIN, PENALTY
from ._calibration import effective_rows

__all__ = ["MIN_GAIN", "MIN_ROWS", "PENALTY", "TermWeights", "fit_term_weights"]


@dataclasses.dataclass
class TermWeights:
    """The fitted weights of the re-ranking terms.

    Attributes
    ----------
    scale : float
        ``a``, the coefficient of ``log p`` in the conditional logit (the inverse of a
        temperature): ``softmax(scale * (log p + sum_i w_i * term_i))`` is the fitted
        distribution over the candidates.
    weights : dict of str to float
        Each term's weight ``w_i = b_i / a`` in nats per unit of its score; 0: dropped.
    gains : dict of str to float
        Each term's held-out log-likelihood gain in nats (all rows together): the fit with it
        against the fit without it. A term dropped at once has the gain it failed with.
    rows : float
        The usable rows the weights were fitted on, as their weights count them.
    log_likelihood : float
        The held-out log-likelihood of the right answers under the kept terms, in nats per row.
    """

    scale: float
    weights: dict[str, float]
    gains: dict[str, float]
    rows: float
    log_likelihood: float

    def kept(self) -> list[str]:
        """The terms with a weight above 0."""
        return [name for name, weight in self.weights.items() if weight > 0]

    def describe(self, name: str) -> str:
        """One term's record: its weight and gain, and whether it was kept."""
        gain, weight = self.gains.get(name, 0.0), self.weights.get(name, 0.0)
        if weight > 0:
            return (f"{name}: weight {weight:.3g} learnt on {self.rows:.0f} held-out rows, gain {gain:.1f} nats "
                    f"({gain / max(self.rows, 1.0):.4f} per row)")
        return (f"{name}: dropped (held-out gain {gain:.1f} nats on {self.rows:.0f} rows, under the "
                f"{MIN_GAIN} of a likelihood-ratio test at 5%)")


def fit_term_weights(log_prob: np.ndarray, scores: Mapping[str, np.ndarray], correct: np.ndarray,
                     sample_weight: np.ndarray | None = None, penalty: float = PENALTY,
                     min_gain: float = MIN_GAIN) -> TermWeights | None:
    """The re-ranking weights fitted jointly on labelled held-out rows (the module docstring).

    Parameters
    ----------
    log_prob : ndarray of shape (n_rows, k)
        The network's log-probability of each row's ``k`` candidate answers; ``-inf`` (or NaN)
        marks a candidate that is no answer (a pad).
    scores : mapping of str to ndarray of shape (n_rows, k)
        Each term's score of each candidate (higher: likelier).
    correct : ndarray of bool of shape (n_rows, k)
        Which candidate is the right answer (the first, where several are).
    sample_weight : ndarray of shape (n_rows,), default=None
        Each row's weight in the likelihood (``None``: 1).
    penalty : float, default=PENALTY
    min_gain : float, default=MIN_GAIN

    Returns
    -------
    TermWeights or None
        ``None`` with fewer than :data:`MIN_ROWS` usable rows.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> lp = np.log(rng.dirichlet(np.ones(8), size=600))
    >>> useful, noise = rng.random((600, 8)), rng.random((600, 8))
    >>> right = np.argmax(lp + 4.0 * useful + rng.gumbel(size=(600, 8)), axis=1)
    >>> fitted = fit_term_weights(lp, {"useful": useful, "noise": noise}, np.arange(8) == right[:, None])
    >>> 3.0 < fitted.weights["useful"] < 5.0, fitted.weights["noise"]
    (True, 0.0)
    """
    from scipy.optimize import minimize
    from scipy.special import logsumexp, softmax


    log_prob = np.asarray(log_prob, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    if correct.shape != log_prob.shape:
        raise ValueError(f"correct must be of log_prob's shape {log_prob.shape}, got {correct.shape}")
    for name, score in scores.items():
        if np.shape(score) != log_prob.shape:
            raise ValueError(f"the scores of term {name!r} must be of log_prob's shape {log_prob.shape}, "
                             f"got {np.shape(score)}")
    valid = np.isfinite(log_prob)
    rows = (correct & valid).any(axis=1)
    if sample_weight is not None:
        rows &= np.asarray(sample_weight) > 0
    w = np.ones(int(rows.sum())) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]
    n_rows = effective_rows(None if sample_weight is None else w, int(rows.sum()))
    if n_rows < MIN_ROWS:
        return None
    lp = np.where(valid, log_prob, 0.0)[rows]
    invalid = ~valid[rows]
    right = (correct & valid)[rows]
    right = right & (np.cumsum(right, axis=1) == 1)  # one right candidate per row
    names = list(scores)
    spread, standard = {}, []
    for name in names:  # each term standardised over the usable rows' real candidates
        s = np.where(invalid, 0.0, np.nan_to_num(np.asarray(scores[name], dtype=np.float64)[rows]))
        std = float(s[~invalid].std()) if (~invalid).any() else 0.0
        spread[name] = std
        standard.append(s / std if std > 0 else np.zeros_like(s))

    def fit(use: list[int]) -> tuple[np.ndarray, float]:
        """``(theta, log-likelihood)`` of the terms ``use`` (indices into ``names``)."""
        S = [standard[i] for i in use]

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            z = theta[0] * lp + sum(b * s for b, s in zip(theta[1:], S))
            z[invalid] = -np.inf
            p = softmax(z, axis=1)
            ll = (w * (z[right] - logsumexp(z, axis=1))).sum()
            grad = [-(w * (lp[right] - (p * lp).sum(axis=1))).sum()]
            grad += [-(w * (s[right] - (p * s).sum(axis=1))).sum() + penalty * b for b, s in zip(theta[1:], S)]
            return float(-ll + 0.5 * penalty * np.square(theta[1:]).sum()), np.asarray(grad)

        start = np.r_[1.0, np.zeros(len(use))]
        result = minimize(objective, start, jac=True, method="L-BFGS-B",
                          bounds=[(1e-3, None)] + [(0.0, None)] * len(use))
        theta = result.x
        z = theta[0] * lp + sum(b * s for b, s in zip(theta[1:], S))
        z[invalid] = -np.inf
        return theta, float((w * (z[right] - logsumexp(z, axis=1))).sum())

    use = [i for i, name in enumerate(names) if spread[name] > 0]
    gains = {name: 0.0 for name in names}
    theta, ll = fit(use)
    while use:  # backward elimination: the weakest term under the margin goes, the rest refitted
        without = {i: fit([j for j in use if j != i])[1] for i in use}
        for i in use:
            gains[names[i]] = ll - without[i]
        weakest = min(use, key=lambda i: gains[names[i]])
        if gains[names[weakest]] >= min_gain:
            break
        use.remove(weakest)
        theta, ll = fit(use)
    weights = {name: 0.0 for name in names}
    for b, i in zip(theta[1:], use):
        weights[names[i]] = float(b / spread[names[i]] / theta[0])
    return TermWeights(scale=float(theta[0]), weights=weights, gains=gains, rows=float(n_rows),
                       log_likelihood=ll / float(w.sum()))
