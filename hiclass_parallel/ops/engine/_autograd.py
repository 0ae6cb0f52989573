"""Every torch autograd Function of the lean engine, in one place.

Imported only when scores are torch tensors, so NumPy users never import torch. Each Function
takes the backend chosen by the public op (:mod:`._backends`) and runs its primitives forward
and backward: O(B*C) both ways, never ``(B, L, C)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from ._array_ops import TorchGradOps
from ._bucketed import depth_ordered, joint_levels
from ._layout import Layout

__all__ = ["GroupLogSoftmax", "GroupLogSumExp", "GroupCrossEntropy", "FusedCrossEntropy", "node_log_probs"]


class GroupLogSoftmax(torch.autograd.Function):
    """Per-group log-softmax; backward ``g - softmax * (group sum of g)``, O(B*C)."""

    @staticmethod
    def forward(ctx, x, backend, lay, arr, mask_value):
        out = backend.log_softmax(x, lay, arr, mask_value)
        ctx.backend, ctx.lay, ctx.arr = backend, lay, arr
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return ctx.backend.log_softmax_backward(out, grad.to(out.dtype), ctx.lay, ctx.arr), None, None, None, None


class GroupLogSumExp(torch.autograd.Function):
    """Per-group log-normaliser; backward ``softmax * g[group]``."""

    @staticmethod
    def forward(ctx, x, backend, lay, arr, mask_value):
        lse = backend.lse(x, lay, arr, mask_value)
        ctx.backend, ctx.lay, ctx.arr = backend, lay, arr
        ctx.save_for_backward(x, lse)
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, lse = ctx.saved_tensors
        # softmax * g = exp(x - (lse - log|g|)) * sign(g): one gather per element.
        shift = torch.where(grad != 0, lse - grad.abs().log(), torch.inf).to(x.dtype)
        result = ctx.backend.exp_minus(x, shift, ctx.lay, ctx.arr)
        if x.device.type != "cpu" or bool((grad < 0).any()):  # no host sync on a GPU
            sign = torch.where(grad < 0, -1.0, 1.0).to(x.dtype)
            result.mul_(sign.index_select(1, ctx.arr["col_group"]))
        return result, None, None, None, None


def node_log_probs(x: Any, backend: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool) -> Any:
    """:meth:`node_log_probs` of the backends, recorded by autograd: the level-by-level loop in
    differentiable torch ops (the sibling log-normalisers through :class:`GroupLogSumExp`)."""
    ops = TorchGradOps()
    lse = GroupLogSumExp.apply(x, backend, lay, arr, mv) if lay.partition == "sibling" else None
    levels = joint_levels(ops, x, lay, arr, mv, terminal, lse)
    return depth_ordered(ops, levels, lay, terminal).index_select(1, arr["inverse_order"])


class GroupCrossEntropy(torch.autograd.Function):
    """Per-sample ``sum_r w_r * (lse[b, group_r] - x[b, col_r])`` with a fused O(B*C) backward."""

    @staticmethod
    def forward(ctx, x, cols, groups, weights, backend, lay, arr, mask_value):
        lse = backend.lse(x, lay, arr, mask_value)
        lse = torch.where(lse == -torch.inf, 0.0, lse)  # a group of -inf only has no mass
        used = weights != 0
        rows = lse.gather(1, groups) - x.gather(1, cols)
        per_sample = torch.where(used, rows * weights, 0.0).sum(1)
        ctx.backend, ctx.lay, ctx.arr = backend, lay, arr
        ctx.save_for_backward(x, lse, cols, groups, weights)
        return per_sample

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, lse, cols, groups, weights = ctx.saved_tensors
        # d/dx_c = sum over rows of its group of w * softmax_c  -  sum over rows naming c of w.
        # The first term is exp(x_c - (lse - log W)) with W the group's total weight: one gather.
        scale = grad.abs().unsqueeze(1)
        total = torch.zeros_like(lse).scatter_add_(1, groups, weights * scale)
        shift = torch.where(total > 0, lse - total.log(), torch.inf)
        negative = grad < 0
        sign = None
        if x.device.type != "cpu" or bool(negative.any()):  # no host sync on a GPU
            sign = torch.where(negative, -1.0, 1.0)
        result = ctx.backend.exp_minus(x, shift, ctx.lay, ctx.arr, sign)
        result.scatter_add_(1, cols, -(weights * grad.unsqueeze(1)))
        return result, None, None, None, None, None, None, None


class FusedCrossEntropy(torch.autograd.Function):
    """:class:`GroupCrossEntropy` on a backend that fuses the loss (the CUDA kernels): each
    sample's rows are read from the tree inside the kernels (no ``(B, L)`` index tensors),
    about 10 launches in all."""

    @staticmethod
    def forward(ctx, x, nodes, backend, lay, arrays, mask_value, stop):
        lse, loss, count = backend.cross_entropy_forward(x, nodes, lay, arrays, mask_value, stop)
        ctx.save_for_backward(x, lse, nodes)
        ctx.backend, ctx.lay, ctx.arrays, ctx.stop = backend, lay, arrays, stop
        ctx.mark_non_differentiable(count)
        return loss, count

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, _count_grad):
        x, lse, nodes = ctx.saved_tensors
        result = ctx.backend.cross_entropy_backward(x, lse, nodes, grad, ctx.lay, ctx.arrays, ctx.stop)
        return result, None, None, None, None, None, None
