"""Plots of hierarchical metrics (matplotlib, the optional ``plot`` extra).

matplotlib is imported when a function is called, never when this module is imported.
Each function draws on ``ax`` if given (else on a new figure) and returns what it drew on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._hierarchical import InputType, level_accuracy_score, tree_distance

__all__ = ["plot_level_accuracy", "plot_tree_distance", "plot_hierarchical_summary"]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plotting needs matplotlib: pip install 'hiclass_parallel[plot]' (or pip install matplotlib)"
        ) from exc
    return plt


def _axes(ax: Any) -> Any:
    if ax is not None:
        return ax
    _, ax = _pyplot().subplots()
    return ax


def plot_level_accuracy(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    ax: Any = None,
    level_names: Sequence[str] | None = None,
    pad_label: Any = None,
    input_type: InputType = "auto",
    sample_weight: Any = None,
    annotate: bool = True,
) -> Any:
    """Bar chart of :func:`level_accuracy_score`: accuracy per depth, with its support.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,) or (n_samples, n_columns)
        Labels (need ``tree``) or padded ancestral paths.
    tree : Tree, default=None
        The class tree.
    ax : matplotlib Axes, default=None
        Where to draw; a new figure if None.
    level_names : sequence of str, default=None
        Tick labels of the levels; default ``"0"``, ``"1"``, ...
    pad_label, input_type, sample_weight
        As in :func:`level_accuracy_score`.
    annotate : bool, default=True
        Write ``n=<support>`` on each bar, rotated: inside the top of a tall bar, above a short one.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> ax = plot_level_accuracy(["small dog", "cat"], ["big dog", "cat"], tree)
    >>> [float(bar.get_height()) for bar in ax.patches]
    [1.0, 0.0]
    """
    acc, support = level_accuracy_score(
        y_true, y_pred, tree, pad_label=pad_label, input_type=input_type, sample_weight=sample_weight
    )
    levels = np.arange(acc.shape[0])
    if ax is None:  # a bar slot of at least ~0.35 inch, so deep trees (WordNet: 20 levels) stay legible
        _, ax = _pyplot().subplots(figsize=(max(6.4, 1.5 + 0.35 * levels.size), 4.8))
    names = [str(i) for i in levels] if level_names is None else [str(n) for n in level_names]
    heights = np.nan_to_num(acc, nan=0.0)
    bars = ax.bar(levels, heights, color="C0")
    ax.set_xticks(levels, names)
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("level (depth)")
    ax.set_ylabel("accuracy")
    ax.set_title("Accuracy per level" + (" (n = held-out samples reaching the level)" if annotate else ""))
    if annotate:
        # Vertical labels: horizontal ones ("n=16423") are wider than a bar and ran into their
        # neighbours on deep trees. Written inside the top of a bar tall enough to hold one (white
        # on the bar), else just above it, with a gap from the bar's edge either way.
        for bar, height, n in zip(bars, heights, support):
            label = f"n={int(n):,}" if float(n).is_integer() else f"n={float(n):.3g}"
            inside = height >= _INSIDE_MIN_HEIGHT
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, height), rotation=90, ha="center",
                        va="top" if inside else "bottom", color="white" if inside else "black",
                        fontsize="small", xytext=(0, -4 if inside else 4), textcoords="offset points")
    return ax


#: Bars at least this tall (in accuracy, of the 0-1.1 axis) hold their ``n=`` label inside:
#: "n=16,423" in a small font, rotated, spans about a fifth of a 4.8-inch figure's axis.
_INSIDE_MIN_HEIGHT = 0.3


def plot_tree_distance(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    ax: Any = None,
    pad_label: Any = None,
    input_type: InputType = "auto",
    density: bool = False,
) -> Any:
    """Histogram of :func:`tree_distance` (one bar per number of edges; 0 = exact).

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,) or (n_samples, n_columns)
        Labels (need ``tree``) or padded ancestral paths.
    tree : Tree, default=None
        The class tree.
    ax : matplotlib Axes, default=None
        Where to draw; a new figure if None.
    pad_label, input_type
        As in :func:`tree_distance`.
    density : bool, default=False
        Plot fractions of samples instead of counts.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> ax = plot_tree_distance(["small dog", "cat", "cat"], ["big dog", "cat", "dog"], tree)
    >>> [int(bar.get_height()) for bar in ax.patches]
    [1, 0, 2]
    """
    dist = tree_distance(y_true, y_pred, tree, pad_label=pad_label, input_type=input_type)
    counts = np.bincount(dist)
    heights = counts / counts.sum() if density else counts
    ax = _axes(ax)
    ax.bar(np.arange(counts.shape[0]), heights, color="C1", width=0.8)
    ax.set_xticks(np.arange(counts.shape[0]))
    ax.set_xlabel("tree distance (edges between true and predicted node)")
    ax.set_ylabel("fraction of samples" if density else "samples")
    ax.set_title(f"Tree distance (mean {dist.mean():.3g})")
    return ax


def plot_hierarchical_summary(
    y_true: Any,
    y_pred: Any,
    tree: Any = None,
    *,
    pad_label: Any = None,
    input_type: InputType = "auto",
    figsize: tuple[float, float] = (10.0, 4.0),
) -> Any:
    """One figure with :func:`plot_level_accuracy` and :func:`plot_tree_distance` side by side.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n_samples,) or (n_samples, n_columns)
        Labels (need ``tree``) or padded ancestral paths.
    tree : Tree, default=None
        The class tree.
    pad_label, input_type
        As in :func:`level_accuracy_score`.
    figsize : tuple of float, default=(10.0, 4.0)

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from hiclass_parallel import Tree
    >>> tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    >>> fig = plot_hierarchical_summary(["small dog", "cat"], ["big dog", "cat"], tree)
    >>> len(fig.axes)
    2
    """
    fig, (left, right) = _pyplot().subplots(1, 2, figsize=figsize)
    plot_level_accuracy(y_true, y_pred, tree, ax=left, pad_label=pad_label, input_type=input_type)
    plot_tree_distance(y_true, y_pred, tree, ax=right, pad_label=pad_label, input_type=input_type)
    fig.tight_layout()
    return fig
