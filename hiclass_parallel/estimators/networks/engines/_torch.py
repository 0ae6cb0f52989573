"""The torch engine: skorch's own loop, autograd and the optimizer's step.

It trains any module on any device, and every other engine is tested equal to it. Its step,
:func:`torch_step`, is skorch's ``train_step_single`` for full training, and for path-local
training the module's ``encode`` (the hidden representation), its ``scorer`` handed to the
criterion (which scores only the groups on each labelled path) and autograd. The net's
validation steps and the other engines' fallbacks run it too.
"""

from __future__ import annotations

from typing import Any

import torch
from skorch import NeuralNet
from skorch.dataset import unpack_data
from skorch.utils import to_tensor

from .._data import split_target
from ._protocol import FULL_TRAINING, Engine, EngineChoice, EngineRequest

__all__ = ["TorchEngine", "torch_step"]


def torch_step(net: Any, batch: Any, training: bool, **fit_params: Any) -> dict[str, Any]:
    """One step of ``batch`` through torch: ``{"loss", "y_pred"}``, the gradients computed when
    ``training``. Full training: skorch's own ``train_step_single`` or ``validation_step``.
    Path-local (``net.path_local``): ``y_pred`` is the hidden representation, and the module
    scores only the columns the loss asks for instead of producing all ``n_scores`` scores."""
    if not net.path_local:
        step = NeuralNet.train_step_single if training else NeuralNet.validation_step
        return step(net, batch, **fit_params)
    net._set_training(training)
    Xi, yi = unpack_data(batch)
    X, y = to_tensor(Xi, device=net.device), to_tensor(yi, device=net.device)
    y, weight = split_target(y)
    weighted = {} if weight is None else {"sample_weight": weight}
    with torch.set_grad_enabled(training):
        hidden = net.module_.encode(X)
        loss = net.criterion_(net.module_.scorer(hidden), y, **weighted)
    if training:
        loss.backward()
    return {"loss": loss, "y_pred": hidden}


class TorchEngine(Engine):
    """Training through torch: never refuses, and is chosen when every faster engine refuses.

    Examples
    --------
    >>> from hiclass_parallel.estimators import MLP, LazyAdam
    >>> from hiclass_parallel.losses import HierarchicalCrossEntropy
    >>> from hiclass_parallel.estimators.networks.engines import EngineRequest
    >>> request = EngineRequest(False, MLP, {}, HierarchicalCrossEntropy, {}, LazyAdam, "cpu", False)
    >>> TorchEngine.refusal(request) is None
    True
    >>> TorchEngine.choice(request, {}).step_reason
    "full training runs skorch's step"
    """

    name = "torch"

    @classmethod
    def refusal(cls, request: EngineRequest) -> str | None:
        return None

    @classmethod
    def choice(cls, request: EngineRequest, refusals: dict[str, str]) -> EngineChoice:
        """Why the fit trains through torch: full training, else the refusal of the engine
        written for the fit's device (the device step's on CUDA, the fused step's elsewhere)."""
        if not request.path_local:
            why = FULL_TRAINING
        elif str(request.device).startswith("cuda"):
            why = f"on CUDA the device step cannot run: {refusals['device']}"
        else:
            why = refusals["fused"]
        return EngineChoice("torch", why, "optimizer", "the step is not fused")

    def step(self, net: Any, batch: Any, **fit_params: Any) -> dict[str, Any]:
        return torch_step(net, batch, training=True, **fit_params)
