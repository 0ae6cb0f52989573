"""The Triton kernels of :mod:`._step` (imported only where Triton is, and only when a step runs).

Kept apart so that importing the package never imports Triton. Each kernel reads the padded
arrays of a :class:`~._plan.StepPlan`; every size it loops over is read on the device (a
sample's entries from ``row_ptr``, a row's candidates from its slot's table pointers) or is a
padded size, so nothing asks the host.

- ``hidden``: one program per sample (its entries in tiles of ``BLOCK_E``),
  ``h[b] = b_in + sum_j value_j * W_in[feature_j]``;
- ``softmax_rows``: one program per softmax row; an online log-sum-exp over the row's
  candidates (its slot's range of the flat table) in tiles of ``BLOCK_K`` (any group width),
  each candidate's logit plus its offset (the sampled softmax's correction on drawn columns,
  0 elsewhere), the weighted loss added to the step's accumulator, then the candidates' gradients
  ``w * (softmax - onehot)`` added to the output rows' gradients, the biases' and the sample's
  ``dh``; a non-finite loss sets the flag. With ``TEXT``, each candidate's score adds the
  class-text match (its text entries against the sample's weighted words on the batch's class
  vocabulary), whose gradient goes to the words' gradient;
- ``input_grad``: one program per sample, ``dh[b] * value_j`` added to its features' gradients
  and ``dh[b]`` to the input bias's;
- ``adam_rows``: one program per ``BLOCK_R`` distinct touched rows, LazyAdam's update of those
  rows (per-row or per-entry second moment, a float32 or bfloat16 first moment rounded to the
  nearest even), its step numbers read from the device; no update once the non-finite flag is
  set.
"""

import triton
import triton.language as tl


@triton.jit
def hidden(row_ptr, entry_pos, entry_value, in_rows, w_in, w_in_stride, b_in, h, H,
           BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    hm = offs < H
    acc = tl.load(b_in + offs, mask=hm, other=0.0).to(tl.float32)
    start = tl.load(row_ptr + b)
    end = tl.load(row_ptr + b + 1)
    for j0 in range(start, end, BLOCK_E):  # the sample's entries, a tile at a time
        j = j0 + tl.arange(0, BLOCK_E)
        ok = j < end
        f = tl.load(in_rows + tl.load(entry_pos + j, mask=ok, other=0), mask=ok, other=0).to(tl.int64)
        v = tl.load(entry_value + j, mask=ok, other=0.0)
        W = tl.load(w_in + f[:, None] * w_in_stride + offs[None, :], mask=ok[:, None] & hm[None, :], other=0.0)
        acc += tl.sum(W.to(tl.float32) * v[:, None], 0)
    tl.store(h + b * H + offs, acc, mask=hm)


@triton.jit
def _match(u, ok, s, words_ptr, P, text_ptr, text_word, text_value):
    # the class-text match of sample s with a tile of candidates (positions u among the plan's
    # output rows): sum over each candidate's text entries of value * words[s, word]
    ts = tl.load(text_ptr + u, mask=ok, other=0)
    te = tl.load(text_ptr + u + 1, mask=ok, other=0)
    acc = tl.zeros(ts.shape, tl.float32)
    for e in range(0, tl.max(te - ts, 0)):
        has = ok & (ts + e < te)
        word = tl.load(text_word + ts + e, mask=has, other=0).to(tl.int64)
        value = tl.load(text_value + ts + e, mask=has, other=0.0)
        acc += value * tl.load(words_ptr + s * P + word, mask=has, other=0.0)
    return acc


@triton.jit
def _tile_scores(k0, hi, table_ptr, offset_ptr, out_rows, w_out, w_out_stride, b_out, b_out_stride, h, offs, hm, s,
                 words_ptr, P, text_ptr, text_word, text_value, TEXT: tl.constexpr, BLOCK_K: tl.constexpr):
    # one tile of a softmax row's candidates (table positions k0 .. k0 + BLOCK_K, below hi): their
    # positions u among the plan's output rows, their W_out rows and their scores (the softmax's
    # two passes, for the normaliser and for the gradients, score the same tiles)
    ks = k0 + tl.arange(0, BLOCK_K)
    ok = ks < hi
    u = tl.load(table_ptr + ks, mask=ok, other=0)
    col = tl.load(out_rows + u, mask=ok, other=0).to(tl.int64)
    W = tl.load(w_out + col[:, None] * w_out_stride + offs[None, :], mask=ok[:, None] & hm[None, :],
                other=0.0).to(tl.float32)
    sc = tl.sum(W * h[None, :], 1) + tl.load(b_out + col * b_out_stride, mask=ok, other=0.0).to(tl.float32)
    sc += tl.load(offset_ptr + ks, mask=ok, other=0.0)
    if TEXT:
        sc += _match(u, ok, s, words_ptr, P, text_ptr, text_word, text_value)
    return ks, ok, u, W, sc


@triton.jit
def softmax_rows(sample_ptr, slot_ptr, target_ptr, weight_ptr, slot_start, table_ptr, offset_ptr, out_rows,
                 h_ptr, w_out, w_out_stride, b_out, b_out_stride,
                 dh_ptr, g_out, g_bout, loss_ptr, flag_ptr, H,
                 words_ptr, g_words, P, text_ptr, text_word, text_value,
                 TEXT: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_H: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    w = tl.load(weight_ptr + r)
    if w != 0.0:  # padding rows weigh 0
        s = tl.load(sample_ptr + r).to(tl.int64)
        slot = tl.load(slot_ptr + r).to(tl.int64)
        t = tl.load(target_ptr + r)
        lo = tl.load(slot_start + slot)
        hi = tl.load(slot_start + slot + 1)
        offs = tl.arange(0, BLOCK_H)
        hm = offs < H
        h = tl.load(h_ptr + s * H + offs, mask=hm, other=0.0)
        m = tl.full([], float("-inf"), tl.float32)
        z = tl.zeros([], tl.float32)
        picked = tl.zeros([], tl.float32)
        for k0 in range(lo, hi, BLOCK_K):
            ks, ok, u, W, sc = _tile_scores(k0, hi, table_ptr, offset_ptr, out_rows, w_out, w_out_stride, b_out,
                                            b_out_stride, h, offs, hm, s, words_ptr, P, text_ptr, text_word,
                                            text_value, TEXT, BLOCK_K)
            sc = tl.where(ok, sc, float("-inf"))
            m_new = tl.maximum(m, tl.max(sc, 0))
            z = z * tl.exp(m - m_new) + tl.sum(tl.exp(sc - m_new), 0)
            m = m_new
            picked += tl.sum(tl.where(ks - lo == t, sc, 0.0), 0)
        lse = m + tl.log(z)
        loss = w * (lse - picked)
        tl.atomic_add(loss_ptr, loss)
        finite = (loss == loss) & (tl.abs(loss) < float("inf"))
        tl.atomic_max(flag_ptr, tl.where(finite, 0, 1))
        dh = tl.zeros([BLOCK_H], tl.float32)
        for k0 in range(lo, hi, BLOCK_K):
            ks, ok, u, W, sc = _tile_scores(k0, hi, table_ptr, offset_ptr, out_rows, w_out, w_out_stride, b_out,
                                            b_out_stride, h, offs, hm, s, words_ptr, P, text_ptr, text_word,
                                            text_value, TEXT, BLOCK_K)
            p = tl.where(ok, tl.exp(sc - lse), 0.0)
            g = w * (p - tl.where(ks - lo == t, 1.0, 0.0))
            if TEXT:  # the match's gradient, by the batch's vocabulary columns of the sample
                ts = tl.load(text_ptr + u, mask=ok, other=0)
                te = tl.load(text_ptr + u + 1, mask=ok, other=0)
                for e in range(0, tl.max(te - ts, 0)):
                    has = ok & (ts + e < te)
                    word = tl.load(text_word + ts + e, mask=has, other=0).to(tl.int64)
                    value = tl.load(text_value + ts + e, mask=has, other=0.0)
                    tl.atomic_add(g_words + s * P + word, g * value, mask=has)
            dh += tl.sum(g[:, None] * W, 0)
            u64 = u.to(tl.int64)
            tl.atomic_add(g_out + u64[:, None] * H + offs[None, :], g[:, None] * h[None, :],
                          mask=ok[:, None] & hm[None, :])
            tl.atomic_add(g_bout + u64, g, mask=ok)
        tl.atomic_add(dh_ptr + s * H + offs, dh, mask=hm)


@triton.jit
def input_grad(row_ptr, entry_pos, entry_value, dh_ptr, g_in, g_bin, H, BLOCK_E: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    hm = offs < H
    start = tl.load(row_ptr + b)
    end = tl.load(row_ptr + b + 1)
    dh = tl.load(dh_ptr + b * H + offs, mask=hm, other=0.0)
    for j0 in range(start, end, BLOCK_E):
        j = j0 + tl.arange(0, BLOCK_E)
        ok = j < end
        pos = tl.load(entry_pos + j, mask=ok, other=0).to(tl.int64)
        v = tl.load(entry_value + j, mask=ok, other=0.0)
        tl.atomic_add(g_in + pos[:, None] * H + offs[None, :], v[:, None] * dh[None, :], mask=ok[:, None] & hm[None, :])
    tl.atomic_add(g_bin + offs, dh, mask=hm)


@triton.jit
def _bfloat16(x):
    # float32 to the nearest even bfloat16 (NaN stays NaN), as torch's .to(torch.bfloat16) and the C
    # update round; written out in bits because Triton's interpreter truncates the cast
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = tl.where(nan, (bits >> 16) | 0x40, rounded)
    return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def adam_rows(ids_ptr, n_ids, grad_ptr, p_ptr, p_stride, m_ptr, m_stride, v_ptr, v_stride, hyper_ptr, flag_ptr, H,
              ROW_V: tl.constexpr, M_BF16: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):
    us = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    i = tl.load(ids_ptr + us, mask=us < n_ids, other=-1).to(tl.int64)
    bad = tl.load(flag_ptr)
    live = (i >= 0) & ((tl.zeros([BLOCK_R], tl.int32) + bad) == 0)
    # hyper: lr (times the group's lr_scale), beta1, beta2, eps, weight decay, step (float64)
    lr = tl.load(hyper_ptr)
    b1 = tl.load(hyper_ptr + 1)
    b2 = tl.load(hyper_ptr + 2)
    eps = tl.load(hyper_ptr + 3).to(tl.float32)
    wd = tl.load(hyper_ptr + 4).to(tl.float32)
    step = tl.load(hyper_ptr + 5)
    lr_t = (lr / (1.0 - tl.exp(step * tl.log(b1)))).to(tl.float32)
    bc2 = (1.0 - tl.exp(step * tl.log(b2))).to(tl.float32)
    c1 = (1.0 - b1).to(tl.float32)
    c2 = (1.0 - b2).to(tl.float32)
    b1f = b1.to(tl.float32)
    b2f = b2.to(tl.float32)
    offs = tl.arange(0, BLOCK_H)
    tile = live[:, None] & (offs < H)[None, :]
    at = i[:, None] * p_stride + offs[None, :]
    g = tl.load(grad_ptr + us[:, None] * H + offs[None, :], mask=tile, other=0.0)
    p = tl.load(p_ptr + at, mask=tile, other=0.0)
    g = g + wd * p
    m_at = m_ptr + i[:, None] * m_stride + offs[None, :]
    m = tl.load(m_at, mask=tile, other=0.0).to(tl.float32) * b1f + c1 * g
    if M_BF16:
        tl.store(m_at, _bfloat16(m), mask=tile)
    else:
        tl.store(m_at, m, mask=tile)
    if ROW_V:  # one second moment per row: the mean of its squared gradient
        sq = tl.sum(g * g, 1) / H
        v = tl.load(v_ptr + i * v_stride, mask=live, other=0.0) * b2f + c2 * sq
        tl.store(v_ptr + i * v_stride, v, mask=live)
        denom = (tl.sqrt(v / bc2) + eps)[:, None]
    else:
        v_at = v_ptr + i[:, None] * v_stride + offs[None, :]
        v = tl.load(v_at, mask=tile, other=0.0) * b2f + c2 * g * g
        tl.store(v_at, v, mask=tile)
        denom = tl.sqrt(v / bc2) + eps
    tl.store(p_ptr + at, p - lr_t * (m / denom), mask=tile)
