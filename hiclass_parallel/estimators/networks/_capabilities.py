"""What a network class can do, read once: the one protocol the classifier asks a module about.

A module class tells the classifier, by what it defines:

- ``accepts_sparse = True`` (a class attribute): it takes torch sparse CSR batches, so a scipy
  sparse ``X`` is never made dense (others get dense batches);
- ``encode(X)`` and ``scorer(hidden)`` (methods): it scores columns on demand, so the sibling
  partition can train path-locally (only the groups on each labelled path) and decode
  best-first (only the groups it expands);
- a ``class_features`` argument of ``__init__``: it takes a text (feature row) per class;
- ``default_lr`` and ``default_optimizer`` (class attributes, optional): its training
  defaults; without them, modules with sparse input train with :class:`LazyAdam` at 0.005
  (only the rows a batch touches are updated) and the others with Adam at 0.003;
- ``lazy_adam_groups`` (a class attribute, optional): parameter groups given to
  :class:`LazyAdam` when it is the optimizer and the user sets no groups of their own, as
  ``(pattern, options)`` pairs (skorch's ``optimizer__param_groups``): the default text model
  gives its input layer one second moment per row and 3x the learning rate.

:func:`module_capabilities` reads all of it in one place; nothing else in the package probes a
module's attributes.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass

import torch

from ._optim import LazyAdam

__all__ = ["ModuleCapabilities", "module_capabilities"]

#: Default learning rates: Adam on dense modules, LazyAdam on sparse input.
DENSE_LR, SPARSE_LR = 3e-3, 5e-3


@dataclass(frozen=True)
class ModuleCapabilities:
    """What a module class can do and how it trains by default.

    Parameters
    ----------
    accepts_sparse : bool
        It takes torch sparse CSR batches.
    scores_columns : bool
        It has ``encode`` and ``scorer``: path-local training and best-first decoding.
    class_features : bool
        Its ``__init__`` takes ``class_features`` (one feature row per class).
    default_lr : float
        Learning rate when ``lr=None``.
    default_optimizer : type
        Optimizer class when ``optimizer=None``.
    lazy_adam_groups : tuple of (str, dict)
        Default parameter groups of :class:`LazyAdam`: a pattern over ``named_parameters``
        names and the group's options (``second_moment``, ``lr_scale``...).
    """

    accepts_sparse: bool
    scores_columns: bool
    class_features: bool
    default_lr: float
    default_optimizer: type
    lazy_adam_groups: tuple[tuple[str, dict], ...] = ()

    def default_max_epochs(self, n_rows: int | None, batch_size: int) -> int:
        """Epochs when ``max_epochs=None``, for ``n_rows`` training rows (``None``: a stream).

        Dense modules: 10. Sparse (text) modules: ``35 / sqrt(steps per epoch)`` rounded to
        the nearest whole number, within [2, 30]: the text model's held-out accuracy peaks
        after about ``35 x sqrt(steps per epoch)`` steps in all, so bigger data sets need more
        steps but fewer passes. Rounding to the nearest (not up) trains fewer steps at the same
        accuracy.

        Examples
        --------
        >>> from hiclass_parallel.estimators.networks import module_capabilities
        >>> from hiclass_parallel.estimators import SparseMLP
        >>> text = module_capabilities(SparseMLP)
        >>> [text.default_max_epochs(n, 256) for n in (3_212, 8_232, 65_691, 50)]
        [10, 6, 2, 30]
        """
        if n_rows is None or not self.accepts_sparse:
            return 10
        batch = batch_size if batch_size > 0 else n_rows
        steps = max(1, math.ceil(n_rows / batch))
        return int(min(30, max(2, math.floor(35 / math.sqrt(steps) + 0.5))))


@functools.cache
def module_capabilities(module: type[torch.nn.Module]) -> ModuleCapabilities:
    """Read a module class's capabilities (see the module docstring for the protocol).

    Examples
    --------
    >>> from torch import nn
    >>> from hiclass_parallel.estimators import MLP, SparseMLP
    >>> [module_capabilities(m).scores_columns for m in (SparseMLP, MLP, nn.Linear)]
    [True, True, False]
    >>> module_capabilities(SparseMLP).accepts_sparse, module_capabilities(MLP).accepts_sparse
    (True, False)
    """
    sparse = bool(getattr(module, "accepts_sparse", False))
    try:
        takes = inspect.signature(module.__init__).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        takes = {}
    return ModuleCapabilities(
        accepts_sparse=sparse,
        scores_columns=callable(getattr(module, "encode", None)) and callable(getattr(module, "scorer", None)),
        class_features="class_features" in takes,
        default_lr=float(getattr(module, "default_lr", SPARSE_LR if sparse else DENSE_LR)),
        default_optimizer=getattr(module, "default_optimizer", LazyAdam if sparse else torch.optim.Adam),
        lazy_adam_groups=tuple((str(name), dict(options))
                               for name, options in getattr(module, "lazy_adam_groups", ())),
    )

