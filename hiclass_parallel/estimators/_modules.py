"""Default torch modules for :class:`~hiclass_parallel.estimators.HierarchicalClassifier`.

Modules are passed to the classifier as classes, never instances, and built by skorch with
``module__*`` parameters. The classifier fills in ``n_features`` (from ``X``) and
``n_outputs`` (from the tree: :func:`hiclass_parallel.ops.groups.n_outputs`) when the
module's ``__init__`` accepts them. Nothing here is a lambda, so fitted models pickle.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["MLP"]


class MLP(nn.Module):
    """A multi-layer perceptron producing one score per output of the tree.

    Parameters
    ----------
    n_features : int
        Width of the input; set by the classifier from ``X``.
    n_outputs : int
        Width of the output: one score per class, plus one stop score per group when the
        classifier uses ``stop=True``; set by the classifier from the tree.
    hidden_units : int or sequence of int, default=256
        Width of the hidden layer, or of each hidden layer for a sequence. ``0`` or an
        empty sequence gives a linear model.
    dropout : float, default=0.0
        Dropout probability after each hidden layer (active only while training).
    activation : type of nn.Module, default=nn.ReLU
        Activation class (not an instance), built once per hidden layer.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.estimators import MLP
    >>> module = MLP(n_features=4, n_outputs=9, hidden_units=8)
    >>> module(torch.zeros(2, 4)).shape
    torch.Size([2, 9])
    """

    def __init__(
        self,
        n_features: int,
        n_outputs: int,
        hidden_units: int | Sequence[int] = 256,
        dropout: float = 0.0,
        activation: type[nn.Module] = nn.ReLU,
    ):
        super().__init__()
        # Named errors for what would otherwise build a different network silently (-1 gave a
        # linear model) or fail deep inside torch. The classifier's name is module__hidden_units.
        what = f"hidden_units={hidden_units!r} (module__hidden_units of the classifier)"
        if isinstance(hidden_units, bool) or not (
            hasattr(hidden_units, "__index__") or isinstance(hidden_units, Sequence)
        ):
            raise TypeError(f"{what}: must be an int width or a sequence of int widths")
        if hasattr(hidden_units, "__index__"):
            width = operator.index(hidden_units)
            if width < 0:
                raise ValueError(f"{what}: a width cannot be negative (0 means no hidden layer)")
            widths = [width] if width > 0 else []
        else:
            if any(isinstance(w, bool) or not hasattr(w, "__index__") for w in hidden_units):
                raise TypeError(f"{what}: every width must be an int")
            widths = [operator.index(w) for w in hidden_units]
            if any(w <= 0 for w in widths):
                raise ValueError(f"{what}: every width of a sequence must be positive")
        if isinstance(dropout, bool) or not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if isinstance(activation, nn.Module) or not isinstance(activation, type):
            raise TypeError(
                f"activation must be an nn.Module class such as nn.ReLU (not an instance), got {activation!r}"
            )
        layers: list[nn.Module] = []
        width_in = int(n_features)
        for width in widths:
            layers.append(nn.Linear(width_in, width))
            layers.append(activation())
            if dropout > 0:
                layers.append(nn.Dropout(float(dropout)))
            width_in = width
        layers.append(nn.Linear(width_in, int(n_outputs)))
        self.layers = nn.Sequential(*layers)
        self.n_features = int(n_features)
        self.n_outputs = int(n_outputs)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.layers(X)
