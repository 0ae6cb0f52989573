"""The device step inside skorch's loop: what :class:`~hiclass_parallel.estimators.networks._net.TreeNet`
calls when the configuration chose ``step_engine="device"``.

- :func:`device_train_begin`: at the start of a training call, the built net's check
  (:func:`~._step.device_step_refusal`, and no callback reading gradients: the device step never
  writes ``.grad``); the net falls back to torch with the reason when it refuses;
- :func:`device_train_step`: one training batch, planned on the host from the loader's CPU batch
  (before anything goes to the device), stepped on the device; ``None`` for a batch it cannot take
  (not sparse), which the net then runs through torch and counts;
- :func:`device_epoch`: skorch's epoch loop for the device route, each next batch planned on a
  thread while the step before it is launched
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
import weakref
from typing import Any

import torch

__all__ = ["device_epoch", "device_train_begin", "device_train_step", "plan_threads"]

#: The most threads planning the device step's batches at once: enough to keep ahead of the
#: device on a few free cores, few enough to leave the training thread its share of the GIL.
MAX_PLAN_THREADS = 4

#: The device step of each net (weakly held: it goes with the net, and is never pickled).
_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: The epoch's batches of each net, each next one planned on a thread (a PlanAhead).
_AHEAD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _parts(batch: Any) -> tuple[Any, Any, Any] | None:
    """``(X, ids, sample weights)`` of a loader batch on the host, or ``None`` when ``X`` is not
    sparse (the device step's plans read sparse batches)."""
    import scipy.sparse as sp
    from skorch.dataset import unpack_data

    from .._data import split_target

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


def device_train_begin(net: Any) -> str | None:
    """Build the net's :class:`~._step.DeviceStep` for this training call, or return why the built
    net cannot train on it (the net then trains through torch)."""
    from .._fused_step import fused_update_refusal
    from ._step import DeviceStep, device_step_refusal

    _STEPS.pop(net, None)
    refusal = device_step_refusal(net.module_, net.criterion_, getattr(net, "optimizer_", None)) \
        or fused_update_refusal(net)
    if refusal is None:
        _STEPS[net] = DeviceStep(net.module_, net.criterion_, net.optimizer_, batch_rows=net.batch_size,
                                 softmax_sample=int(getattr(net, "softmax_sample", 0)))
    return refusal


def device_train_step(net: Any, batch: Any) -> dict[str, Any] | None:
    """One training step of ``batch`` on the device, or ``None`` when the batch is not sparse.
    Its plan comes from the epoch's planning thread when it is ready (:meth:`PlanAhead.plan_for
    <hiclass_parallel.estimators.networks._plan_ahead.PlanAhead.plan_for>`), else is made here."""
    step = _STEPS.get(net)
    parts = _parts(batch)
    if step is None or parts is None:
        return None
    ahead = _AHEAD.get(net)
    plan = ahead.plan_for(batch) if ahead is not None else None
    if plan is None:
        plan = step.planner(*parts, seed=step.draw_seed())
    else:
        step.planned_ahead += 1
    loss = step.step(plan, graph=os.environ.get("HICLASS_PARALLEL_CUDA_GRAPH", "0") == "1")
    return {"loss": loss.clone(), "y_pred": step._work(plan)["h"]}


def device_epoch(net: Any, iterator: Any, prefix: str, step_fn: Any, **fit_params: Any) -> None:
    """skorch's ``run_single_epoch`` for training on the device step: each next batch planned on a
    thread (:class:`~hiclass_parallel.estimators.networks._plan_ahead.PlanAhead`) while the step
    before it is launched; the batch losses read back once, at the end (see the module's
    docstring)."""
    from .._plan_ahead import PlanAhead

    device_step = _STEPS.get(net)

    def planner(batch: Any) -> Any:  # on the training thread; the job runs on the planning thread
        parts = _parts(batch)
        if device_step is None or parts is None:
            return None
        seed = device_step.draw_seed()  # here, in the batches' order: the job draws nothing
        return lambda: device_step.planner(*parts, seed=seed).pinned()

    with PlanAhead(iterator, planner, depth=plan_threads()) as ahead:
        _AHEAD[net] = ahead
        try:
            losses, rows = _epoch(net, ahead, prefix, step_fn, **fit_params)
        finally:
            _AHEAD.pop(net, None)
    values = [float(v) for v in torch.stack([v.reshape(()) for v in losses]).tolist()] if losses else []
    _finish_epoch(net, prefix, rows, values)


def _epoch(net: Any, batches: Any, prefix: str, step_fn: Any, **fit_params: Any) -> tuple[list, list]:
    """skorch's loop over the epoch's batches, except that per-batch callbacks get no loss: the
    steps' losses (device tensors) and the history's batch rows, to fill at the end."""
    from skorch.dataset import get_len

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


def _finish_epoch(net: Any, prefix: str, rows: list, values: list) -> None:
    """The batch losses into the history; the non-finite flag and losses checked."""
    from ....exceptions import NonFiniteLossError

    for row, value in zip(rows, values):
        row[prefix + "_loss"] = value
    device_step = _STEPS.get(net)
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
