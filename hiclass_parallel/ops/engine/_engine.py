"""The package-internal face of the lean engine: what :mod:`.groups`, :mod:`.decode` and
:mod:`hiclass_parallel.losses` use, from one module.

A public op validates its inputs with :func:`prepare` (scores flattened to 2-D, the layout,
its arrays on the scores' device, the backend), runs one backend primitive (through an
autograd Function of :mod:`._autograd` for torch tensors), and gives the result back its
leading axes with :func:`restore`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..._backend import array_namespace
from ...tree import Tree
from ._array_ops import ops_for
from ._backends import backend_for
from ._layout import Layout, check_partition, device_arrays, layout, layout_arrays

__all__ = [
    "SEMANTICS",
    "Prepared",
    "prepare",
    "restore",
    "normalise_mask_value",
    "check_semantics",
    "check_partition",
    "backend_for",
    "layout",
    "layout_arrays",
    "device_arrays",
    "ops_for",
    "autograd",
]

#: Label semantics: the paper's partial labels, or terminal labels (the node is the answer).
SEMANTICS = ("partial", "terminal")


def autograd() -> Any:
    """The module of autograd Functions (imports torch: call it for torch tensors only)."""
    from . import _autograd

    return _autograd


def normalise_mask_value(mask_value: float | None) -> float | None:
    """``None``, ``-inf`` and ``nan`` all mean "masked entries are ignored"."""
    if mask_value is None:
        return None
    mask_value = float(mask_value)
    if math.isnan(mask_value) or mask_value == -math.inf:
        return None
    if mask_value == math.inf:
        raise ValueError("mask_value=+inf would give every group the log-normaliser +inf")
    return mask_value


def check_semantics(semantics: str, stop: bool) -> None:
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
    if semantics == "terminal" and not stop:
        raise ValueError(
            "semantics='terminal' needs stop=True: without stop columns the model says nothing about "
            "where a path ends, so a path cannot be scored as ending at an internal node"
        )


@dataclass(frozen=True)
class Prepared:
    """One call's scores as the backends take them."""

    x: Any  # (N, n_outputs)
    lead: tuple  # the leading axes of the scores
    lay: Layout
    arr: dict[str, Any]  # the layout's arrays on the scores' device
    backend: Any
    mv: float | None  # the normalised mask value


def prepare(scores: Any, tree: Tree, partition: str, stop: bool, mask_value: float | None = None) -> Prepared:
    """Validate scores and flatten their leading axes: ``(..., n_outputs) -> (N, n_outputs)``."""
    lay = layout(tree, partition, stop)
    shape = tuple(scores.shape)
    if len(shape) < 1 or shape[-1] != lay.n_outputs:
        extra = f" ({lay.n_classes} classes + {lay.n_outputs - lay.n_classes} stop columns)" if stop else ""
        raise ValueError(
            f"scores have shape {shape}: the last axis must hold n_outputs(tree, {partition!r}, stop={stop}) "
            f"= {lay.n_outputs} scores{extra}"
        )
    xp = array_namespace(scores)
    if not xp.isdtype(scores.dtype, "real floating"):
        raise TypeError(f"scores must be real floating point, got dtype {scores.dtype}")
    x2 = xp.reshape(scores, (-1, lay.n_outputs)) if len(shape) != 2 else scores
    mv = normalise_mask_value(mask_value)
    return Prepared(x2, shape[:-1], lay, device_arrays(tree, lay, x2), backend_for(x2, lay), mv)


def restore(out: Any, lead: tuple, *trailing: int) -> Any:
    """Give a result of shape ``(N, *trailing)`` the scores' leading axes back."""
    if len(lead) == 1 and trailing:
        return out
    return array_namespace(out).reshape(out, (*lead, *trailing))
