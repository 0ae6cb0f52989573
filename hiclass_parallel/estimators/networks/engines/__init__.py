"""Training engines: how :class:`~hiclass_parallel.estimators.networks._net.TreeNet` runs its
training steps, one strategy per module, each following :class:`Engine` (``_protocol``).

- ``device`` (:class:`DeviceEngine`, ``device/``): on CUDA with Triton, the default linear
  text model's step as a few kernels reading a fixed-shape plan made on the host; LazyAdam's
  row update inside the step; no synchronisation per step (the epoch's losses are read once);
- ``fused`` (:class:`FusedEngine`, ``_fused``): on the CPU, the default text model's forward,
  backward and coalesced sparse gradients in one call of the C kernel
  (``networks/_path_step.c``), LazyAdam's update of the big layers' touched rows inside it
  unless something reads gradients; a batch it cannot take runs through torch and is counted;
- ``torch`` (:class:`TorchEngine`, ``_torch``): skorch's own step (autograd, the optimizer's
  step), for any module on any device; the reference the others are tested equal to.

:data:`ENGINES` lists them in the order of preference. The configuration
(:func:`~hiclass_parallel.estimators.fitting._config.resolve_engines`) asks each once
(:meth:`Engine.refusal`) and records the first that accepts, with its reasons
(``FitConfig.step_engine``, ``step_engine_reason``, ``update_engine``, ``update_engine_reason``);
:func:`start` gives the net, at the start of each training call, the engine it names, or the
torch engine when the built net refuses it (:meth:`Engine.begin`). The model both kernels serve
is read in one place (``_kernel_model``).
"""

from __future__ import annotations

from typing import Any

from ._fused import FusedEngine
from ._protocol import Engine, EngineChoice, EngineRequest
from ._torch import TorchEngine, torch_step
from .device import DeviceEngine

__all__ = ["ENGINES", "DeviceEngine", "Engine", "EngineChoice", "EngineRequest", "FusedEngine", "TorchEngine",
           "choose", "engine_named", "start", "torch_step"]

#: The engines in the order of preference: the first that does not refuse a fit trains it.
ENGINES: tuple[type[Engine], ...] = (DeviceEngine, FusedEngine, TorchEngine)


def choose(request: EngineRequest) -> EngineChoice:
    """The engines of a fit, with their reasons: each engine of :data:`ENGINES` is asked once,
    in order, and the first that does not refuse is chosen (the torch engine never refuses).

    Examples
    --------
    >>> from hiclass_parallel.estimators import MLP, LazyAdam
    >>> from hiclass_parallel.losses import PathLocalCrossEntropy
    >>> request = EngineRequest(True, MLP, {}, PathLocalCrossEntropy, {}, LazyAdam, "cpu", True)
    >>> choice = choose(request)
    >>> choice.step_engine, choice.step_reason
    ('torch', 'the module is MLP, not SparseMLP')
    """
    refusals: dict[str, str] = {}
    for engine in ENGINES:
        reason = engine.refusal(request)
        if reason is None:
            return engine.choice(request, refusals)
        refusals[engine.name] = reason
    raise AssertionError("the torch engine refused")  # pragma: no cover - TorchEngine.refusal is None


def engine_named(name: str) -> type[Engine]:
    """The engine class called ``name`` (``FitConfig.step_engine``).

    Examples
    --------
    >>> engine_named("fused").__name__
    'FusedEngine'
    """
    for engine in ENGINES:
        if engine.name == name:
            return engine
    raise ValueError(f"step_engine={name!r} is not an engine: choose one of {[e.name for e in ENGINES]}")


def start(net: Any) -> Engine:
    """The engine of a training call of the built ``net``: the one ``net.step_engine`` names
    (torch for full training), set up by its :meth:`Engine.begin`; when the built net refuses
    it, the torch engine, with the reason in ``net.step_fallback_reason_`` and
    ``net.update_fallback_``."""
    engine = engine_named(net.step_engine)() if net.path_local else TorchEngine()
    refusal = engine.begin(net)
    if refusal is None:
        return engine
    engine = TorchEngine()
    engine.begin(net)
    net.step_fallback_reason_ = net.update_fallback_ = refusal
    return engine
