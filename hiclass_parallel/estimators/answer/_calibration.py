"""Calibrating the probability of the predicted answer on rows held out while training.

A path-locally trained text model is overconfident: the probability of its best path is well
above how often it is right on the WordNet gloss benchmarks (``docs/calibration.md``). A single
temperature narrows that gap but cannot remove it (the gap is not the same at every
confidence), so the map fitted here is
beta calibration (Kull, Silva Filho and Flach, 2017): ``sigmoid(a log p - b log(1 - p) + c)``
with ``a, b >= 0``, a monotone map with three parameters that contains the identity
(``a = b = 1, c = 0``) and needs a few hundred rows, not thousands.

Where the held-out rows come from (:func:`plan_calibration`): ``fit`` holds out
``calibration_size`` rows (by default 5%, at most 1,000), trains on the others, and fits the map
on the held-out rows' answers. When training runs at least :data:`REJOIN_MIN_EPOCHS` epochs
(data sets of up to about 20,000 rows under the text model's epoch rule), the map is fitted
after all epochs but the last and the held-out rows join the last epoch: no row is lost, and
the map is at most a fifth of training out of date. With fewer epochs (bigger data sets) the
last epoch moves the model too much for a map fitted before it, so the held-out rows stay out
and the map is fitted on the final model, at the cost of at most 1,000 rows
(``docs/calibration.md``; measured in ``docs/performance.md``).

Only a text module (sparse input) lets them rejoin (:func:`rejoins`). Its optimizer moves only
the rows a batch touches, so a held-out row in the last epoch moves its own features' and
path's weights. A dense module's Adam moves every weight at every step: where it has fitted
its training rows (a training loss near zero), the unseen rows' gradients dwarf the ones its
moments were scaled by, each step of the last epoch moves every weight several times as far as
before, and the rejoining rows cost more accuracy than they bring; kept out, they cost little
against no calibration.

A held-out row is not a new document, though. A vectorizer fitted on every training row (a
``TfidfVectorizer`` in front of the classifier in a ``Pipeline``) gave the held-out rows
features that no row the model trained on has (much of their mass on the gloss benchmarks,
where a truly new document's unseen words are dropped by the vectorizer), and
their untrained embeddings make the held-out answers look nothing like the test answers. So
the held-out rows are shown to the model as a new document would be: without the features
no training row has, and rescaled to the norm every training row has, when they all have one
(:func:`held_out_view`).
"""

from __future__ import annotations

import dataclasses
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from ...exceptions import caller_stacklevel

from .._defaults import CALIBRATION_CLIP as CLIP
from .._defaults import CALIBRATION_MIN_AUTO_ROWS as MIN_AUTO_ROWS
from .._defaults import CALIBRATION_MIN_ROWS as MIN_ROWS
from .._defaults import CALIBRATION_REJOIN_EPOCHS as REJOIN_MIN_EPOCHS

__all__ = ["BetaCalibrator", "CalibrationPlan", "held_out_size", "plan_calibration", "rejoins", "held_out_view",
           "answer_correct", "effective_rows"]

#: ``calibration_size="auto"``: 5% of the rows, at most 1,000 (enough for three parameters;
#: beyond, rows held out cost accuracy and buy nothing: ``docs/calibration.md``).
AUTO_FRACTION, AUTO_MAX_ROWS = 0.05, 1000


@dataclasses.dataclass(frozen=True)
class BetaCalibrator:
    """The map ``p -> sigmoid(a log p - b log(1 - p) + c)`` from a model's probability of its
    answer to the probability that the answer is right.

    Parameters
    ----------
    a, b : float
        Non-negative slopes on ``log p`` and ``-log(1 - p)``: the map is non-decreasing in
        ``p``. ``a = b = 1``, ``c = 0`` is the identity.
    c : float
        Offset.
    n_rows : int
        Number of held-out rows it was fitted on.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel.estimators import BetaCalibrator
    >>> p = np.array([0.9, 0.9, 0.9, 0.9, 0.2, 0.2, 0.2, 0.2])
    >>> right = np.array([1, 1, 0, 0, 0, 0, 0, 1], dtype=bool)   # 50% at 0.9, 25% at 0.2
    >>> cal = BetaCalibrator.fit(p, right)
    >>> np.round(cal(np.array([0.9, 0.2])), 2).tolist()
    [0.5, 0.25]
    """

    a: float
    b: float
    c: float
    n_rows: int

    @staticmethod
    def _features(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = np.clip(np.asarray(p, dtype=np.float64), CLIP, 1.0 - CLIP)
        return np.log(p), -np.log1p(-p)  # z = a u + b v + c: increasing in p for a, b >= 0

    @classmethod
    def fit(cls, probability: np.ndarray, correct: np.ndarray, sample_weight: np.ndarray | None = None) -> BetaCalibrator:
        """The map of least log-loss from ``probability`` to ``correct`` (bools), by L-BFGS-B;
        each row's log-loss times its ``sample_weight`` (``None``: 1; a zero-weight row is left out)."""
        from scipy.optimize import minimize

        probability = np.asarray(probability, dtype=np.float64)
        correct = np.asarray(correct, dtype=np.float64)
        keep = np.isfinite(probability)
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=np.float64)
            keep &= sample_weight > 0
        w = None if sample_weight is None else sample_weight[keep]
        u, v = cls._features(probability[keep])
        t = correct[keep]

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            z = theta[0] * u + theta[1] * v + theta[2]
            # log(1 + e^z) - t z, and its gradient (sigmoid(z) - t) times the features.
            each, r = np.logaddexp(0.0, z) - t * z, expit(z) - t
            if w is not None:
                each, r = w * each, w * r
            return float(np.sum(each)), np.array([np.dot(r, u), np.dot(r, v), r.sum()])

        result = minimize(loss, np.array([1.0, 1.0, 0.0]), jac=True, method="L-BFGS-B",
                          bounds=[(0.0, 100.0), (0.0, 100.0), (-30.0, 30.0)])
        a, b, c = (float(x) for x in result.x)
        return cls(a=a, b=b, c=c, n_rows=int(keep.sum()))

    def __call__(self, probability: np.ndarray) -> np.ndarray:
        """The calibrated probabilities (float64, same shape); NaN stays NaN."""
        probability = np.asarray(probability, dtype=np.float64)
        u, v = self._features(probability)
        out = expit(self.a * u + self.b * v + self.c)
        return np.where(np.isnan(probability), np.nan, out)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (the no-pickle format saves them)."""
        return {"kind": "beta", **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, values: Any) -> BetaCalibrator:
        """The calibrator of :meth:`to_dict`'s values; anything else is a named error."""
        fields = {"a", "b", "c", "n_rows"}
        if not isinstance(values, dict) or values.get("kind") != "beta" or set(values) - {"kind"} != fields:
            raise ValueError(f"not a saved answer calibrator (expected kind 'beta' and {sorted(fields)}): {values!r}")
        numbers = {k: values[k] for k in fields}
        if not all(isinstance(x, Real) and not isinstance(x, bool) and np.isfinite(x) for x in numbers.values()):
            raise ValueError(f"a saved answer calibrator holds non-finite or non-numeric values: {values!r}")
        if numbers["a"] < 0 or numbers["b"] < 0:
            raise ValueError(f"a saved answer calibrator must have a, b >= 0 (a monotone map): {values!r}")
        return cls(a=float(numbers["a"]), b=float(numbers["b"]), c=float(numbers["c"]), n_rows=int(numbers["n_rows"]))


@dataclasses.dataclass(frozen=True)
class CalibrationPlan:
    """Which rows train the model (``fit_rows``), which calibrate it (``held_rows``), and
    whether those join the last epoch (``rejoin``: after all but the last, the map is fitted)."""

    fit_rows: np.ndarray
    held_rows: np.ndarray
    rejoin: bool


def effective_rows(sample_weight: np.ndarray | None, n_rows: int | None = None) -> float:
    """How many rows weights are worth: Kish's effective sample size ``(sum w)^2 / sum w^2``.

    Every minimum on rows (held out to calibrate, to choose the prototypes' weight, to fit
    the flat term) counts this, not the rows: 40 rows of weight 1 among 2,000 of weight 0
    are 40 rows, and one row of weight 1,000 beside 99 of weight 1 is about 1.2. Equal
    weights give the number of rows; ``sample_weight=None`` gives ``n_rows``.

    Examples
    --------
    >>> effective_rows(None, 120), effective_rows(np.full(120, 3.0))
    (120.0, 120.0)
    >>> effective_rows(np.r_[np.ones(40), np.zeros(2000)])
    40.0
    >>> round(effective_rows(np.r_[1000.0, np.ones(99)]), 1)
    1.2
    """
    if sample_weight is None:
        return float(n_rows or 0)
    w = np.asarray(sample_weight, dtype=np.float64)
    squares = float(np.dot(w, w))
    return float(w.sum()) ** 2 / squares if squares > 0 else 0.0


def held_out_size(size: Any, n_rows: int) -> int:
    """Rows ``calibration_size`` holds out of ``n_rows``: ``"auto"`` is 5% of them, at most
    1,000; a float in (0, 1) a fraction; an int a number of rows."""
    if isinstance(size, str):  # "auto", the one string the parameter takes
        return min(int(n_rows * AUTO_FRACTION), AUTO_MAX_ROWS)
    if isinstance(size, Integral):
        return int(size)
    return int(n_rows * float(size))


def rejoins(max_epochs: int, sparse_module: bool) -> bool:
    """Whether the held-out rows join the last of ``max_epochs`` epochs: for a text module
    (``sparse_module``, one that takes sparse input) that trains at least
    :data:`REJOIN_MIN_EPOCHS` epochs; the module docstring says why not otherwise.

    Examples
    --------
    >>> rejoins(7, sparse_module=True), rejoins(3, sparse_module=True), rejoins(10, sparse_module=False)
    (True, False, False)
    """
    return bool(sparse_module) and max_epochs >= REJOIN_MIN_EPOCHS


def plan_calibration(estimator: Any, n_rows: int | None, max_epochs: int, epochs: int | None, streaming: bool,
                     seed: int | None, *, sparse_module: bool,
                     sample_weight: np.ndarray | None = None) -> CalibrationPlan | None:
    """The held-out rows of this fit, or ``None`` when it does not calibrate.

    ``calibration="auto"`` calibrates a ``fit`` (not ``partial_fit``) of arrays with no
    validation split of skorch's (``train_split``, ``early_stopping``: it would draw its own
    rows from the ones left) and at least :data:`MIN_AUTO_ROWS` held-out rows; ``"beta"`` in any
    other case is a named error, ``None`` never calibrates.

    With ``sample_weight`` (the rows' weights, which the calibrator weighs its rows by) the
    minimum counts what the held-out rows' weights are worth (:func:`effective_rows`), not
    the rows: where too little weight is held out, ``"auto"`` does not calibrate and says
    so (a ``UserWarning``), and ``"beta"`` is a named error.
    """
    mode = estimator.calibration
    if mode is None or not type(estimator)._calibrates:
        if mode == "beta":
            raise ValueError(f"calibration='beta' is not available for {type(estimator).__name__} "
                             "(the probability of a set of labels is not one answer's); use calibration=None")
        return None
    size = estimator.calibration_size
    n_held = 0 if n_rows is None else held_out_size(size, n_rows)
    reasons = []
    if epochs is not None:
        reasons.append("partial_fit trains one epoch on the rows it is given (fit calibrates)")
    if streaming:
        reasons.append("a torch Dataset is streamed, not split (pass arrays to calibrate)")
    if estimator.train_split is not None or estimator.early_stopping:
        reasons.append("a validation split (train_split or early_stopping) is set")
    minimum = MIN_AUTO_ROWS if mode == "auto" else MIN_ROWS
    if not reasons and n_held < minimum:
        reasons.append(f"calibration_size={size!r} holds out {n_held} of {n_rows} rows, fewer than {minimum}")
    if not reasons and n_held >= n_rows:
        reasons.append(f"calibration_size={size!r} holds out all {n_rows} rows, leaving none to train on")
    if reasons:
        if mode == "beta":
            raise ValueError(f"calibration='beta' cannot calibrate this fit: {'; '.join(reasons)}. "
                             "Use calibration='auto' (calibrates when it can) or None")
        return None
    from sklearn.utils import check_random_state

    order = check_random_state(seed).permutation(n_rows)
    plan = CalibrationPlan(fit_rows=np.sort(order[n_held:]), held_rows=np.sort(order[:n_held]),
                           rejoin=rejoins(max_epochs, sparse_module))
    if sample_weight is not None:
        worth = effective_rows(np.asarray(sample_weight)[plan.held_rows])
        if worth < minimum:
            # Rows of weight 0 tell the calibrator nothing: a map fitted on a handful of
            # weighted rows would be confidently wrong on every row.
            why = (f"the {n_held} held-out rows' sample_weight is worth {worth:.1f} rows (its effective sample size, "
                   f"(sum w)^2 / sum w^2), fewer than {minimum}")
            if mode == "beta":
                raise ValueError(f"calibration='beta' cannot calibrate this fit: {why}. Hold out more rows "
                                 "(calibration_size), or use calibration='auto' or None")
            warnings.warn(f"calibration='auto' does not calibrate this fit: {why}; predict_confidence gives the "
                          "model's own probability. Hold out more rows (calibration_size), or set calibration=None",
                          UserWarning, stacklevel=caller_stacklevel())
            return None
    return plan


def _unit_norm(X: sp.csr_matrix) -> str | None:
    """``"l2"`` or ``"l1"`` when every non-empty row of ``X`` has that norm 1 (a vectorizer's
    normalisation), else ``None``."""
    lengths = np.diff(X.indptr)
    if not lengths.any():
        return None
    rows = np.repeat(np.arange(X.shape[0]), lengths)
    for norm, values in (("l2", np.square(X.data, dtype=np.float64)), ("l1", np.abs(X.data, dtype=np.float64))):
        total = np.bincount(rows, weights=values, minlength=X.shape[0])[lengths > 0]
        if np.allclose(total, 1.0, rtol=0, atol=1e-3):
            return norm
    return None


def held_out_view(X: Any, fit_rows: np.ndarray, held_rows: np.ndarray) -> Any:
    """The held-out rows as the model would see new documents: sparse ``X`` loses the features
    no fit row has, and is rescaled to unit norm when every row of ``X`` has one (l2 or l1).

    Dense ``X`` (embeddings, numeric features) is returned as it is: every feature is trained.
    """
    if not sp.issparse(X):
        import torch

        return X[torch.as_tensor(held_rows, device=X.device)] if isinstance(X, torch.Tensor) else X[held_rows]
    X = sp.csr_matrix(X)
    seen = np.zeros(X.shape[1], dtype=bool)
    fitted = X[fit_rows]
    seen[fitted.indices[fitted.data != 0]] = True
    held = X[held_rows].copy()
    held.data[~seen[held.indices]] = 0
    held.eliminate_zeros()
    norm = _unit_norm(X)
    if norm is not None:
        from sklearn.preprocessing import normalize

        held = normalize(held, norm=norm, copy=False)
    return held


def answer_correct(paths: np.ndarray, true_ids: np.ndarray, semantics: str) -> np.ndarray:
    """Whether each decoded path (node ids, padded with -1) is right for its label's node id.

    ``"terminal"``: the path ends at the label. ``"partial"``: the label lies on the path (a
    label above the leaves says only that the class is somewhere below it).
    """
    depth = (paths >= 0).sum(axis=1) - 1
    if semantics == "terminal":
        return paths[np.arange(paths.shape[0]), depth] == true_ids
    return (paths == true_ids[:, None]).any(axis=1)
