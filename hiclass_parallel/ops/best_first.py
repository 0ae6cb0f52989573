"""Exact best and top-k paths of the sibling partition, scoring only what the search expands.

:func:`~hiclass_parallel.ops.decode.best_paths` scores every class of every row. Under the
sibling partition a path's joint log-probability is a sum of conditional log-probabilities,
each at most 0, so it never increases as the path grows: once some complete candidate is
worth ``v``, no node whose joint is below ``v`` can lead to a better one. The search here is
a branch and bound over the tree, batched over rows and level-synchronous:

1. a greedy dive (the best child at every level) gives every row a first complete candidate
   and so a bound, at the cost of one group per level;
2. then the tree is expanded level by level from the top, keeping only the nodes whose joint
   is not below the row's current ``k``-th best candidate (ties are kept, so the lowest-id
   rule of the exhaustive route is reproduced); every expansion may raise the bound.

Only the members of expanded groups are scored, through a *score function*
``score(rows, columns) -> scores`` (see :mod:`.sibling_paths`).

When the score function is a linear layer on hidden rows (it offers ``linear_parts()``, as
:class:`~.sibling_paths.LinearScores` and the classifier's sparse network do) and runs on the
CPU, each row is searched in C instead (:mod:`._native_best_first`; the choice is
:func:`~.decode.decoding_route`'s): a best-first search with
a heap, one dot product per scored column, no per-step tensor overhead (on WordNet's nouns
the batched search above spends most of its time in small tensor operations and in a matrix
product against columns most rows do not need). Same rules, same results.

On either route, a row whose search would score more than ``max_columns`` columns (flat
scores, an untrained model) is finished by the exhaustive route on its full score vector, so
the result is always exact and the work per row is bounded by about ``max_columns + n_outputs``.
"""

from __future__ import annotations

import math
from typing import Any

from ..tree import PAD, Tree
from .engine._engine import check_semantics
from .decode import decoding_route
from .sibling_paths import ScoreFn, expand_rows, segment_logsumexp, sibling_plan

__all__ = ["best_first_paths"]

# Slack of the pruning test, relative to the bound: joints are sums of rounded terms, so a
# child may exceed its parent by a few ulps; keeping a little more never changes the result.
_SLACK = 1e-5


def _top_candidates(row: Any, value: Any, node: Any, n_rows: int, k: int) -> tuple[Any, Any]:
    """Best ``k`` (value, node) per row, ties by lowest node, padded with (-inf, 2**62) -> (n_rows, k)."""
    import torch

    if k == 1:  # two segment reductions instead of three sorts
        best = torch.full((n_rows,), -math.inf, dtype=value.dtype, device=value.device)
        best = best.scatter_reduce(0, row, value, "amax", include_self=True)
        nan = torch.isnan(value)
        if bool(nan.any()):  # a NaN beats everything, as in a sort with NaN first
            best = best.index_fill(0, row[nan], math.nan)
        at_best = (value == best[row]) | (nan & torch.isnan(best[row]))
        first = torch.full((n_rows,), 2**62, dtype=torch.int64, device=value.device)
        first = first.scatter_reduce(0, row[at_best], node[at_best], "amin", include_self=True)
        return best.unsqueeze(1), first.unsqueeze(1)
    order = torch.argsort(node, stable=True)
    order = order[torch.argsort(-value[order], stable=True)]
    order = order[torch.argsort(row[order], stable=True)]
    row_s = row[order]
    counts = torch.bincount(row_s, minlength=n_rows)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(row_s.shape[0], device=row.device) - start[row_s]
    keep = rank < k
    out_v = torch.full((n_rows, k), -math.inf, dtype=value.dtype, device=value.device)
    out_n = torch.full((n_rows, k), 2**62, dtype=torch.int64, device=value.device)
    out_v[row_s[keep], rank[keep]] = value[order][keep]
    out_n[row_s[keep], rank[keep]] = node[order][keep]
    return out_v, out_n


def _search_torch(
    score: ScoreFn, n_rows: int, tree: Tree, plan: Any, kk: int, terminal: bool, max_columns: int, device: Any
) -> tuple[Any, ...]:
    """The batched torch search: ``(top_v, top_n, work, exhaustive, dtype)``, every row's
    ``kk`` best candidates (rows flagged ``exhaustive`` still need the exhaustive route)."""
    import torch

    C = plan.n_classes
    arr = plan.arrays(torch.empty(0, device=device))
    is_leaf = torch.from_numpy(tree.is_leaf.copy()).to(device)
    rows_all = torch.arange(n_rows, device=device)
    work = torch.zeros(n_rows, dtype=torch.int64, device=device)
    top_v = top_n = None
    dtype = None

    def expand(row: Any, group: Any, base: Any) -> tuple[Any, ...]:
        """Score the groups of the entries; return each candidate's entry, column and joint."""
        nonlocal dtype
        entry, col, _ = expand_rows(plan, group)
        values = score(row[entry], col)
        dtype = values.dtype
        undecidable = torch.isnan(values) | (values == math.inf)
        if bool(undecidable.any()):  # no probabilities there: the exhaustive route blanks the row
            exhaustive.index_fill_(0, row[entry][undecidable], True)
        work.index_add_(0, row, arr["group_ptr"][group + 1] - arr["group_ptr"][group])
        lse = segment_logsumexp(values, entry, group.shape[0])
        lse = torch.where(lse == -math.inf, torch.zeros_like(lse), lse)  # a group of -inf has no mass
        # the exhaustive route's order of operations: child = score + (joint(parent) - lse)
        joint = values + (base.to(values.dtype) - lse)[entry]
        return entry, col, joint

    def complete(row: Any, group: Any, entry: Any, col: Any, joint: Any) -> None:
        """Merge the complete candidates among the expanded columns into each row's top k."""
        nonlocal top_v, top_n
        is_stop = col >= C
        node = torch.where(is_stop, arr["group_parent"][group[entry]], col.clamp_max(C - 1))
        done = torch.where(is_stop, torch.full_like(is_stop, terminal), is_leaf[col.clamp_max(C - 1)])
        r, v, n = row[entry][done], joint[done], node[done]
        if top_v is not None:
            r = torch.cat([rows_all.repeat_interleave(kk), r])
            v = torch.cat([top_v.reshape(-1), v])
            n = torch.cat([top_n.reshape(-1), n])
        top_v, top_n = _top_candidates(r, v, n, n_rows, kk)

    def children_of(row: Any, entry: Any, col: Any, joint: Any) -> tuple[Any, Any, Any]:
        """Internal child nodes of the expanded groups: new entries (row, their group, joint)."""
        inner = (col < C) & ~is_leaf[col.clamp_max(C - 1)]
        return row[entry][inner], arr["child_group"][col[inner]], joint[inner]

    def start() -> tuple[Any, Any, Any]:
        """Every row at the top-level group (group 0), with joint log-probability 0."""
        zeros = torch.zeros(n_rows, dtype=torch.int64, device=device)
        return rows_all, zeros, zeros.to(torch.float64)

    exhaustive = torch.zeros(n_rows, dtype=torch.bool, device=device)

    # 1. greedy dive: the best child of every row, level by level, for a first bound. Each
    # level's expansion is kept: every node of the dive's path has a joint not below the
    # bound, so the branch and bound below expands the same groups again and reuses them.
    dive = []
    row, group, base = start()
    while row.numel():
        entry, col, joint = expand(row, group, base)
        complete(row, group, entry, col, joint)
        on_path = torch.full((n_rows,), -1, dtype=torch.int64, device=device)
        dive.append((on_path.index_copy_(0, row, group), row[entry], col, joint))
        child = col < C
        pick = torch.where(child, joint, torch.full_like(joint, -math.inf))
        best_v, best_c = _top_candidates(entry[child], pick[child], col[child], group.shape[0], 1)
        best_c = best_c[:, 0]
        go = (best_c < C) & ~is_leaf[best_c.clamp_max(C - 1)]
        row, group, base = row[go], arr["child_group"][best_c[go]], best_v[go, 0]

    # 2. branch and bound from the top: keep the nodes not below the row's k-th candidate.
    # The dive's candidates are found again here; only its bound is kept (no duplicates).
    seed_bound, top_v, top_n = top_v[:, -1].clone(), None, None
    row, group, base = start()
    depth = 0
    while row.numel():
        if depth < len(dive):  # the dive's group of each row at this depth: reuse its scores
            on_path, dive_row, dive_col, dive_joint = dive[depth]
            reuse = on_path[row] == group
            entry_of_row = torch.full((n_rows,), -1, dtype=torch.int64, device=device)
            entry_of_row[row[reuse]] = reuse.nonzero().flatten()
            kept = entry_of_row[dive_row] >= 0
            fresh = (~reuse).nonzero().flatten()
            entry, col, joint = expand(row[fresh], group[fresh], base[fresh])
            entry = torch.cat([entry_of_row[dive_row[kept]], fresh[entry]])
            col, joint = torch.cat([dive_col[kept], col]), torch.cat([dive_joint[kept], joint])
        else:
            entry, col, joint = expand(row, group, base)
        complete(row, group, entry, col, joint)
        row, group, base = children_of(row, entry, col, joint)
        bound = torch.maximum(seed_bound, top_v[:, -1])
        slack = _SLACK * (1 + bound.abs())
        keep = ~(base < (bound - slack)[row])  # NaN joints are kept; the budget catches them
        exhaustive |= work > max_columns
        keep &= ~exhaustive[row]
        row, group, base = row[keep], group[keep], base[keep]
        depth += 1

    return top_v, top_n, work, exhaustive, dtype


def _search_native(score: ScoreFn, plan: Any, kk: int, terminal: bool, max_columns: int) -> tuple[Any, ...]:
    """The C search (:mod:`._native_best_first`) of ``score.linear_parts()``, with
    :func:`_search_torch`'s results."""
    import torch

    from .engine._native_best_first import search

    match = None
    if getattr(score, "linear_parts", None) is None:  # a linear layer plus a sparse match term
        *parts, match = score.matched_linear_parts()
    else:
        parts = score.linear_parts()
    h, weight, bias = (t.detach().numpy() for t in parts)
    if match is not None:
        match = tuple(m.detach().numpy() if hasattr(m, "detach") else m for m in match)
    top_v, top_n, work, status = search(h, weight, bias, plan, kk, terminal, max_columns, match)
    out = tuple(torch.from_numpy(a) for a in (top_v, top_n, work))
    return (*out, torch.from_numpy(status != 0), out[0].dtype)


def best_first_paths(
    score: ScoreFn,
    n_rows: int,
    tree: Tree,
    stop: bool = False,
    semantics: str = "partial",
    k: int | None = None,
    *,
    max_columns: int | None = None,
    like: Any = None,
    return_work: bool = False,
) -> tuple[Any, ...]:
    """Exact best (or top-``k``) valid paths of the sibling partition, scored on demand.

    Parameters
    ----------
    score : callable
        ``score(rows, columns) -> scores``: torch tensors of int64 ``(T,)`` in, the scores of
        those (row, column) pairs out, ``(T,)`` floating point; columns index the full score
        vector (``C`` classes, then the stop columns with ``stop=True``). One that also has
        ``linear_parts() -> (h, weight, bias)`` (scores ``h @ weight.T + bias``, see
        :class:`~hiclass_parallel.ops.sibling_paths.LinearScores`) is searched in C on the
        CPU, for float32 or float64 tensors, where the optional library was built; so is one
        with ``matched_linear_parts() -> (h, weight, bias, match)``, the same plus a sparse
        match term (``match``: see :func:`~hiclass_parallel.ops.engine._native_best_first.search`).
        One with ``matrix(rows, columns) -> (len(rows), len(columns))`` scores the rows the
        search hands to the exhaustive route with one product instead of a list of pairs.
    n_rows : int
        Number of rows (samples).
    tree : Tree
    stop : bool, default=False
        Whether the score vector has stop columns.
    semantics : {"partial", "terminal"}, default="partial"
        Candidates: leaves (``"partial"``) or every node with its stop term (``"terminal"``,
        needs ``stop=True``), as in :func:`~hiclass_parallel.ops.decode.best_paths`.
    k : int, default=None
        ``None``: the best path, shaped like :func:`best_paths`' result. An int: the ``k``
        best, shaped like :func:`~hiclass_parallel.ops.decode.topk_paths`' result.
    max_columns : int, default=None
        Work bound per row: a row that would score more columns than this is finished by
        the exhaustive route (all ``n_outputs`` columns). ``None``: a fifth of the columns,
        at least 2,048.
    like : torch.Tensor, default=None
        A tensor on the device to work on (default: CPU).
    return_work : bool, default=False
        Also return the number of columns scored per row (int64 ``(n_rows,)``).

    Returns
    -------
    paths : torch.Tensor of int64 of shape (n_rows, n_levels) or (n_rows, k, n_levels)
    log_prob : torch.Tensor of shape (n_rows,) or (n_rows, k)
    work : torch.Tensor of int64 of shape (n_rows,)
        Only with ``return_work``.

    Notes
    -----
    A row whose scored columns hold a NaN or ``+inf`` gets the exhaustive route's result
    for it (the empty path, log-probability NaN); a NaN in a column the search never scores
    goes unseen (the classifier's scores come from a hidden row, whose NaN reaches every
    column, the top-level ones included). Identical to the exhaustive routes up to floating-point rounding of the group
    log-normalisers (ties between candidates that compare equal are broken by lowest node
    id in both). The torch search is level-synchronous rather than a priority queue, so
    every step is a few batched tensor operations over all rows (what a GPU wants); the C
    search of a linear layer is a priority queue per row.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops import best_paths
    >>> from hiclass_parallel.ops.best_first import best_first_paths
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> scores = torch.tensor([[2.0, 0, 0, 3, 0, 0, 0, 1, 0]])
    >>> paths, log_prob = best_first_paths(lambda r, c: scores[r, c], 1, tree)
    >>> paths
    tensor([[0, 3, 7]])
    >>> bool((paths == best_paths(scores, tree, "sibling")[0]).all())
    True
    """
    import torch

    check_semantics(semantics, stop)
    device = like.device if like is not None else torch.device("cpu")
    plan = sibling_plan(tree, stop)
    C = plan.n_classes
    n_cand = C if semantics == "terminal" else int(tree.is_leaf.sum())
    kk = 1 if k is None else int(k)
    if not 1 <= kk <= n_cand:
        what = "nodes" if semantics == "terminal" else "leaves"
        raise ValueError(f"k must be in [1, {n_cand}] (the tree has {n_cand} candidate {what}), got {k}")
    if max_columns is None:
        max_columns = max(2048, plan.n_outputs // 5)
    terminal = semantics == "terminal"
    arr = plan.arrays(torch.empty(0, device=device))
    if decoding_route("sibling", on_demand=True, score=score, device=device) == "best_first_c":
        top_v, top_n, work, exhaustive, dtype = _search_native(score, plan, kk, terminal, max_columns)
    else:
        top_v, top_n, work, exhaustive, dtype = _search_torch(score, n_rows, tree, plan, kk, terminal, max_columns, device)

    nodes, values = top_n, top_v
    if bool(exhaustive.any()):
        from .decode import best_paths, topk_paths

        fb = exhaustive.nonzero().flatten()
        n_fb, n_out = fb.shape[0], plan.n_outputs
        matrix = getattr(score, "matrix", None)
        if matrix is not None:  # one product of those rows with every column (no pair list)
            full = matrix(fb, torch.arange(n_out, device=device))
        else:
            full = score(fb.repeat_interleave(n_out), torch.arange(n_out, device=device).repeat(n_fb)).reshape(n_fb, n_out)
        work[fb] += n_out
        if k is None:
            p, v = best_paths(full, tree, "sibling", stop=stop, semantics=semantics)
            p, v = p.unsqueeze(1), v.unsqueeze(1)
        else:
            p, v = topk_paths(full, tree, kk, "sibling", stop=stop, semantics=semantics)
        depth = (p != PAD).sum(-1) - 1
        nodes = nodes.clone()
        values = values.to(v.dtype).clone()
        nodes[fb] = p.gather(-1, depth.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        values[fb] = v
    values = values.to(dtype if dtype is not None else torch.float32)
    paths = arr["paths"][torch.where(nodes < C, nodes, C)]
    if k is None:
        paths, values = paths[:, 0], values[:, 0]
    out = (paths, values)
    return (*out, work) if return_work else out
