"""The model the path-local kernels serve, and when their update may take the optimizer's place.

The fused C step and the device step were written for one model; both engines' refusals read
it here, from the classes and their arguments before the net is built, or from the built
module and criterion (:func:`built_model_refusal`, the same conditions and the same words):

- :func:`model_refusal`: :class:`~hiclass_parallel.estimators.SparseMLP` itself, linear
  (``activation`` ``None`` or ``nn.Identity``; with ``relu``, ``nn.ReLU`` too), without
  dropout, trained with :class:`~hiclass_parallel.losses.PathLocalCrossEntropy` averaged
  (``"mean"``);
- :func:`update_refusal`: the step may apply LazyAdam's update of the big layers itself only
  when the net's one optimizer is :class:`~hiclass_parallel.estimators.LazyAdam` itself and
  nothing hooks ``on_grad_computed``, the one place skorch lets code read or change gradients
  before the update (gradient clipping, gradient logging, the data-parallel all-reduce).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from skorch import NeuralNet
from skorch.callbacks import Callback
from torch import nn

from ....losses import PathLocalCrossEntropy
from .._modules import SparseMLP
from .._optim import LazyAdam

__all__ = ["built_model_refusal", "model_refusal", "net_update_refusal", "update_refusal"]


def model_refusal(module: type, module_args: dict[str, Any], criterion: type, criterion_args: dict[str, Any],
                  relu: bool = False) -> str | None:
    """Why the model is not the one the path-local kernels were written for, or ``None`` when it is.

    Read from the classes and their ``module__*`` / ``criterion__*`` arguments; ``relu``: the
    caller's kernel takes an ``nn.ReLU`` activation too (the fused step's does).

    Examples
    --------
    >>> from torch import nn
    >>> from hiclass_parallel.estimators import SparseMLP
    >>> from hiclass_parallel.losses import PathLocalCrossEntropy
    >>> model_refusal(SparseMLP, {}, PathLocalCrossEntropy, {}) is None
    True
    >>> model_refusal(SparseMLP, {"activation": nn.ReLU}, PathLocalCrossEntropy, {})
    'the module has an activation or dropout'
    """
    if module is not SparseMLP:
        return f"the module is {getattr(module, '__name__', module)}, not SparseMLP"
    defaults = {name: p.default for name, p in inspect.signature(SparseMLP.__init__).parameters.items()}
    args = {**defaults, **module_args}
    activations = (None, nn.Identity, nn.ReLU) if relu else (None, nn.Identity)
    if not any(args["activation"] is a for a in activations) or float(args["dropout"]) > 0 \
            or float(args["input_dropout"]) > 0:
        return "the module has an activation or dropout"
    reduction = criterion_args.get("reduction", "mean")
    if criterion is not PathLocalCrossEntropy or reduction != "mean":
        return f"the criterion is {criterion.__name__} (reduction {reduction!r})"
    return None


def built_model_refusal(module: nn.Module, criterion: nn.Module, relu: bool = False) -> str | None:
    """:func:`model_refusal` of a built module and criterion (their types and settings)."""
    args = {"activation": type(module.activation), "dropout": module.dropout.p,
            "input_dropout": module.input_dropout.p} if type(module) is SparseMLP else {}
    return model_refusal(type(module), args, type(criterion), {"reduction": getattr(criterion, "reduction", "?")},
                         relu=relu)


def update_refusal(optimizer: Any, net_class: type, callbacks: Iterable[tuple[str, Any]],
                   optimizers: Iterable[str] = ("optimizer",)) -> str | None:
    """Why a kernel's step cannot also apply the optimizer's update of the input and output
    layers, or ``None`` when it can.

    ``optimizer`` is the optimizer class, ``net_class`` the net's, ``callbacks`` ``(name,
    callback or class)`` pairs, ``optimizers`` the names of the net's optimizers.

    Examples
    --------
    >>> from skorch import NeuralNet
    >>> from hiclass_parallel.estimators import LazyAdam
    >>> update_refusal(LazyAdam, NeuralNet, []) is None
    True
    """
    if list(optimizers) != ["optimizer"]:
        return "the net has more than one optimizer"
    if optimizer is not LazyAdam:
        return f"the optimizer is {getattr(optimizer, '__name__', optimizer)}, not LazyAdam"
    if net_class.on_grad_computed is not NeuralNet.on_grad_computed:
        return f"{net_class.__name__} overrides on_grad_computed"
    for name, callback in callbacks:
        kind = callback if isinstance(callback, type) else type(callback)
        if kind.on_grad_computed is not Callback.on_grad_computed:
            return f"the callback {name!r} reads gradients (on_grad_computed)"
    return None


def net_update_refusal(net: Any) -> str | None:
    """:func:`update_refusal` of a built skorch net (its optimizers and callbacks as built)."""
    return update_refusal(type(getattr(net, "optimizer_", None)), type(net), getattr(net, "callbacks_", ()),
                          optimizers=getattr(net, "_optimizers", ["optimizer"]))
