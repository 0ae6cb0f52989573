"""The device engine: the device step inside skorch's loop.

:class:`DeviceEngine` is the engine (:mod:`~hiclass_parallel.estimators.networks.engines`) the
configuration chooses on CUDA with Triton for the default linear text model:

- :meth:`DeviceEngine.refusal`: what the configuration asks before the net is built;
- :meth:`DeviceEngine.begin`: at the start of a training call, the built net's check
  (:func:`~._step.device_step_refusal`, and no callback reading gradients: the device step never
  writes ``.grad``); the net trains through torch with the reason when it refuses;
- :meth:`DeviceEngine.step`: one training batch, planned on the host from the loader's CPU batch
  (before anything goes to the device), stepped on the device; a batch it cannot take (not
  sparse) runs through torch and is counted;
- :meth:`DeviceEngine.epoch`: skorch's epoch loop for the device route, each next batch planned
  on a thread while the step before it is launched
  (:class:`~hiclass_parallel.estimators.networks._plan_ahead.PlanAhead`). Per-batch callbacks
  get ``loss=None`` (reading it would cost a synchronisation per step; ``y_pred`` is the hidden
  batch, on the device); the batch losses are read back once, at the end of the epoch, into the
  history (so the epoch's ``train_loss`` is what skorch reports), with the non-finite flag: a
  non-finite loss raises :class:`~hiclass_parallel.exceptions.NonFiniteLossError` then (no update
  is applied after it; the fit puts the model back as before the call).

The host's planning of a batch takes longer than the device's step on big trees, so the epoch
plans several batches at once, each on a thread of its own (:func:`plan_threads`; the planner
draws nothing and shares nothing, so the plans and the weights are those of one thread).

``HICLASS_PARALLEL_CUDA_GRAPH=1`` replays each plan shape's step as a CUDA graph (off by default:
its speed in a fit is not yet measured).
"""

from __future__ import annotations

import math
import os
from typing import Any

import scipy.sparse as sp
import torch
from skorch.dataset import get_len, unpack_data

from .....exceptions import NonFiniteLossError
from ..._data import split_target
from ..._optim import LazyAdam
from ..._plan_ahead import PlanAhead
from .._kernel_model import model_refusal, net_update_refusal, update_refusal
from .._protocol import FULL_TRAINING, Engine, EngineChoice, EngineRequest, report
from .._torch import torch_step
from . import _step
from ._step import DeviceStep

__all__ = ["DeviceEngine", "plan_threads"]

#: The most threads planning the device step's batches at once: enough to keep ahead of the
#: device on a few free cores, few enough to leave the training thread its share of the GIL.
MAX_PLAN_THREADS = 4


def _parts(batch: Any) -> tuple[Any, Any, Any] | None:
    """``(X, ids, sample weights)`` of a loader batch on the host, or ``None`` when ``X`` is not
    sparse (the device step's plans read sparse batches)."""
    Xi, yi = unpack_data(batch)
    if not ((isinstance(Xi, torch.Tensor) and Xi.layout == torch.sparse_csr) or sp.issparse(Xi)):
        return None
    return (Xi, *split_target(yi))


def plan_threads() -> int:
    """Threads planning the device step's next batches: ``HICLASS_PARALLEL_PLAN_THREADS`` when
    set, else one per core this process may use beyond the training thread's, at most
    :data:`MAX_PLAN_THREADS` (and at least one)."""
    value = os.environ.get("HICLASS_PARALLEL_PLAN_THREADS")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"HICLASS_PARALLEL_PLAN_THREADS must be a positive int, got {value!r}")
        return int(value)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_PLAN_THREADS, cores - 1))


class DeviceEngine(Engine):
    """The device step of the default linear text model on CUDA (see the module's docstring).

    Examples
    --------
    >>> from hiclass_parallel.estimators import LazyAdam, SparseMLP
    >>> from hiclass_parallel.losses import PathLocalCrossEntropy
    >>> from hiclass_parallel.estimators.networks.engines import EngineRequest
    >>> request = EngineRequest(True, SparseMLP, {}, PathLocalCrossEntropy, {}, LazyAdam, "cpu", True)
    >>> DeviceEngine.refusal(request)
    "the device is 'cpu', not CUDA"
    """

    name = "device"
    #: The training call's device step (built by :meth:`begin`; never pickled).
    device_step: DeviceStep | None = None
    #: The epoch's batches, each next one planned on a thread (while an epoch runs).
    _ahead: PlanAhead | None = None

    @classmethod
    def refusal(cls, request: EngineRequest) -> str | None:
        """Why the path-local steps of a fit cannot run on the device step, read before the net
        is built: the device, CUDA, Triton, the model (linear only), LazyAdam, sparse ``X`` (a
        stream's batches are checked one by one) and no reader of gradients (the device step
        never writes ``.grad``)."""
        if not request.path_local:
            return FULL_TRAINING
        if not str(request.device).startswith("cuda") or torch.device(request.device).type != "cuda":
            return f"the device is {request.device!r}, not CUDA"
        if not torch.cuda.is_available():
            return "CUDA is not available"
        if not _step.triton_available():
            return "Triton is not installed (or HICLASS_PARALLEL_TRITON=0)"
        reason = model_refusal(request.module, request.module_args, request.criterion, request.criterion_args)
        if reason:
            return reason
        if request.optimizer is not LazyAdam:
            return f"the optimizer is {request.optimizer.__name__}, not LazyAdam"
        if request.sparse_input is False:
            return "X is not sparse"
        return update_refusal(request.optimizer, request.net_class, request.named_callbacks())

    @classmethod
    def choice(cls, request: EngineRequest, refusals: dict[str, str]) -> EngineChoice:
        return EngineChoice("device", "the default linear text model on CUDA with Triton: host-planned steps, no "
                            "synchronisation per step", "device", "the device step updates the touched rows itself")

    def begin(self, net: Any) -> str | None:
        """Build the net's :class:`~._step.DeviceStep` for this training call, or return why the
        built net cannot train on it (:func:`~._step.device_step_refusal`, or a reader of
        gradients added since the configuration was resolved)."""
        self.device_step = None
        refusal = _step.device_step_refusal(net.module_, net.criterion_, getattr(net, "optimizer_", None)) \
            or net_update_refusal(net)
        if refusal is not None:
            return refusal
        self.device_step = DeviceStep(net.module_, net.criterion_, net.optimizer_, batch_rows=net.batch_size,
                                      softmax_sample=int(getattr(net, "softmax_sample", 0)))
        report(net, self.name, "device")
        return None

    def step(self, net: Any, batch: Any, **fit_params: Any) -> dict[str, Any]:
        """One training step of ``batch`` on the device. Its plan comes from the epoch's planning
        thread when it is ready (:meth:`PlanAhead.plan_for
        <hiclass_parallel.estimators.networks._plan_ahead.PlanAhead.plan_for>`), else is made
        here. A batch that is not sparse runs through torch and is counted (``step_fallbacks_``)."""
        net._set_training(True)
        parts = _parts(batch)
        if parts is None:
            net.step_fallbacks_ += 1
            net.step_fallback_reason_ = "the batch is not sparse"
            return torch_step(net, batch, training=True)
        step = self.device_step
        plan = self._ahead.plan_for(batch) if self._ahead is not None else None
        if plan is None:
            plan = step.planner(*parts, seed=step.draw_seed())
        else:
            step.planned_ahead += 1
        loss = step.step(plan, graph=os.environ.get("HICLASS_PARALLEL_CUDA_GRAPH", "0") == "1")
        return {"loss": loss.clone(), "y_pred": step._work(plan)["h"]}

    def epoch(self, net: Any, iterator: Any, prefix: str, step_fn: Any, **fit_params: Any) -> None:
        """skorch's ``run_single_epoch`` for training on the device step: each next batch planned
        on a thread (:class:`~hiclass_parallel.estimators.networks._plan_ahead.PlanAhead`) while the
        step before it is launched; the batch losses read back once, at the end (see the module's
        docstring)."""
        device_step = self.device_step

        def planner(batch: Any) -> Any:  # on the training thread; the job runs on the planning thread
            parts = _parts(batch)
            if parts is None:
                return None
            seed = device_step.draw_seed()  # here, in the batches' order: the job draws nothing
            return lambda: device_step.planner(*parts, seed=seed).pinned()

        with PlanAhead(iterator, planner, depth=plan_threads()) as ahead:
            self._ahead = ahead
            try:
                losses, rows = _epoch(net, ahead, prefix, step_fn, **fit_params)
            finally:
                self._ahead = None
        values = [float(v) for v in torch.stack([v.reshape(()) for v in losses]).tolist()] if losses else []
        _finish_epoch(net, prefix, rows, values, device_step)


def _epoch(net: Any, batches: Any, prefix: str, step_fn: Any, **fit_params: Any) -> tuple[list, list]:
    """skorch's loop over the epoch's batches, except that per-batch callbacks get no loss: the
    steps' losses (device tensors) and the history's batch rows, to fill at the end."""
    losses, rows = [], []
    for batch in batches:
        net.notify("on_batch_begin", batch=batch, training=True)
        step = step_fn(batch, **fit_params)
        rows.append(net.history[-1]["batches"][-1])
        losses.append(step["loss"])
        net.history.record_batch(prefix + "_batch_size",
                                 get_len(batch[0]) if isinstance(batch, (tuple, list)) else get_len(batch))
        net.notify("on_batch_end", batch=batch, training=True, **{**step, "loss": None})
    net.history.record(prefix + "_batch_count", len(rows))
    return losses, rows


def _finish_epoch(net: Any, prefix: str, rows: list, values: list, device_step: DeviceStep | None) -> None:
    """The batch losses into the history; the non-finite flag and losses checked."""
    for row, value in zip(rows, values):
        row[prefix + "_loss"] = value
    bad = device_step.read()[1] if device_step is not None else False
    first = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if bad or first is not None:
        batch = "?" if first is None else first + 1
        value = "non-finite" if first is None else values[first]
        raise NonFiniteLossError(
            f"the training loss became {value} at epoch {len(net.history)}, batch {batch} "
            f"(lr={getattr(net, 'lr', None)}): training diverged (the device step applied no update after it). "
            "Lower lr (e.g. by 10x), scale X, or check X for NaN/inf; the model was put back as it was before "
            "this call"
        )
