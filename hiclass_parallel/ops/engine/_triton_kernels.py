"""The Triton kernels of :mod:`hiclass_parallel.ops.engine._triton` (imported only where Triton is).

Kept apart so that importing the package never imports Triton, and so that the kernels are
module-level functions (one kernel calls ``sample_rows``, which Triton resolves by global name).
Each kernel's comments say what it computes; the entry points and the reasons live in
:mod:`._triton`.
"""

import triton
import triton.language as tl


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
            # -inf: a group of -inf so far; +inf: shift by 0 so the sum becomes +inf, not the NaN
            # of exp(inf - inf) (the semantics of the NumPy and C routes: lse +inf)
            shift = tl.where((m_new == float("-inf")) | (m_new == float("inf")), 0.0, m_new)
            s = s * tl.exp(m - shift) + tl.sum(tl.exp(v - shift[:, None]), 1)
            m = m_new
        else:
            v = tl.load(x_row + col, mask=inside, other=0.0).to(ACC)
            s += tl.sum(v, 1)
    if LSE:
        # s != s: a NaN the max skipped ([NaN, -inf] has max -inf) still makes the group NaN
        res = tl.where((m == float("-inf")) & (s == s), float("-inf"), m + tl.log(s))
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
        if SCALE:  # the sign of a per-row value
            res = tl.where(tl.load(scale_ptr + row) < 0, -res, res)
    else:  # log-softmax backward: g - exp(y) * (group sum of g)
        b = tl.load(b_ptr + row * b_stride + cols, mask=live, other=0.0).to(ACC)
        res = b - tl.exp(a) * t
    tl.store(out_ptr + row * out_stride + cols, res, mask=live)

@triton.jit
def minus_t(x_ptr, x_stride, t_ptr, t_stride, group_ptr, out_ptr, out_stride, n_rows, n_cols,
            BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr, ACC: tl.constexpr):
    # The log-probabilities x - lse[group] of a (rows, cols) tile, stored transposed: the
    # path-sum kernel reads them as (n_outputs, B). Saves a separate transpose of (B, C).
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    rows = (tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    g = tl.load(group_ptr + cols, mask=cols < n_cols, other=0)
    a = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=live, other=0.0).to(ACC)
    t = tl.load(t_ptr + rows[:, None] * t_stride + g[None, :], mask=live, other=0.0).to(ACC)
    res = a - tl.where(t == float("-inf"), 0.0, t)
    out = out_ptr + cols.to(tl.int64)[:, None] * out_stride + rows[None, :]
    tl.store(out, tl.trans(res), mask=tl.trans(live))

@triton.jit
def paths(logp_t_ptr, logp_t_stride, paths_t_ptr, stop_ptr, cand_ptr, out_ptr, out_stride, idx_ptr, n_nodes,
          n_rows, L: tl.constexpr, TERMINAL: tl.constexpr, BEST: tl.constexpr, BLOCK: tl.constexpr,
          ROWS: tl.constexpr, ACC: tl.constexpr, LOWEST: tl.constexpr):
    # A (nodes, rows) tile, with both operands laid out for it: the path matrix comes
    # transposed, (L, C) int32, so a level's ancestors of a block of nodes are one contiguous
    # read; the log-probabilities come transposed, (n_outputs, B), so an ancestor is read for
    # a run of rows at once. (Row-major gathers wasted most of every memory sector and took
    # more than twice as long.)
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
    if BEST:
        # The block's best candidate per row, ties to the lowest id (nodes ascend). A
        # candidate at -inf still beats a non-candidate: it counts as the lowest finite value.
        cand = live & (tl.load(cand_ptr + nodes, mask=live, other=0) != 0)
        val = tl.where(cand[:, None], tl.where(acc == float("-inf"), LOWEST, acc), float("-inf"))
        best = tl.argmax(val, 0, tie_break_left=True)
        block_out = rows.to(tl.int64) * out_stride + tl.program_id(0)
        tl.store(out_ptr + block_out, tl.max(val, 0), mask=rows_live)
        tl.store(idx_ptr + block_out, tl.program_id(0) * BLOCK + best, mask=rows_live)
    else:
        out = out_ptr + rows.to(tl.int64)[None, :] * out_stride + nodes[:, None]
        tl.store(out, acc, mask=live[:, None] & rows_live[None, :])

@triton.jit
def sample_rows(b, nodes_ptr, paths_ptr, group_ptr, lw_ptr, stop_ptr, depth_ptr, n_classes,
                L: tl.constexpr, LP: tl.constexpr, STOP: tl.constexpr):
    # The labelled rows of sample b: its path's columns (LP lanes, -1 padded), their groups
    # and level weights, then its stop row (column -1 when there is none). No two rows of a
    # sample share a group, so per-sample updates of (B, G) or (B, n_outputs) never collide.
    node = tl.load(nodes_ptr + b)
    lv = tl.arange(0, LP)
    labelled = node >= 0
    safe = tl.where(labelled, node, n_classes)  # row n_classes of the padded paths is all -1
    cols = tl.load(paths_ptr + safe * L + lv, mask=lv < L, other=-1)
    used = cols >= 0
    groups = tl.load(group_ptr + cols, mask=used, other=0)
    weights = tl.where(used, tl.load(lw_ptr + lv, mask=lv < L, other=0.0), 0.0)
    stop_col = node * 0 - 1  # tensors, not constants, whatever STOP is
    stop_group = node * 0
    stop_w = tl.sum(weights, 0) * 0.0
    if STOP:
        inner = tl.where(labelled, node, 0)
        stop_col = tl.where(labelled, tl.load(stop_ptr + inner), -1)
        has = stop_col >= 0
        stop_group = tl.load(group_ptr + stop_col, mask=has, other=0)
        stop_w = tl.where(has, tl.load(lw_ptr + tl.minimum(tl.load(depth_ptr + inner) + 1, L)), 0.0)
    return cols, groups, weights, stop_col, stop_group, stop_w

@triton.jit
def ce_forward(x_ptr, x_stride, lse_ptr, lse_stride, nodes_ptr, paths_ptr, group_ptr, lw_ptr, stop_ptr,
               depth_ptr, n_classes, loss_ptr, count_ptr,
               L: tl.constexpr, LP: tl.constexpr, STOP: tl.constexpr, ACC: tl.constexpr):
    # Per sample: sum over its rows of w * (lse[group] - x[col]), and the sum of the weights.
    b = tl.program_id(0).to(tl.int64)
    cols, groups, w, stop_col, stop_group, stop_w = sample_rows(
        b, nodes_ptr, paths_ptr, group_ptr, lw_ptr, stop_ptr, depth_ptr, n_classes, L, LP, STOP)
    w = w.to(ACC)
    take = w != 0
    lse = tl.load(lse_ptr + b * lse_stride + groups, mask=take, other=0.0).to(ACC)
    lse = tl.where(lse == float("-inf"), 0.0, lse)  # a group with no mass
    x = tl.load(x_ptr + b * x_stride + cols, mask=take, other=0.0).to(ACC)
    loss = tl.sum(tl.where(take, w * (lse - x), 0.0), 0)
    count = tl.sum(w, 0)
    if STOP:
        sw = stop_w.to(ACC)
        if sw != 0:
            sl = tl.load(lse_ptr + b * lse_stride + stop_group).to(ACC)
            sl = tl.where(sl == float("-inf"), 0.0, sl)
            loss += sw * (sl - tl.load(x_ptr + b * x_stride + stop_col).to(ACC))
        count += sw
    tl.store(loss_ptr + b, loss)
    tl.store(count_ptr + b, count)

@triton.jit
def ce_backward_rows(lse_ptr, lse_stride, shift_ptr, shift_stride, grad_x_ptr, grad_x_stride, grad_ptr,
                     nodes_ptr, paths_ptr, group_ptr, lw_ptr, stop_ptr, depth_ptr, n_classes,
                     SHIFT: tl.constexpr, L: tl.constexpr, LP: tl.constexpr, STOP: tl.constexpr,
                     ACC: tl.constexpr):
    # SHIFT: shift[b, group] = lse - log(w |g_b|) for each row, so that the softmax term of the
    # gradient, w |g| softmax, is exp(x - shift[group]) (one gather per element later).
    # Otherwise: grad_x[b, col] -= w g_b, the one-hot term.
    b = tl.program_id(0).to(tl.int64)
    cols, groups, w, stop_col, stop_group, stop_w = sample_rows(
        b, nodes_ptr, paths_ptr, group_ptr, lw_ptr, stop_ptr, depth_ptr, n_classes, L, LP, STOP)
    g = tl.load(grad_ptr + b).to(ACC)
    wg = w.to(ACC) * g
    if SHIFT:
        take = wg != 0
        lse = tl.load(lse_ptr + b * lse_stride + groups, mask=take, other=0.0).to(ACC)
        lse = tl.where(lse == float("-inf"), 0.0, lse)  # as in the forward pass
        tl.store(shift_ptr + b * shift_stride + groups, lse - tl.log(tl.abs(wg)), mask=take)
        if STOP:
            swg = stop_w.to(ACC) * g
            if swg != 0:
                sl = tl.load(lse_ptr + b * lse_stride + stop_group).to(ACC)
                sl = tl.where(sl == float("-inf"), 0.0, sl)
                tl.store(shift_ptr + b * shift_stride + stop_group, sl - tl.log(tl.abs(swg)))
    else:
        take = wg != 0
        row = grad_x_ptr + b * grad_x_stride
        tl.store(row + cols, tl.load(row + cols, mask=take, other=0.0) - wg, mask=take)
        if STOP:
            swg = stop_w.to(ACC) * g
            if swg != 0:
                tl.store(row + stop_col, tl.load(row + stop_col) - swg)
