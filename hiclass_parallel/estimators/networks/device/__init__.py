"""The device-resident training step of the default text model (Triton; tested under its interpreter).

- :mod:`._plan`: :class:`StepPlanner`, a plain callable that turns a batch into a
  :class:`StepPlan` of fixed-shape, padded index tensors on the host (no Triton, no device);
- :mod:`._step`: :class:`DeviceStep`, forward, backward and LazyAdam's row update of one step
  as a few Triton kernels reading the plan, the loss and the non-finite flag kept on the device
  (Triton is imported only when a step runs);
- :mod:`._kernels`: the kernels themselves (imports Triton at the top; never imported by the
  package itself).

``docs/gpu.md`` describes the design and what has (and has not) been measured.
"""

from ._plan import StepPlan, StepPlanner

__all__ = ["StepPlan", "StepPlanner"]
