"""Default torch modules for :class:`~hiclass_parallel.estimators.HierarchicalClassifier`.

Modules are passed to the classifier as classes, never instances, and built by skorch with
``module__*`` parameters. The classifier fills in ``n_features`` (from ``X``) and
``n_outputs`` (from the tree: :func:`hiclass_parallel.ops.groups.n_outputs`) when the
module's ``__init__`` accepts them. Nothing here is a lambda, so fitted models pickle.
"""

from __future__ import annotations

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
        if isinstance(hidden_units, (int,)) or hasattr(hidden_units, "__index__"):
            widths = [int(hidden_units)] if int(hidden_units) > 0 else []
        else:
            widths = [int(w) for w in hidden_units]
        if any(w <= 0 for w in widths):
            raise ValueError(f"hidden_units must be positive widths, got {hidden_units!r}")
        if not 0.0 <= float(dropout) < 1.0:
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
