"""A text (or dict) report of hierarchical metrics, like scikit-learn's ``classification_report``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._hierarchical import (
    InputType,
    ZeroDivision,
    _check_zero_division,
    _divide,
    _path_counts,
    _weighted_mean,
    _weighted_sum,
)
from ._paths import Unknown, check_paths

__all__ = ["hierarchical_classification_report"]


def _level_table(true: np.ndarray, pred: np.ndarray, weight: np.ndarray | None, zero_division: Any):
    """Per depth: precision, recall, F1 and support, decomposing the micro hP / hR.

    At depth ``l``, a *hit* is a sample whose true and predicted paths hold the same node at
    ``l``; precision divides hits by the predictions reaching ``l``, recall by the true
    labels reaching ``l`` (the support). Summing hits and counts over depths gives micro hP/hR.
    """
    reach_true = true >= 0
    reach_pred = pred >= 0
    hit = reach_true & (true == pred)
    if weight is None:
        n_true, n_pred, n_hit = reach_true.sum(0), reach_pred.sum(0), hit.sum(0)
    else:
        n_true, n_pred, n_hit = weight @ reach_true, weight @ reach_pred, weight @ hit
    precision = _divide(n_hit, n_pred, zero_division, "Precision at a level no prediction reaches")
    recall = _divide(n_hit, n_true, zero_division, "Recall at a level no true label reaches")
    f1 = _divide(2 * n_hit, n_true + n_pred, zero_division, "F1 at a level no label reaches")
    return precision, recall, f1, n_true


def hierarchical_classification_report(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    level_names: Sequence[str] | None = None,
    pad_label: Any = None,
    input_type: InputType = "auto",
    path_sep: str | None = None,
    unknown: Unknown = "warn",
    sample_weight: Any = None,
    digits: int = 2,
    output_dict: bool = False,
    zero_division: ZeroDivision = "warn",
) -> str | dict[str, Any]:
    """Report hierarchical metrics per level and overall, like ``classification_report``.

    Rows:

    - ``level l``: precision (hits / predictions reaching depth ``l``), recall (hits /
      true labels reaching depth ``l``, i.e. :func:`level_accuracy_score`), F1, and support
      (true labels reaching depth ``l``). A hit is the same node at depth ``l`` in the true
      and predicted path. Summed over levels, these counts give the micro averages.
    - ``hierarchical micro avg`` / ``hierarchical macro avg``: hP, hR and hF1 with
      ``average="micro"`` and ``"macro"`` (see :func:`hierarchical_f1_score`); support is
      the number of samples.
    - ``exact path accuracy`` and ``mean tree distance`` over all samples, and
      ``mistake severity`` (mean LCA height above the true node, see
      :func:`mistake_severity`) over the mistakes, whose count is its support.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,) or (n_samples, n_columns)
        Labels (need ``tree``) or padded ancestral paths, as in
        :func:`hierarchical_f1_score`.
    tree : Tree, default=None
        The class tree.
    level_names : sequence of str, default=None
        Row names of the levels; default ``"level 0"``, ``"level 1"``, ...
    pad_label : object, default=None
        Padding value of label paths (``None``: ``""``, ``None``, ``-1`` or NaN).
    input_type : {"auto", "labels", "ids"}, default="auto"
        Whether values are labels or node ids.
    path_sep : str, default=None
        1-D string labels are path strings split on it (see :func:`hierarchical_f1_score`).
    unknown : {"warn", "ignore", "raise"}, default="warn"
        Classes the tree lacks: misses, their known ancestors hits (see
        :func:`hierarchical_f1_score`). A class below the tree's deepest level adds a level row.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights; supports become sums of weights.
    digits : int, default=2
        Digits of the floats in the text report (the dict is not rounded).
    output_dict : bool, default=False
        Return a dict instead of text.
    zero_division : {"warn", 0.0, 1.0, np.nan}, default="warn"
        Value of undefined ratios (levels no prediction reaches, no mistakes, ...).

    Returns
    -------
    str or dict
        The dict maps each level name and ``"hierarchical micro avg"`` /
        ``"hierarchical macro avg"`` to ``{"precision", "recall", "f1-score", "support"}``,
        and ``"exact path accuracy"``, ``"mean tree distance"``, ``"mistake severity"`` to
        ``{"score", "support"}``.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog"]}, "cat": None})
    >>> y_true = ["happy big dog", "small dog", "cat", "cat"]
    >>> y_pred = ["big dog", "happy big dog", "cat", "dog"]
    >>> print(hierarchical_classification_report(y_true, y_pred, tree))
                            precision    recall  f1-score   support
    <BLANKLINE>
                   level 0       0.75      0.75      0.75         4
                   level 1       0.50      0.50      0.50         2
                   level 2       0.00      0.00      0.00         1
    <BLANKLINE>
    hierarchical micro avg       0.57      0.57      0.57         4
    hierarchical macro avg       0.58      0.54      0.55         4
    <BLANKLINE>
       exact path accuracy                           0.25         4
        mean tree distance                           1.50         4
          mistake severity                           1.00         3
    >>> hierarchical_classification_report(y_true, y_pred, tree, output_dict=True)["level 1"]
    {'precision': 0.5, 'recall': 0.5, 'f1-score': 0.5, 'support': 2}
    """
    _check_zero_division(zero_division)
    true, pred, weight = check_paths(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type,
                                     sample_weight=sample_weight, path_sep=path_sep, unknown=unknown)
    n_levels = true.shape[1]
    if level_names is None:
        level_names = [f"level {i}" for i in range(n_levels)]
    elif len(level_names) != n_levels:
        raise ValueError(f"level_names has {len(level_names)} names for {n_levels} levels")
    level_names = [str(name) for name in level_names]

    precision, recall, f1, support = _level_table(true, pred, weight, zero_division)
    n_true, n_pred, n_common = _path_counts(true, pred)
    n_samples = true.shape[0] if weight is None else float(weight.sum())

    common, sum_true, sum_pred = (_weighted_sum(v, weight) for v in (n_common, n_true, n_pred))
    micro = (
        float(_divide(common, sum_pred, zero_division, "Hierarchical precision (no predicted nodes)")),
        float(_divide(common, sum_true, zero_division, "Hierarchical recall (no true nodes)")),
        float(_divide(2 * common, sum_true + sum_pred, zero_division, "Hierarchical F1 (no nodes)")),
    )
    macro = (
        _weighted_mean(_divide(n_common, n_pred, zero_division, "Hierarchical precision of empty predictions"), weight),
        _weighted_mean(_divide(n_common, n_true, zero_division, "Hierarchical recall of empty true paths"), weight),
        _weighted_mean(_divide(2 * n_common, n_true + n_pred, zero_division, "Hierarchical F1 of empty paths"), weight),
    )
    exact = (true == pred).all(axis=1)
    distance = (n_true + n_pred - 2 * n_common).astype(np.float64)
    mistakes = exact == 0
    w_mistakes = mistakes.astype(np.float64) if weight is None else weight * mistakes
    n_mistakes = float(w_mistakes.sum())
    if n_mistakes:
        severity = float(np.dot((n_true - n_common).astype(np.float64), w_mistakes) / n_mistakes)
    else:
        severity = float(_divide(0.0, 0.0, zero_division, "Mistake severity (there are no mistakes)"))
    if weight is None:
        n_mistakes = int(n_mistakes)

    def _num(value: Any) -> Any:
        value = value.item() if isinstance(value, np.generic) else value
        return int(value) if weight is None else float(value)

    report: dict[str, Any] = {}
    for i, name in enumerate(level_names):
        report[name] = {
            "precision": float(precision[i]),
            "recall": float(recall[i]),
            "f1-score": float(f1[i]),
            "support": _num(support[i]),
        }
    for name, (p, r, f) in (("hierarchical micro avg", micro), ("hierarchical macro avg", macro)):
        report[name] = {"precision": p, "recall": r, "f1-score": f, "support": _num(n_samples)}
    report["exact path accuracy"] = {"score": _weighted_mean(exact.astype(np.float64), weight), "support": _num(n_samples)}
    report["mean tree distance"] = {"score": _weighted_mean(distance, weight), "support": _num(n_samples)}
    report["mistake severity"] = {"score": severity, "support": n_mistakes}
    if output_dict:
        return report
    # A level that no true label and no prediction reaches has nothing to score (0 / 0 in every
    # column): the text leaves it out and says so; the dict keeps it (support 0).
    empty = [name for i, name in enumerate(level_names) if support[i] == 0 and not (pred[:, i] >= 0).any()]
    return _format(report, [name for name in level_names if name not in empty], digits, omitted=empty)


def _format(report: dict[str, Any], level_names: list[str], digits: int, omitted: list[str] = ()) -> str:
    averages = ["hierarchical micro avg", "hierarchical macro avg"]
    singles = ["exact path accuracy", "mean tree distance", "mistake severity"]
    width = max(len(name) for name in [*level_names, *averages, *singles])
    headers = ["precision", "recall", "f1-score", "support"]
    head_fmt = "{:>{width}s} " + " {:>9}" * len(headers)
    lines = [head_fmt.format("", *headers, width=width), ""]
    row_fmt = "{:>{width}s} " + " {:>9.{digits}f}" * 3 + " {:>9}\n"
    single_fmt = "{:>{width}s} " + " {:>9}" * 2 + " {:>9.{digits}f} {:>9}\n"

    def support(value: Any) -> str:
        return str(value) if isinstance(value, int) else f"{value:.{digits}f}"

    def rows(names: list[str]) -> str:
        out = ""
        for name in names:
            r = report[name]
            out += row_fmt.format(name, r["precision"], r["recall"], r["f1-score"], support(r["support"]), width=width, digits=digits)
        return out

    text = "\n".join(lines) + "\n" + rows(level_names)
    if omitted:
        shown = omitted[0] if len(omitted) == 1 else f"{omitted[0]} to {omitted[-1]}" if len(omitted) > 2 else " and ".join(omitted)
        text += f"({shown}: omitted, no true label and no prediction reaches {'it' if len(omitted) == 1 else 'them'})\n"
    text += "\n" + rows(averages) + "\n"
    for name in singles:
        r = report[name]
        text += single_fmt.format(name, "", "", r["score"], support(r["support"]), width=width, digits=digits)
    return text.rstrip("\n")
