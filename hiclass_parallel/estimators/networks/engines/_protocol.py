"""The protocol every training engine follows, and what the configuration tells it.

An engine is how :class:`~hiclass_parallel.estimators.networks._net.TreeNet` runs its training
steps. It answers three questions, each in one method:

- :meth:`Engine.refusal` (a class method, before the net is built): why it cannot train a fit,
  read from an :class:`EngineRequest` (``None``: it can). The configuration
  (:func:`~hiclass_parallel.estimators.fitting._config.resolve_engines`) asks each engine of
  :data:`~hiclass_parallel.estimators.networks.engines.ENGINES` once, in that order of
  preference, and records the first that does not refuse, with :meth:`Engine.choice`'s reasons;
- :meth:`Engine.begin` (at the start of each training call, on the built net): sets the engine
  up and reports it on the net (``step_engine_``, ``update_engine_``, ...), or returns why the
  built net cannot train on it (the net then trains through torch with that reason);
- :meth:`Engine.step` (one training batch) and :meth:`Engine.epoch` (one training epoch; by
  default skorch's own loop, which calls the net's step, and so :meth:`Engine.step`).

Validation and prediction always run through torch; engines only train.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from skorch import NeuralNet

__all__ = ["FULL_TRAINING", "Engine", "EngineChoice", "EngineRequest", "report"]

#: The reason the fused and device engines refuse full (not path-local) training.
FULL_TRAINING = "full training runs skorch's step"


@dataclass(frozen=True)
class EngineRequest:
    """What the configuration knows of a fit before its net is built: what
    :meth:`Engine.refusal` and :meth:`Engine.choice` read.

    Parameters
    ----------
    path_local : bool
        The fit trains path-locally (the module's ``encode`` and ``scorer``).
    module : type
        The network class.
    module_args : dict
        The user's ``module__*`` arguments.
    criterion : type
        The criterion class.
    criterion_args : dict
        Its options (the package's and the user's ``criterion__*`` ones).
    optimizer : type
        The optimizer class.
    device : str or torch.device
        The estimator's ``device``.
    sparse_input : bool or None
        Whether ``X`` is sparse (``None``: a stream, whose batches the engine checks).
    callbacks : list, default=None
        The user's callbacks, as given (instances, classes or ``(name, callback)`` pairs).
    net_class : type, default=NeuralNet
        The net class that will train (an override of ``on_grad_computed`` reads gradients).

    Examples
    --------
    >>> from hiclass_parallel.estimators import LazyAdam, SparseMLP
    >>> from hiclass_parallel.losses import PathLocalCrossEntropy
    >>> request = EngineRequest(True, SparseMLP, {}, PathLocalCrossEntropy, {}, LazyAdam, "cpu", True)
    >>> request.device
    'cpu'
    """

    path_local: bool
    module: type
    module_args: dict[str, Any]
    criterion: type
    criterion_args: dict[str, Any]
    optimizer: type
    device: Any
    sparse_input: bool | None
    callbacks: Any = None
    net_class: type = field(default=NeuralNet)

    def named_callbacks(self) -> list[tuple[str, Any]]:
        """The user's callbacks as ``(name, callback or class)`` pairs, named as skorch names a
        bare one (its type's name)."""
        return [item if isinstance(item, tuple) else (type(item).__name__, item) for item in self.callbacks or []]


@dataclass(frozen=True)
class EngineChoice:
    """The engines of a fit's training steps, with the reason for each, as ``FitConfig`` records
    them (``step_engine``, ``step_engine_reason``, ``update_engine``, ``update_engine_reason``)."""

    step_engine: str
    step_reason: str
    update_engine: str
    update_reason: str

    def as_tuple(self) -> tuple[str, str, str, str]:
        """``(step_engine, why, update_engine, why)``."""
        return self.step_engine, self.step_reason, self.update_engine, self.update_reason


def report(net: Any, step: str, update: str, plan_ahead: bool = False, update_fallback: str | None = None) -> None:
    """What a training call runs on, reported on the net at its start: ``step_engine_``,
    ``update_engine_``, ``plan_ahead_`` and ``update_fallback_`` (why the update is not the one
    the configuration chose; ``None``: it is), and the counts of the call set to zero
    (``step_fallbacks_``, ``step_fallback_reason_``, ``update_fallbacks_``)."""
    net.step_engine_, net.update_engine_, net.plan_ahead_ = step, update, bool(plan_ahead)
    net.update_fallback_ = update_fallback
    net.step_fallbacks_, net.step_fallback_reason_, net.update_fallbacks_ = 0, None, 0


class Engine(ABC):
    """A training engine: one object per training call, held by the net (``net.engine_``).

    Subclasses set :attr:`name` (the value of ``FitConfig.step_engine``) and implement
    :meth:`refusal`, :meth:`choice` and :meth:`step`; :meth:`begin` and :meth:`epoch` have
    defaults (report the engine; skorch's epoch).
    """

    #: The engine's name, as ``FitConfig.step_engine`` and ``net_.step_engine_`` give it.
    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def refusal(cls, request: EngineRequest) -> str | None:
        """Why this engine cannot train the fit described by ``request``, or ``None`` when it can."""

    @classmethod
    @abstractmethod
    def choice(cls, request: EngineRequest, refusals: dict[str, str]) -> EngineChoice:
        """The engines and reasons the configuration records when it chooses this engine;
        ``refusals`` maps each engine asked before it to its refusal."""

    def begin(self, net: Any) -> str | None:
        """Set up for a training call of the built ``net`` and report on it (:func:`report`), or
        return why the built net cannot train on this engine (nothing reported)."""
        report(net, self.name, "optimizer")
        return None

    @abstractmethod
    def step(self, net: Any, batch: Any, **fit_params: Any) -> dict[str, Any]:
        """One training step of ``batch``: ``{"loss", "y_pred"}`` as skorch's
        ``train_step_single`` returns, gradients or the update applied."""

    def epoch(self, net: Any, iterator: Any, prefix: str, step_fn: Any, **fit_params: Any) -> None:
        """One training epoch over ``iterator``: skorch's own loop, which calls ``step_fn`` (the
        net's ``train_step``, and through it :meth:`step`) once per batch."""
        return NeuralNet.run_single_epoch(net, iterator, True, prefix, step_fn, **fit_params)

    def __getstate__(self) -> dict[str, Any]:
        # What an engine sets up for a training call (workspaces, threads, device steps) is
        # rebuilt by the next call's begin; a net pickled meanwhile (by a callback) keeps none.
        return {}
