"""Fused CUDA kernels (Triton) for the lean engine's segment reductions and gathers.

Why: at training batch sizes one (B, C) pass over WordNet's 117,659 classes moves tens of MB,
which a GPU does in microseconds, so the torch-op route (a padded layout, then max / subtract /
exp / sum per size bucket) is bound by its ~100 kernel launches, not by memory: on an H100 the
lean level log-softmax took 1.9 ms, 18x a flat ``log_softmax``. These kernels do the same
arithmetic in two or three launches, reading each score once.

Three kernels:

- ``segment``: log-sum-exp (online max rescaling, as in a fused softmax) or plain sum of
  every group of every row. Groups are visited in order of size and launched in a few size
  classes, so a block of tiny sibling groups and one 22,337-wide level share no tile shape.
- ``combine``: one elementwise pass over ``(B, n_outputs)`` that reads the row's group value
  ``t[b, group[c]]``: ``x - t`` (log-softmax), ``exp(x - t)`` (gradients), or
  ``g - exp(y) * t`` (the log-softmax backward).
- ``paths``: the joint log-probability of every node, the sum of its ancestors' group
  log-probabilities along the tree's padded path matrix, optionally with each internal
  node's stop term.

Used only for CUDA torch tensors when Triton can be imported (torch's CUDA wheels ship it);
``HICLASS_PARALLEL_TRITON=0`` turns them off. Everything else, CPU and CuPy included, uses the
kernels of :mod:`hiclass_parallel.ops.groups`; GPU tests compare the two.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

# Size classes of the segment kernel: (largest group size, tile width, groups per program).
# Groups above the last bound loop over their members in tiles of 1024, one program each.
_SIZE_CLASSES = ((4, 4, 128), (32, 32, 32), (256, 256, 4))
_LOOP_TILE = 1024
_COMBINE_BLOCK = 2048
_PATH_BLOCK, _PATH_ROWS, _PATH_WARPS = 128, 16, 4  # best of 11 tile shapes on an H100

COMBINE_MINUS, COMBINE_EXP_MINUS, COMBINE_BACKWARD = 0, 1, 2


@functools.lru_cache(maxsize=1)
def _kernels() -> dict[str, Any] | None:
    """The compiled-on-first-call kernels, or ``None`` where Triton is missing."""
    if os.environ.get("HICLASS_PARALLEL_TRITON", "1") == "0":
        return None
    try:
        import triton
        import triton.language as tl
    except Exception:  # not installed, or a broken install: the torch-op route still works
        return None

    @triton.jit
    def segment(x_ptr, x_stride, members_ptr, first_ptr, size_ptr, gid_ptr, out_ptr, out_stride,
                k0, n_k, bound,
                LSE: tl.constexpr, BLOCK_G: tl.constexpr, W: tl.constexpr, ACC: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        ks = tl.program_id(1) * BLOCK_G + tl.arange(0, BLOCK_G)
        live = ks < n_k
        k = k0 + ks
        first = tl.load(first_ptr + k, mask=live, other=0)
        size = tl.load(size_ptr + k, mask=live, other=0)
        if BLOCK_G == 1:  # a big group: loop over its own size
            bound = tl.max(size, 0)
        x_row = x_ptr + row * x_stride
        j = tl.arange(0, W)
        m = tl.full([BLOCK_G], float("-inf"), ACC)
        s = tl.zeros([BLOCK_G], ACC)
        for start in range(0, bound, W):
            jj = start + j
            inside = (jj[None, :] < size[:, None]) & live[:, None]
            col = tl.load(members_ptr + first[:, None] + jj[None, :], mask=inside, other=0)
            if LSE:
                v = tl.load(x_row + col, mask=inside, other=float("-inf")).to(ACC)
                m_new = tl.maximum(m, tl.max(v, 1))
                shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a group of -inf so far
                s = s * tl.exp(m - shift) + tl.sum(tl.exp(v - shift[:, None]), 1)
                m = m_new
            else:
                v = tl.load(x_row + col, mask=inside, other=0.0).to(ACC)
                s += tl.sum(v, 1)
        if LSE:
            res = tl.where(m == float("-inf"), float("-inf"), m + tl.log(s))
        else:
            res = s
        gid = tl.load(gid_ptr + k, mask=live, other=0)
        tl.store(out_ptr + row * out_stride + gid, res, mask=live)

    @triton.jit
    def combine(a_ptr, a_stride, b_ptr, b_stride, t_ptr, t_stride, group_ptr, scale_ptr, out_ptr, out_stride, n_cols,
                MODE: tl.constexpr, SCALE: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        live = cols < n_cols
        g = tl.load(group_ptr + cols, mask=live, other=0)
        t = tl.load(t_ptr + row * t_stride + g, mask=live, other=0.0).to(ACC)
        a = tl.load(a_ptr + row * a_stride + cols, mask=live, other=0.0).to(ACC)
        if MODE == 0:  # log-softmax: x - lse, a group with no mass gets lse 0
            res = a - tl.where(t == float("-inf"), 0.0, t)
        elif MODE == 1:  # exp(x - shift), times a factor per row
            res = tl.exp(a - t)
            if SCALE:
                res *= tl.load(scale_ptr + row).to(ACC)
        else:  # log-softmax backward: g - exp(y) * (group sum of g)
            b = tl.load(b_ptr + row * b_stride + cols, mask=live, other=0.0).to(ACC)
            res = b - tl.exp(a) * t
        tl.store(out_ptr + row * out_stride + cols, res, mask=live)

    @triton.jit
    def paths(logp_t_ptr, logp_t_stride, paths_t_ptr, stop_ptr, out_ptr, out_stride, n_nodes, n_rows,
              L: tl.constexpr, TERMINAL: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, ACC: tl.constexpr):
        # A (nodes, rows) tile, with both operands laid out for it: the path matrix comes
        # transposed, (L, C) int32, so a level's ancestors of a block of nodes are one contiguous
        # read; the log-probabilities come transposed, (n_outputs, B), so an ancestor is read for
        # a run of rows at once. (Row-major gathers wasted most of every memory sector: 0.64 ms
        # per WordNet batch of 100 on an H100, against 0.27 with the transposed log-probabilities.)
        nodes = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = nodes < n_nodes
        rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
        rows_live = rows < n_rows
        acc = tl.zeros([BLOCK, ROWS], ACC)
        for level in range(L):
            anc = tl.load(paths_t_ptr + level * n_nodes + nodes, mask=live, other=-1)
            take = (anc >= 0)[:, None] & rows_live[None, :]
            acc += tl.load(logp_t_ptr + anc.to(tl.int64)[:, None] * logp_t_stride + rows[None, :], mask=take,
                           other=0.0).to(ACC)
        if TERMINAL:  # an internal node also pays the log-probability of its stop column
            stop = tl.load(stop_ptr + nodes, mask=live, other=-1)
            take = (stop >= 0)[:, None] & rows_live[None, :]
            acc += tl.load(logp_t_ptr + stop.to(tl.int64)[:, None] * logp_t_stride + rows[None, :], mask=take,
                           other=0.0).to(ACC)
        out = out_ptr + rows.to(tl.int64)[None, :] * out_stride + nodes[:, None]
        tl.store(out, acc, mask=live[:, None] & rows_live[None, :])

    return {"triton": triton, "tl": tl, "segment": segment, "combine": combine, "paths": paths}


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


def build_plan(col_group: np.ndarray, n_groups: int, paths: np.ndarray, like: Any) -> SegmentPlan:
    """The plan of a column -> group map and a ``(C, L)`` path matrix, arrays on ``like``'s device."""
    import torch

    sizes = np.bincount(col_group, minlength=n_groups)
    gid = np.argsort(sizes, kind="stable")  # ascending size, then group id
    by_group = np.argsort(col_group, kind="stable")  # members of each group, ascending column
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    members = np.concatenate([by_group[starts[g]:starts[g] + sizes[g]] for g in gid]) if n_groups else by_group
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
    )


def _acc(kern: dict[str, Any], dtype: Any) -> Any:
    import torch

    return kern["tl"].float64 if dtype == torch.float64 else kern["tl"].float32


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
        kern["segment"][grid](
            x, x.stride(0), plan.members, plan.first, plan.size, plan.gid, out, out.stride(0),
            k0, n_k, bound, LSE=lse, BLOCK_G=per_program, W=width, ACC=acc,
        )
    return out


def combine(mode: int, a: Any, table: Any, group: Any, b: Any = None, row_scale: Any = None) -> Any:
    """One elementwise pass with a per-row group lookup ``t = table[row, group[col]]``:
    ``a - t`` (``-inf`` read as 0), ``exp(a - t)`` (times ``row_scale[row]`` if given), or
    ``b - exp(a) * t``, by ``mode``."""
    kern = _kernels()
    a, table = _rows(a), _rows(table)
    b = a if b is None else _rows(b)
    out = a.new_empty(a.shape)
    if a.shape[0] == 0 or a.shape[1] == 0:
        return out
    grid = (a.shape[0], -(-a.shape[1] // _COMBINE_BLOCK))
    kern["combine"][grid](
        a, a.stride(0), b, b.stride(0), table, table.stride(0), group, a if row_scale is None else row_scale.contiguous(),
        out, out.stride(0), a.shape[1],
        MODE=mode, SCALE=row_scale is not None, BLOCK=_COMBINE_BLOCK, ACC=_acc(kern, a.dtype),
    )
    return out


def path_sums(logp: Any, plan: SegmentPlan, stop_col: Any = None) -> Any:
    """``out[b, c]``: the sum of ``logp[b, a]`` over the ancestors ``a`` of node ``c`` (``c``
    included), plus ``logp[b, stop_col[c]]`` where that column is ``>= 0`` when ``stop_col`` is
    given (terminal semantics): ``(B, n_outputs) -> (B, C)``."""
    kern = _kernels()
    n_levels, n_nodes = plan.paths_t.shape
    out = logp.new_empty((logp.shape[0], n_nodes))
    if logp.shape[0] == 0:
        return out
    logp_t = logp.t().contiguous()
    terminal = stop_col is not None
    grid = (-(-n_nodes // _PATH_BLOCK), -(-logp.shape[0] // _PATH_ROWS))
    kern["paths"][grid](
        logp_t, logp_t.stride(0), plan.paths_t, stop_col if terminal else plan.paths_t, out, out.stride(0), n_nodes,
        logp.shape[0], L=n_levels, TERMINAL=terminal, BLOCK=_PATH_BLOCK, ROWS=_PATH_ROWS, ACC=_acc(kern, logp.dtype),
        num_warps=_PATH_WARPS,
    )
    return out
