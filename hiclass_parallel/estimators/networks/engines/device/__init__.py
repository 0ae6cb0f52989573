"""The device engine: the device-resident training step of the default text model (Triton; tested
under its interpreter).

- :mod:`._plan`: :class:`StepPlanner`, a plain callable that turns a batch into a
  :class:`StepPlan` of fixed-shape, padded index tensors on the host (no Triton, no device);
- :mod:`._step`: :class:`DeviceStep`, forward, backward and LazyAdam's row update of one step
  as a few Triton kernels reading the plan, the loss and the non-finite flag kept on the device
  (Triton is imported only when a step runs);
- :mod:`._kernels`: the kernels themselves (imports Triton at the top; imported only when a step
  runs);
- :mod:`._engine`: :class:`DeviceEngine`, the step inside skorch's loop (the engine
  :class:`~hiclass_parallel.estimators.networks._net.TreeNet` holds when the fit configuration
  chose ``step_engine="device"``).

``docs/gpu.md`` describes the design and what has (and has not) been measured.
"""

from ._engine import DeviceEngine
from ._plan import StepPlan, StepPlanner
from ._step import DeviceStep

__all__ = ["DeviceEngine", "DeviceStep", "StepPlan", "StepPlanner"]
