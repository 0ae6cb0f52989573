"""Checks of the classifier's settings that need more than ``_parameter_constraints``.

Each raises a ``ValueError`` that names the setting, the value and what to do instead, at the
start of ``fit``, before any data is read (torch's own errors here are an ``AssertionError``
"Torch not compiled with CUDA enabled" or a list of every device type torch knows).

The settings read at prediction (:data:`PREDICTION_PARAMS`) may change after fit
(``set_params``); :func:`check_prediction_params` holds them to the constructor's constraints
where prediction reads them.
"""

from __future__ import annotations

from typing import Any

from sklearn.utils._param_validation import Interval, validate_parameter_constraints

__all__ = ["PREDICTION_PARAMS", "NotBool", "check_device", "check_params", "check_prediction_params"]

#: The parameters prediction reads (``decision_function``, ``predict*``, ``score``), which may
#: be changed after fit.
PREDICTION_PARAMS = ("semantics", "decoding", "threshold", "top_k", "prototypes", "prototype_candidates",
                     "batch_size")


class NotBool(Interval):
    """An :class:`~sklearn.utils._param_validation.Interval` that no ``bool`` satisfies: where
    ``True`` would read as "on" but mean the number 1 (``prototypes=True`` is not ``"auto"``)."""

    def is_satisfied_by(self, val: Any) -> bool:
        return not isinstance(val, bool) and super().is_satisfied_by(val)

    def __str__(self) -> str:
        return f"{super().__str__()} (not a bool)"


def check_prediction_params(estimator: Any) -> None:
    """Raise ``InvalidParameterError`` (naming the parameter, its value and what it may be)
    unless the estimator's :data:`PREDICTION_PARAMS` meet its ``_parameter_constraints``:
    ``set_params`` after fit validates nothing, and an unknown ``decoding`` or a negative
    ``prototypes`` would otherwise act as some other setting."""
    constraints = type(estimator)._parameter_constraints
    names = [name for name in PREDICTION_PARAMS if name in constraints and hasattr(estimator, name)]
    validate_parameter_constraints({name: constraints[name] for name in names},
                                   {name: getattr(estimator, name) for name in names},
                                   caller_name=type(estimator).__name__)


def check_device(device: Any) -> None:
    """Raise ``ValueError`` unless ``device`` names a torch device that this machine has.

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``...

    Examples
    --------
    >>> check_device("cpu")
    >>> check_device("nonsense")
    Traceback (most recent call last):
    ...
    ValueError: device='nonsense' is not a torch device: use 'cpu', 'cuda' or 'cuda:N' (a GPU index), or 'mps'
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"device={device!r} is not a torch device: use 'cpu', 'cuda' or 'cuda:N' (a GPU index), or 'mps'"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "torch was built without CUDA" if torch.version.cuda is None else "torch sees no CUDA GPU"
            raise ValueError(f"device={device!r} but {why} on this machine: use device='cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r} but this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})"
            )
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"device={device!r} but torch sees no MPS (Apple GPU) device here: use device='cpu'")


def check_params(estimator: Any) -> None:
    """The checks of ``fit`` beyond ``_parameter_constraints``: unknown parameter names, a module
    instance instead of a class, the device, terminal semantics without stops."""
    import torch

    from ._params import check_kwargs

    check_kwargs({k: None for k in vars(estimator) if not k.endswith("_") and not k.startswith("_")}, estimator)
    module = estimator.module
    if module is not None and (isinstance(module, torch.nn.Module) or not isinstance(module, type)):
        raise TypeError(
            f"module must be a torch.nn.Module class, not an instance ({type(module).__name__} given): "
            "pass the class and set its arguments with module__* parameters, e.g. module__hidden_units=64"
        )
    if module is not None and not issubclass(module, torch.nn.Module):
        raise TypeError(f"module must be a subclass of torch.nn.Module, got {module!r}")
    check_device(estimator.device)
    if estimator.semantics == "terminal" and estimator.stop is False:
        raise ValueError(
            "semantics='terminal' needs stop=True (or stop=None): without stop scores the model cannot "
            "learn where a path ends"
        )
