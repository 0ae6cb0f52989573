"""Fused CUDA kernels (Triton) for the lean engine's segment reductions and gathers.

Why: at training batch sizes one (B, C) pass over WordNet's 117,659 classes moves tens of MB,
which a GPU does in microseconds, so the torch-op route (a padded layout, then max / subtract /
exp / sum per size bucket) is bound by its many kernel launches, not by memory, many times a
flat ``log_softmax``. These kernels do the same
arithmetic in two or three launches, reading each score once.

Four kernels:

- ``segment``: log-sum-exp (online max rescaling, as in a fused softmax) or plain sum of
  every group of every row. Groups are visited in order of size and launched in a few size
  classes, so a block of tiny sibling groups and one 22,337-wide level share no tile shape.
- ``combine``: one elementwise pass over ``(B, n_outputs)`` that reads the row's group value
  ``t[b, group[c]]``: ``x - t`` (log-softmax), ``exp(x - t)`` (gradients), or
  ``g - exp(y) * t`` (the log-softmax backward).
- ``minus_t``: the log-probabilities ``x - t`` written transposed, ``(n_outputs, B)``, for:
- ``paths``: the joint log-probability of every node, the sum of its ancestors' group
  log-probabilities along the tree's (transposed) path matrix, optionally with each internal
  node's stop term; or, for decoding, only the best candidate of each tile of nodes per row.

Used only for CUDA torch tensors when Triton is installed (torch's CUDA wheels ship it):
:class:`TritonBackend`; ``HICLASS_PARALLEL_TRITON=0`` turns them off. Everything else, CPU and
CuPy included, uses the bucketed kernels (:mod:`._bucketed`); GPU tests compare the two.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...tree import PAD
from ._array_ops import TorchOps
from ._bucketed import BucketedBackend
from ._layout import Layout

# Size classes of the segment kernel: (largest group size, tile width, groups per program).
# Groups above the last bound loop over their members in tiles of 1024, one program each.
_SIZE_CLASSES = ((4, 4, 128), (32, 32, 32), (256, 256, 4))
_LOOP_TILE = 1024
_COMBINE_BLOCK = 2048
_PATH_BLOCK, _PATH_ROWS, _PATH_WARPS = 128, 16, 4  # best of 11 tile shapes on an H100
_MINUS_T_COLS, _MINUS_T_ROWS = 128, 32

COMBINE_MINUS, COMBINE_EXP_MINUS, COMBINE_BACKWARD = 0, 1, 2


@functools.lru_cache(maxsize=1)
def _kernels() -> Any:
    """The kernel module (compiled per signature on first call), or ``None`` without Triton.

    Where Triton is installed, an error importing the kernels is a bug and is raised, not
    turned into the slower torch-op route.
    """
    if os.environ.get("HICLASS_PARALLEL_TRITON", "1") == "0" or importlib.util.find_spec("triton") is None:
        return None
    from . import _triton_kernels

    return _triton_kernels


def available(x: Any) -> bool:
    """Whether the fused kernels serve ``x``: a CUDA torch tensor, with Triton importable."""
    return getattr(getattr(x, "device", None), "type", None) == "cuda" and _kernels() is not None


# ---------------------------------------------------------------------------- host plan
@dataclass(frozen=True)
class SegmentPlan:
    """Groups ordered by size, split into launch classes; arrays live on one device."""

    members: Any  # int64 (n_outputs,): columns, group after group in `gid` order
    first: Any  # int64 (G,): start of each ordered group in `members`
    size: Any  # int32 (G,)
    gid: Any  # int64 (G,): group id of each ordered group
    launches: tuple[tuple[int, int, int, int, int], ...]  # (k0, n_k, bound, width, groups per program)
    n_groups: int
    paths_t: Any  # int32 (L, C): the tree's padded paths, transposed for the path-sum kernel
    leaf: Any  # int8 (C,): 1 for a leaf
    all_nodes: Any  # int8 (C,): all 1


def _build_plan(lay: Layout, like: Any) -> SegmentPlan:
    """The plan of a layout (its group plan, its paths and leaves) on ``like``'s device."""
    import torch

    host, n_groups = lay.host, lay.n_groups
    sizes, starts, by_group = host["group_sizes"], host["group_starts"], host["members"]
    gid = np.argsort(sizes, kind="stable")  # ascending size, then group id
    members = np.concatenate([by_group[starts[g]:starts[g + 1]] for g in gid]) if n_groups else by_group
    ordered = sizes[gid]
    first = np.concatenate([[0], np.cumsum(ordered)[:-1]])
    launches, k0 = [], 0
    for top, width, per_program in _SIZE_CLASSES:
        k1 = int(np.searchsorted(ordered, top, side="right"))
        if k1 > k0:
            launches.append((k0, k1 - k0, int(ordered[k1 - 1]), width, per_program))
        k0 = k1
    if k0 < n_groups:
        launches.append((k0, n_groups - k0, int(ordered[-1]), _LOOP_TILE, 1))
    paths = host["paths_ext"][: lay.n_classes]
    dev = like.device

    def put(a: np.ndarray, dtype: Any) -> Any:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=dev)

    return SegmentPlan(
        members=put(members, torch.int64),
        first=put(first, torch.int64),
        size=put(ordered, torch.int32),
        gid=put(gid, torch.int64),
        launches=tuple(launches),
        n_groups=n_groups,
        paths_t=put(paths.T, torch.int32),
        leaf=put(np.isin(np.arange(paths.shape[0]), host["leaves"]), torch.int8),
        all_nodes=put(np.ones(paths.shape[0]), torch.int8),
    )


def plan_for(lay: Layout, like: Any) -> SegmentPlan:
    """The layout's plan on ``like``'s device, built once per device."""
    key = ("triton", str(like.device))
    if key not in lay.plans:
        lay.plans[key] = _build_plan(lay, like)
    return lay.plans[key]


def _acc(kern: dict[str, Any], dtype: Any) -> Any:
    import torch

    return kern.tl.float64 if dtype == torch.float64 else kern.tl.float32


def _rows(x: Any) -> Any:
    """A 2-D tensor whose rows are contiguous (the kernels index ``row * stride + col``)."""
    return x if x.stride(-1) == 1 else x.contiguous()


# ---------------------------------------------------------------------------- entry points
def segment_reduce(x: Any, plan: SegmentPlan, lse: bool) -> Any:
    """``(B, n_outputs) -> (B, G)``: every group's log-sum-exp (``lse``) or sum, in ``x``'s dtype
    (accumulated in float32, float64 for float64). A group whose scores are all ``-inf`` gets
    ``-inf``."""
    kern = _kernels()
    x = _rows(x)
    out = x.new_empty((x.shape[0], plan.n_groups))
    if x.shape[0] == 0:
        return out
    acc = _acc(kern, x.dtype)
    for k0, n_k, bound, width, per_program in plan.launches:
        grid = (x.shape[0], -(-n_k // per_program))
        kern.segment[grid](
            x, x.stride(0), plan.members, plan.first, plan.size, plan.gid, out, out.stride(0),
            k0, n_k, bound, LSE=lse, BLOCK_G=per_program, W=width, ACC=acc,
        )
    return out


def combine(mode: int, a: Any, table: Any, group: Any, b: Any = None, row_sign: Any = None) -> Any:
    """One elementwise pass with a per-row group lookup ``t = table[row, group[col]]``:
    ``a - t`` (``-inf`` read as 0), ``exp(a - t)`` (negated in rows where ``row_sign < 0``), or
    ``b - exp(a) * t``, by ``mode``."""
    kern = _kernels()
    a, table = _rows(a), _rows(table)
    b = a if b is None else _rows(b)
    out = a.new_empty(a.shape)
    if a.shape[0] == 0 or a.shape[1] == 0:
        return out
    grid = (a.shape[0], -(-a.shape[1] // _COMBINE_BLOCK))
    kern.combine[grid](
        a, a.stride(0), b, b.stride(0), table, table.stride(0), group, a if row_sign is None else row_sign.contiguous(),
        out, out.stride(0), a.shape[1],
        MODE=mode, SCALE=row_sign is not None, BLOCK=_COMBINE_BLOCK, ACC=_acc(kern, a.dtype),
    )
    return out


def log_probs_transposed(x: Any, lse: Any, group: Any) -> Any:
    """``(x - lse[:, group]).T`` (``-inf`` in ``lse`` read as 0), contiguous ``(n_outputs, B)``."""
    kern = _kernels()
    x, lse = _rows(x), _rows(lse)
    out = x.new_empty((x.shape[1], x.shape[0]))
    if x.shape[0] == 0 or x.shape[1] == 0:
        return out
    grid = (-(-x.shape[1] // _MINUS_T_COLS), -(-x.shape[0] // _MINUS_T_ROWS))
    kern.minus_t[grid](
        x, x.stride(0), lse, lse.stride(0), group, out, out.stride(0), x.shape[0], x.shape[1],
        BLOCK_C=_MINUS_T_COLS, BLOCK_R=_MINUS_T_ROWS, ACC=_acc(kern, x.dtype),
    )
    return out


def _launch_paths(logp_t: Any, plan: SegmentPlan, stop_col: Any, out: Any, idx: Any, cand: Any) -> None:
    import torch

    kern = _kernels()
    n_levels, n_nodes = plan.paths_t.shape
    n_rows = logp_t.shape[1]
    best = idx is not None
    grid = (-(-n_nodes // _PATH_BLOCK), -(-n_rows // _PATH_ROWS))
    kern.paths[grid](
        logp_t, logp_t.stride(0), plan.paths_t, plan.paths_t if stop_col is None else stop_col,
        plan.leaf if cand is None else cand, out, out.stride(0), idx if best else out, n_nodes, n_rows,
        L=n_levels, TERMINAL=stop_col is not None, BEST=best, BLOCK=_PATH_BLOCK, ROWS=_PATH_ROWS,
        ACC=_acc(kern, logp_t.dtype), LOWEST=torch.finfo(out.dtype).min, num_warps=_PATH_WARPS,
    )


def path_sums(logp_t: Any, plan: SegmentPlan, stop_col: Any = None) -> Any:
    """``out[b, c]``: the sum of ``logp_t[a, b]`` over the ancestors ``a`` of node ``c`` (``c``
    included), plus ``logp_t[stop_col[c], b]`` where that column is ``>= 0`` when ``stop_col``
    is given (terminal semantics): ``(n_outputs, B) -> (B, C)``."""
    n_rows, n_nodes = logp_t.shape[1], plan.paths_t.shape[1]
    out = logp_t.new_empty((n_rows, n_nodes))
    if n_rows:
        _launch_paths(logp_t, plan, stop_col, out, None, None)
    return out


def best_nodes(logp_t: Any, plan: SegmentPlan, stop_col: Any = None, leaves_only: bool = True) -> tuple[Any, Any]:
    """The candidate with the highest :func:`path_sums` value per row, and that value, without
    the ``(B, C)`` result: each tile of nodes reduces its rows, then a ``(B, C / tile)`` argmax.
    Candidates are the leaves (``leaves_only``) or every node; ties go to the lowest id."""
    import torch

    n_rows, n_nodes = logp_t.shape[1], plan.paths_t.shape[1]
    n_blocks = -(-n_nodes // _PATH_BLOCK)
    acc_dtype = torch.float64 if logp_t.dtype == torch.float64 else torch.float32
    val = torch.empty((n_rows, n_blocks), dtype=acc_dtype, device=logp_t.device)
    idx = torch.empty((n_rows, n_blocks), dtype=torch.int64, device=logp_t.device)
    if n_rows == 0:
        return idx[:, 0], val[:, 0].to(logp_t.dtype)
    cand = plan.leaf if leaves_only else plan.all_nodes
    _launch_paths(logp_t, plan, stop_col, val, idx, cand)
    block = val.argmax(1, keepdim=True)
    value = val.gather(1, block).squeeze(1)
    value = torch.where(value == torch.finfo(acc_dtype).min, -torch.inf, value)
    return idx.gather(1, block).squeeze(1), value.to(logp_t.dtype)


def cross_entropy_forward(x: Any, lse: Any, nodes: Any, arrays: dict[str, Any], n_levels: int, stop: bool) -> tuple[Any, Any]:
    """Per-sample weighted loss ``sum w * (lse[group] - x[col])`` over each sample's labelled rows
    (its path, and its stop row when ``stop``), and per-sample weight sums: two ``(B,)``."""
    kern = _kernels()
    x, lse = _rows(x), _rows(lse)
    n = x.shape[0]
    loss, count = x.new_empty(n), x.new_empty(n)
    if n:
        rows, constants = _sample_rows_args(kern, nodes, arrays, n_levels, stop, x.dtype)
        kern.ce_forward[(n,)](x, x.stride(0), lse, lse.stride(0), *rows, loss, count, **constants)
    return loss, count


def cross_entropy_backward(
    x: Any, lse: Any, nodes: Any, grad: Any, arrays: dict[str, Any], n_levels: int, stop: bool
) -> Any:
    """Gradient of :func:`cross_entropy_forward`'s loss: ``g * w * (softmax of each labelled
    group - one_hot(col))`` summed over each sample's rows, in four launches."""
    import torch

    kern = _kernels()
    x, lse = _rows(x), _rows(lse)
    grad = grad.contiguous()
    rows, common = _sample_rows_args(kern, nodes, arrays, n_levels, stop, x.dtype)
    n = x.shape[0]
    shift = torch.full_like(lse, torch.inf)
    if n:
        kern.ce_backward_rows[(n,)](lse, lse.stride(0), shift, shift.stride(0), x, x.stride(0), grad, *rows,
                                       SHIFT=True, **common)
    result = combine(COMBINE_EXP_MINUS, x, shift, arrays["col_group"], row_sign=grad)
    if n:
        kern.ce_backward_rows[(n,)](lse, lse.stride(0), shift, shift.stride(0), result, result.stride(0), grad,
                                       *rows, SHIFT=False, **common)
    return result


def _sample_rows_args(
    kern: Any, nodes: Any, arrays: dict[str, Any], n_levels: int, stop: bool, dtype: Any
) -> tuple[tuple, dict[str, Any]]:
    """What the loss kernels pass to ``sample_rows``: its tensors (then the number of classes)
    and the compile-time constants."""
    rows = (nodes, arrays["paths_ext"], arrays["col_group"], arrays["level_weights"], arrays["stop_col"],
            arrays["depth"], arrays["paths_ext"].shape[0] - 1)
    constants = dict(L=n_levels, LP=max(2, 1 << (n_levels - 1).bit_length()), STOP=stop, ACC=_acc(kern, dtype))
    return rows, constants


# ---------------------------------------------------------------------------- the backend
class TritonBackend(BucketedBackend):
    """CUDA torch tensors on the fused kernels: every primitive in two or three launches."""

    fuses_loss = True

    def __init__(self, like: Any):
        super().__init__("triton", TorchOps(like))

    def lse(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        lse = segment_reduce(x, plan_for(lay, x), lse=True)
        if mv is not None:
            import torch

            lse = torch.logaddexp(lse, arr["log_masked"].to(lse.dtype) + mv)
        return lse

    def log_softmax(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None) -> Any:
        return combine(COMBINE_MINUS, x, self.lse(x, lay, arr, mv), arr["col_group"])

    def log_softmax_backward(self, out: Any, grad: Any, lay: Layout, arr: Mapping[str, Any]) -> Any:
        sums = segment_reduce(grad, plan_for(lay, out), lse=False)
        return combine(COMBINE_BACKWARD, out, sums, arr["col_group"], b=grad)

    def exp_minus(self, x: Any, shift: Any, lay: Layout, arr: Mapping[str, Any], row_sign: Any = None) -> Any:
        return combine(COMBINE_EXP_MINUS, x, shift, arr["col_group"], row_sign=row_sign)

    def node_log_probs(self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool) -> Any:
        # every column's group log-probability (stop columns included), then one sum along
        # each node's padded path: the level-by-level loop of the bucketed kernels in one launch
        logp_t = log_probs_transposed(x, self.lse(x, lay, arr, mv), arr["col_group"])
        return path_sums(logp_t, plan_for(lay, x), arr["stop_col"] if terminal else None)

    def best_nodes(
        self, x: Any, lay: Layout, arr: Mapping[str, Any], mv: float | None, terminal: bool, log_t: float | None
    ) -> tuple[Any, Any]:
        """Without a threshold each tile of nodes keeps its best candidate per row inside the
        path-sum kernel (no ``(B, C)`` result); with one, the ``(B, C)`` joint log-probabilities
        are reduced here. Ties go to the lowest id."""
        import torch

        if log_t is None:
            logp_t = log_probs_transposed(x, self.lse(x, lay, arr, mv), arr["col_group"])
            stop_col = arr["stop_col"] if terminal else None
            return best_nodes(logp_t, plan_for(lay, x), stop_col, leaves_only=not terminal)
        joint = self.node_log_probs(x, lay, arr, mv, False)
        # Path probabilities never grow along a path: cut at the deepest depth holding a node at
        # or above the threshold, at that depth's best node.
        depth = arr["depth"]
        deepest = torch.where(joint >= log_t, depth, -1).amax(1, keepdim=True)
        at_depth = torch.where(depth == deepest, joint, -torch.inf)
        pos = at_depth.argmax(1, keepdim=True)
        found = deepest.squeeze(1) >= 0
        value = at_depth.gather(1, pos).squeeze(1)
        return torch.where(found, pos.squeeze(1), PAD), torch.where(found, value, 0.0)

    def cross_entropy_forward(
        self, x: Any, nodes: Any, lay: Layout, arrays: Mapping[str, Any], mv: float | None, stop: bool
    ) -> tuple[Any, Any, Any]:
        """``(lse, per-sample loss, per-sample weight sum)`` of the loss's labelled rows."""
        lse = self.lse(x, lay, arrays, mv)
        return (lse, *cross_entropy_forward(x, lse, nodes, arrays, lay.n_levels, stop))

    def cross_entropy_backward(
        self, x: Any, lse: Any, nodes: Any, grad: Any, lay: Layout, arrays: Mapping[str, Any], stop: bool
    ) -> Any:
        return cross_entropy_backward(x, lse, nodes, grad, arrays, lay.n_levels, stop)
