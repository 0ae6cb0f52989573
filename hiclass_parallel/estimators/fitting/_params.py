"""Who owns which parameter of :class:`HierarchicalClassifier`, and how they reach the skorch net.

The estimator owns every parameter scikit-learn sees: those of its ``__init__`` and skorch's
prefixed ones (``module__*``, ``optimizer__*``...), given as ``**kwargs`` and kept as
attributes of the same name, as skorch's own nets keep them. That is the one store. The net
is built from it (:func:`~._build.net_params`): the parameters both signatures share are
handed over unchanged (:func:`net_param_names`, read from the signatures, never listed by
hand), the prefixed ones pass through as they are, and the rest (module and optimizer
defaults, early stopping, warm starts) are resolved by the estimator.

A parameter changed after fit never touches the fitted net at once (``set_params`` only sets
it). The next ``fit`` builds a new net from the store. Continuing (``partial_fit``,
``warm_start``) asks :func:`changed_since_built` which parameters changed since the net was
built (the store against itself when the net was attached by :func:`attach_net`, never
against the net's own copies) and sorts them: those skorch applies to a trained net go
through skorch (``set_params``), those the net is built from cannot apply and are named in a
warning.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any

__all__ = [
    "LOADER_PREFIXES",
    "SKORCH_PREFIXES",
    "NetParamsMixin",
    "attach_net",
    "changed_since_built",
    "check_kwargs",
    "mark_applied",
    "net_param_names",
]

#: Prefixes of the skorch parameters that pass through to the net (given as ``**kwargs``).
SKORCH_PREFIXES = ("module__", "optimizer__", "criterion__", "iterator_train__", "iterator_valid__", "callbacks__")

#: Parameters both signatures have that the estimator resolves before the net sees them: the
#: module and optimizer defaults, early stopping's split and callbacks, and warm starts (the
#: estimator continues its fitted ``net_``).
RESOLVED = frozenset({"module", "optimizer", "train_split", "callbacks", "warm_start"})

#: Parameters the built network, its optimizer or its training loop are made of: a trained net
#: cannot take a change (a new module, optimizer class, device or callback list is a new
#: net), so continuing ignores it and says so. ``module__*`` parameters too, and the sampled
#: softmax of wide groups (resolved into the configuration the net was built from).
BUILT = frozenset({"module", "optimizer", "device", "callbacks", "early_stopping", "train_split",
                   "validation_fraction", "n_iter_no_change", "tol", "softmax_sample"})

#: Prefixes of the parameters a trained net takes through skorch: ``optimizer__*`` (set on the
#: optimizer), ``criterion__*`` (the criterion and optimizer re-initialised), ``callbacks__*``
#: (set on the callbacks) and the loaders' (read at every fit).
LIVE_PREFIXES = ("optimizer__", "criterion__", "callbacks__", "iterator_train__", "iterator_valid__")

#: The loaders' prefixes: skorch's ``set_params`` refuses them on an initialised net (it finds
#: nothing to re-initialise), though its loaders read them at every fit.
LOADER_PREFIXES = ("iterator_train__", "iterator_valid__")


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


def attach_net(estimator: Any, net: Any) -> None:
    """Make ``net`` the estimator's ``net_``, built from its parameters as they are now."""
    estimator.net_ = net
    estimator._net_params_ = estimator.get_params(deep=False)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        with warnings.catch_warnings():  # scipy warns that == on sparse matrices is slow
            warnings.simplefilter("ignore")
            return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # arrays and the like: by identity only
        return False


def changed_since_built(estimator: Any) -> tuple[list[str], list[str]]:
    """The parameters changed since ``net_`` was built that a trained net takes, and those it cannot.

    Returns ``(live, ignored)``: ``live`` are the shared parameters but ``device`` (``lr``,
    ``max_epochs``, ``batch_size``, ``verbose``) and the prefixed ones of
    :data:`LIVE_PREFIXES`; ``ignored`` are :data:`BUILT` and ``module__*`` (and a live one
    deleted from the estimator: a net cannot unset it). The rest is read elsewhere: the
    partition, stops, training route and tree by :func:`~._config.config_changes` (a changed
    one is an error), the prediction settings where they are used.
    """
    then = estimator._net_params_
    now = estimator.get_params(deep=False)
    shared = set(net_param_names(type(estimator))) - BUILT
    live, ignored = [], []
    for name in sorted(now.keys() | then.keys()):
        if name in now and name in then and _same(now[name], then[name]):
            continue
        if name in BUILT or name.startswith("module__"):
            ignored.append(name)
        elif name in shared or name.startswith(LIVE_PREFIXES):
            (live if name in now else ignored).append(name)
    return live, ignored


def mark_applied(estimator: Any, names: list[str]) -> None:
    """Record that ``net_`` now has the current values of ``names`` (a new dict: a failed
    continuation puts the previous one back, :func:`~._guards.keep_fitted_state_on_error`)."""
    now = estimator.get_params(deep=False)
    estimator._net_params_ = {**estimator._net_params_, **{k: now[k] for k in names}}
