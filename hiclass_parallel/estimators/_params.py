"""Who owns which parameter of :class:`HierarchicalClassifier`, and how they reach the skorch net.

The estimator owns every parameter scikit-learn sees: those of its ``__init__`` and skorch's
prefixed ones (``module__*``, ``optimizer__*``...), given as ``**kwargs`` and kept as
attributes of the same name, as skorch's own nets keep them. The net is built from them
(:func:`~._build.net_params`): the parameters both signatures share are handed over
unchanged (:func:`net_param_names`, read from the signatures, never listed by hand), the
prefixed ones pass through as they are, and the rest (module and optimizer defaults, early
stopping, warm starts) are resolved by the estimator.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["NetParamsMixin", "SKORCH_PREFIXES", "check_kwargs", "net_param_names"]

#: Prefixes of the skorch parameters that pass through to the net (given as ``**kwargs``).
SKORCH_PREFIXES = ("module__", "optimizer__", "criterion__", "iterator_train__", "iterator_valid__", "callbacks__")

#: Parameters both signatures have that the estimator resolves before the net sees them: the
#: module and optimizer defaults, early stopping's split and callbacks, and warm starts (the
#: estimator continues its fitted ``net_``).
RESOLVED = frozenset({"module", "optimizer", "train_split", "callbacks", "warm_start"})


def _init_params(cls: type) -> list[str]:
    return [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "args", "kwargs")]


@functools.cache
def net_param_names(estimator_class: type) -> tuple[str, ...]:
    """The parameters an estimator shares with skorch's ``NeuralNet`` and hands over unchanged.

    For :class:`HierarchicalClassifier`: ``lr``, ``max_epochs``, ``batch_size``, ``verbose``
    and ``device``.
    """
    from skorch import NeuralNet

    shared = set(_init_params(NeuralNet)) - RESOLVED
    return tuple(name for name in _init_params(estimator_class) if name in shared)


def check_kwargs(params: dict[str, Any], estimator: Any) -> None:
    """Unknown unprefixed parameter names get a hint at the prefix they probably need."""
    known = set(_init_params(type(estimator)))
    for key in params:
        if key in known or key.startswith(SKORCH_PREFIXES):
            continue
        hint = "" if "__" in key else f" (did you mean module__{key}?)"
        raise ValueError(
            f"Invalid parameter {key!r} for estimator {type(estimator).__name__}: unprefixed parameters are "
            f"those of __init__, prefixed ones start with one of {', '.join(SKORCH_PREFIXES)}{hint}"
        )


class NetParamsMixin:
    """``get_params``/``set_params`` with skorch's prefixed parameters, and their way to the net."""

    def _get_param_names(self) -> list[str]:
        # The signature's parameters plus the prefixed skorch parameters given as kwargs.
        names = set(super()._get_param_names())
        names.update(k for k in vars(self) if k.startswith(SKORCH_PREFIXES))
        return sorted(names)

    def set_params(self, **params: Any) -> Any:
        """Set parameters, including new prefixed skorch ones (``module__hidden_units=...``).

        Returns
        -------
        self : estimator instance
        """
        prefixed = {k: v for k, v in params.items() if k.startswith(SKORCH_PREFIXES)}
        others = {k: v for k, v in params.items() if k not in prefixed}
        check_kwargs(others, self)
        vars(self).update(prefixed)
        if others:
            super().set_params(**others)
        return self

    def _skorch_kwargs(self, prefix: str | None = None) -> dict[str, Any]:
        kwargs = {k: v for k, v in vars(self).items() if k.startswith(SKORCH_PREFIXES)}
        if prefix is not None:
            kwargs = {k[len(prefix):]: v for k, v in kwargs.items() if k.startswith(prefix)}
        return kwargs
