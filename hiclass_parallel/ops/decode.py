"""Exact decoding: the valid ancestral path(s) of highest joint log-probability.

The paper leaves inference to "well-known techniques" (beam search over ``P_cl``, Levenshtein
distance to the naive per-level argmax). Both are approximations; the anchor code's path
search is also wrong unless node ids are sorted by depth. Here every candidate path is
scored exactly, all at once: the joint log-probability of the path ending at every node is
accumulated level by level from the parent array (:func:`~hiclass_parallel.ops.groups.node_log_probs`),
and the best candidate is an argmax over the nodes. Cost O(B*C), no beam, no ``(B, L, C)``.

Candidates
----------
- ``semantics="partial"`` (the paper's): every leaf, scored by its path log-probability.
- ``semantics="terminal"`` (needs ``stop=True``): every node; an internal node adds the
  log-probability of its stop column.

Ties are broken deterministically: the candidate with the lowest node id wins, and
:func:`topk_paths` orders equal scores by ascending node id.

Non-finite scores
-----------------
``-inf`` is a probability of 0 (a masked class): decoding works around it. A row holding a
NaN or ``+inf`` anywhere has no defined probabilities (``+inf`` gives its group the
log-normaliser ``+inf``, and ``inf - inf`` is NaN), so every decoding method returns for it
the *empty path* (all ``-1``, the pad) with log-probability NaN: :func:`best_paths` one,
:func:`topk_paths` ``k`` of them. The same on every route (NumPy, the C kernel, torch, CuPy,
CUDA). An empty path is never a class: the classifier reads it as its pad label.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from .._backend import array_namespace, device, is_numpy_array, is_torch_array
from ..tree import PAD, Tree
from .engine._engine import check_semantics, ops_for, prepare, restore
from .groups import node_log_probs

__all__ = ["DECODING_ROUTES", "best_paths", "decoding_route", "expected_hf1_paths", "node_log_probs", "topk_paths"]

#: The routes of exact decoding that :func:`decoding_route` chooses from (all give the same paths).
DECODING_ROUTES = ("exhaustive", "best_first_torch", "best_first_c")


def _no_grad(x: Any) -> Any:
    return x.detach() if is_torch_array(x) else x


def _undecidable(x: Any) -> Any:
    """Rows ``(N,)`` whose scores hold a NaN or ``+inf``: no probabilities are defined there."""
    xp = array_namespace(x)
    return xp.any(xp.isnan(x) | (x == math.inf), axis=1)


def _blank_rows(x: Any, paths: Any, log_prob: Any) -> tuple[Any, Any]:
    """Undecidable rows of ``x`` (N, n_outputs) get empty paths (all -1) and log-probability NaN;
    ``paths`` is ``(N, ..., L)``, ``log_prob`` ``(N, ...)``."""
    ops = ops_for(x)
    bad = _undecidable(x)
    bad_lp = bad
    while len(bad_lp.shape) < len(log_prob.shape):
        bad_lp = ops.expand(bad_lp, 1)
    return ops.where(ops.expand(bad_lp, -1), PAD, paths), ops.where(bad_lp, math.nan, log_prob)


def best_paths(
    scores: Any,
    tree: Tree,
    partition: str = "level",
    stop: bool = False,
    semantics: str = "partial",
    threshold: float | None = None,
    mask_value: float | None = None,
) -> tuple[Any, Any]:
    """The valid ancestral path of highest joint log-probability, exactly, for every sample.

    Parameters
    ----------
    scores : array of shape (..., n_outputs)
        Scores of any real floating dtype (NumPy, torch CPU/CUDA, CuPy, array API);
        ``n_outputs = n_outputs(tree, partition, stop)``.
    tree : Tree
        The class tree; node ids may be in any order.
    partition : {"level", "sibling"}, default="level"
    stop : bool, default=False
        Whether ``scores`` carry the stop columns.
    semantics : {"partial", "terminal"}, default="partial"
        Candidates: the leaves (``"partial"``), or every node with its stop term
        (``"terminal"``, needs ``stop=True``).
    threshold : float in [0, 1], default=None
        Instead of the best candidate, return the path to the deepest node whose
        probability ``exp(node_log_probs(..., semantics="partial"))`` is at least
        ``threshold`` (ties at that depth: highest probability, then lowest id). With the
        sibling partition this probability is the node's subtree probability, so
        ``threshold=0.5`` is the Bayes-optimal rule under tree distance; with the level
        partition it is the product of the level probabilities along the path. Path
        probabilities never grow along a path, so the cut is well defined. A sample
        whose top-level nodes all fall below the threshold gets an empty path (all
        ``-1``) with log-probability 0 (the implicit root). Stop terms are not used.
        A row holding a NaN or ``+inf`` gets an empty path with log-probability NaN
        (see the module notes), with or without a threshold.
    mask_value : float, default=None
        See :func:`~hiclass_parallel.ops.groups.group_logsumexp`.

    Returns
    -------
    paths : array of int64 of shape (..., n_levels)
        Ancestral paths, right-padded with ``-1``, in the namespace and on the device of
        ``scores``.
    log_prob : array of shape (...)
        Score of each returned path (with its stop term under terminal semantics), dtype of
        ``scores``.

    Notes
    -----
    Ties between candidates are broken by the lowest node id. Cost O(B*C): the joint
    log-probabilities are accumulated level by level from the parents and reduced per
    level, with no ``(B, C)`` result, no beam and no ``(B, L, C)`` tensor.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops import best_paths
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> scores = np.array([[2.0, 0, 0, 3, 0, 0, 0, 1, 0]])
    >>> paths, log_prob = best_paths(scores, tree, "sibling")
    >>> paths
    array([[0, 3, 7]])
    >>> best_paths(scores, tree, "sibling", threshold=0.6)[0]
    array([[ 0,  3, -1]])
    """
    check_semantics(semantics, stop)
    log_t = None
    if threshold is not None:
        threshold = float(threshold)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold}")
        log_t = math.log(threshold) if threshold > 0 else -math.inf
    p = prepare(_no_grad(scores), tree, partition, stop, mask_value)
    paths, value = p.backend.best_paths(p.x, p.lay, p.arr, p.mv, semantics == "terminal", log_t)
    paths, value = _blank_rows(p.x, paths, value)
    return restore(paths, p.lead, p.lay.n_levels), restore(value, p.lead)


def _stable_topk(V: Any, k: int) -> Any:
    """Column indices of the ``k`` largest values per row, ties by ascending column: ``(B, k)``."""
    n = V.shape[1]
    if is_torch_array(V):
        import torch

        kth = torch.topk(V, k, dim=1).values[:, -1:]
        sel = V >= kth
        width = int(sel.sum(1).max()) if V.shape[0] else 0
        if width * 4 >= n:  # mass ties: a full stable sort is as cheap
            return torch.sort(V, dim=1, descending=True, stable=True).indices[:, :k]
        rows, cols = sel.nonzero(as_tuple=True)  # row-major: columns ascending in each row
        rank = sel.cumsum(1)[rows, cols] - 1
        idx = torch.full((V.shape[0], width), n, dtype=torch.int64, device=V.device)
        idx[rows, rank] = cols
        vals = torch.cat([V, V.new_full((V.shape[0], 1), -math.inf)], 1).gather(1, idx)
        order = torch.sort(vals, dim=1, descending=True, stable=True).indices[:, :k]
        return idx.gather(1, order)
    if is_numpy_array(V):
        kth = -np.partition(-V, k - 1, axis=1)[:, k - 1:k]
        sel = V >= kth
        width = int(sel.sum(1).max()) if V.shape[0] else 0
        if width * 4 >= n:
            return np.argsort(-V, axis=1, kind="stable")[:, :k]
        rows, cols = np.nonzero(sel)
        rank = np.cumsum(sel, axis=1)[rows, cols] - 1
        idx = np.full((V.shape[0], width), n, dtype=np.int64)
        idx[rows, rank] = cols
        vals = np.take_along_axis(np.concatenate([V, np.full((V.shape[0], 1), -np.inf, V.dtype)], 1), idx, 1)
        order = np.argsort(-vals, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(idx, order, 1)
    xp = array_namespace(V)
    return xp.argsort(V, axis=1, descending=True, stable=True)[:, :k]


def topk_paths(
    scores: Any,
    tree: Tree,
    k: int,
    partition: str = "level",
    stop: bool = False,
    semantics: str = "partial",
    mask_value: float | None = None,
) -> tuple[Any, Any]:
    """The ``k`` valid ancestral paths of highest joint log-probability, exactly.

    Parameters
    ----------
    scores : array of shape (..., n_outputs)
    tree : Tree
    k : int
        Number of paths per sample, at most the number of candidates (the leaves under
        partial semantics, all nodes under terminal semantics). Not an integer (``1.5``):
        :class:`TypeError`.
    partition, stop, semantics, mask_value
        As in :func:`best_paths`.

    Returns
    -------
    paths : array of int64 of shape (..., k, n_levels)
        Ancestral paths padded with ``-1``, best first; equal scores in ascending order of
        their final node id.
    log_prob : array of shape (..., k)
        Score of each path, non-increasing.

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops import topk_paths
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> paths, log_prob = topk_paths(np.zeros(9), tree, 3, "sibling")
    >>> paths  # three leaves of probability 1/4 (ids 2, 4, 5) before those of 1/12
    array([[ 0,  2, -1],
           [ 1,  4, -1],
           [ 1,  5, -1]])
    >>> np.exp(log_prob)
    array([0.25, 0.25, 0.25])
    """
    check_semantics(semantics, stop)
    p = prepare(_no_grad(scores), tree, partition, stop, mask_value)
    arr = p.arr
    n_cand = p.lay.n_classes if semantics == "terminal" else int(arr["leaves"].shape[0])
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an integer number of paths, got {k!r} ({type(k).__name__})")
    k = int(k)
    if not 1 <= k <= n_cand:
        what = "nodes" if semantics == "terminal" else "leaves"
        raise ValueError(f"k must be in [1, {n_cand}] (the tree has {n_cand} candidate {what}), got {k}")
    joint = p.backend.node_log_probs(p.x, p.lay, arr, p.mv, semantics == "terminal")
    ops = ops_for(p.x)
    if semantics == "terminal":
        cand_ids, values = None, joint
    else:
        cand_ids, values = arr["leaves"], ops.take(joint, arr["leaves"])
    # NaN ranks as -inf here (the ranking needs a total order); rows holding one are blanked below.
    values = ops.where(array_namespace(values).isnan(values), -math.inf, values)
    order = _stable_topk(values, k)  # (N, k) positions in `values`
    xp = array_namespace(p.x)
    flat = xp.reshape(order, (-1,))
    log_prob = _take_rows(values, order)
    nodes = flat if cand_ids is None else ops.take1(cand_ids, flat)
    paths = xp.reshape(ops.take1(arr["paths_ext"], nodes), (-1, k, p.lay.n_levels))
    paths, log_prob = _blank_rows(p.x, paths, log_prob)
    return xp.reshape(paths, (*p.lead, k, p.lay.n_levels)), xp.reshape(log_prob, (*p.lead, k))


def _take_rows(values: Any, order: Any) -> Any:
    """``values[i, order[i, j]]`` for every row ``i``."""
    if is_torch_array(values):
        return values.gather(1, order)
    xp = array_namespace(values)
    if is_numpy_array(values) or hasattr(xp, "take_along_axis"):
        return xp.take_along_axis(values, order, axis=1)
    n = values.shape[1]
    base = xp.reshape(xp.arange(values.shape[0], device=device(values)) * n, (-1, 1))
    return xp.reshape(xp.take(xp.reshape(values, (-1,)), xp.reshape(order + base, (-1,))), order.shape)


def expected_hf1_paths(paths: Any, log_prob: Any) -> tuple[Any, Any]:
    """Among the given candidate paths and their ancestors, the one of highest expected hF1.

    The best path (:func:`best_paths`) is the most probable *answer*: right for exact
    accuracy, but hierarchical F1 gives partial credit for shared ancestors, so when the
    mass is split between deep rivals a common ancestor can be worth more. With ``p_j`` the
    probabilities of ``k`` candidate answers ``a_j`` (renormalised over them), every prefix
    ``m`` of a candidate path is scored by ``sum_j p_j * 2 |anc(m) & anc(a_j)| / (|anc(m)| +
    |anc(a_j)|)`` -- the expected per-sample hierarchical F1 if the answer is among the
    candidates -- and the best prefix is returned. It needs the tree only through the paths
    (ancestor sets are path prefixes).

    Parameters
    ----------
    paths : torch.Tensor or ndarray of int64 of shape (n, k, n_levels)
        Candidate answers as ancestral paths padded with ``-1`` (e.g. from
        :func:`topk_paths` with terminal semantics), best first.
    log_prob : torch.Tensor or ndarray of shape (n, k)
        Their joint log-probabilities; NaN rows give the empty path.

    Returns
    -------
    paths : same kind of array, int64 of shape (n, n_levels)
        The chosen path per row (ties: the more probable candidate, then the shallower prefix).
    expected_hf1 : same kind of array of shape (n,)
        Its expected hierarchical F1 under the renormalised candidate distribution.

    Examples
    --------
    >>> import numpy as np
    >>> paths = np.array([[[0, 2, 5], [0, 2, 6], [0, 3, -1]]])   # two deep rivals and a third
    >>> log_prob = np.log([[0.34, 0.33, 0.33]])
    >>> best, value = expected_hf1_paths(paths, log_prob)
    >>> best                                               # their common parent 2
    array([[ 0,  2, -1]])
    >>> round(float(value[0]), 3)
    0.701
    """
    import torch

    numpy_in = not is_torch_array(paths)
    P = torch.as_tensor(np.asarray(paths) if numpy_in else paths, dtype=torch.int64)
    lp = torch.as_tensor(np.asarray(log_prob) if numpy_in else log_prob, dtype=torch.float64, device=P.device)
    n, k, L = P.shape
    valid = P >= 0
    length = valid.sum(-1)  # (n, k)
    p = torch.softmax(torch.where(torch.isnan(lp), -math.inf, lp), dim=1)
    p = torch.where(torch.isnan(p), 0.0, p)  # rows of -inf only: no candidate
    same = (P.unsqueeze(2) == P.unsqueeze(1)) & valid.unsqueeze(2) & valid.unsqueeze(1)  # (n, i, j, L)
    common = same.cumprod(-1).sum(-1)  # (n, i, j): length of the common prefix
    size = torch.arange(1, L + 1, device=P.device)  # |anc(m)| of the prefix of length d + 1
    shared = torch.minimum(size.view(1, 1, 1, L), common.unsqueeze(-1))  # (n, i, j, d)
    f1 = 2 * shared / (size.view(1, 1, 1, L) + length.view(n, 1, k, 1)).clamp_min(1)
    expected = (p.view(n, 1, k, 1) * f1).sum(2)  # (n, i, d)
    expected = torch.where(size.view(1, 1, L) <= length.unsqueeze(-1), expected, -1.0)
    best = expected.reshape(n, k * L).argmax(1)  # first maximum: candidate order, then depth
    i, d = best // L, best % L
    rows = torch.arange(n, device=P.device)
    chosen = torch.where(torch.arange(L, device=P.device).view(1, L) <= d.view(n, 1), P[rows, i], PAD)
    value = expected[rows, i, d]
    empty = length[:, 0] == 0
    chosen = torch.where(empty.view(n, 1), PAD, chosen)
    value = torch.where(empty, 0.0, value)
    if numpy_in:
        return chosen.numpy(), value.numpy()
    return chosen, value.to(log_prob.dtype)


def decoding_route(
    partition: str,
    *,
    on_demand: bool = False,
    threshold: float | None = None,
    score: Any = None,
    device: Any = None,
) -> str:
    """Which exact decoding runs: the one place the route is chosen.

    The classifier asks it whether to decode its scores or search from its hidden rows, and
    :func:`~hiclass_parallel.ops.best_first.best_first_paths` asks it, per batch, which
    search runs. (The exportable decoder, ``TreeDecoder``, is the exhaustive route written for
    ``torch.export``.)

    Parameters
    ----------
    partition : {"level", "sibling"}
    on_demand : bool, default=False
        Whether the caller can score columns on demand (a score function of hidden rows, as
        a path-locally trained classifier has) instead of holding every score.
    threshold : float, default=None
        The cut-off of threshold decoding, which reads every score.
    score : callable, default=None
        The score function of a batch (``score(rows, columns) -> scores``): it picks the search.
    device : torch.device or str, default=None
        Where the model's scores are computed (``None``: the CPU).

    Returns
    -------
    route : str
        ``"exhaustive"``: every score of every row (:func:`best_paths`, :func:`topk_paths`),
        for scores not on demand, the level partition, threshold decoding, and a model on a
        GPU (or other non-CPU device) asking whether to search: there one product scores a
        batch's every class in about the time of the search's first expansion, and the
        search's data-dependent steps wait on the device at every expansion (on a GPU the
        exhaustive route is many times faster, with the same paths). ``"best_first_c"``: the C
        search (:mod:`.engine._native_best_first`) of a
        linear output layer (``score.linear_parts()``) of float32 or float64 tensors on the
        CPU, where the optional library was built. ``"best_first_torch"``: the batched torch
        search, for any other score function or device. ``"best_first"`` when ``score`` is not
        given (on the CPU): one of the two, chosen per batch from its score function. With
        ``score`` given the caller searches, so the answer is always the search that runs.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.ops.decode import decoding_route
    >>> decoding_route("level", on_demand=True)
    'exhaustive'
    >>> decoding_route("sibling", on_demand=True, score=lambda rows, columns: torch.zeros(len(rows)))
    'best_first_torch'
    >>> decoding_route("sibling", on_demand=True, device="cuda")
    'exhaustive'
    """
    import torch

    if not on_demand or partition != "sibling" or threshold is not None:
        return "exhaustive"
    if score is None:  # whether to search at all: not on a GPU
        return "best_first" if device is None or torch.device(device).type == "cpu" else "exhaustive"
    return "best_first_c" if _c_searchable(score, device) else "best_first_torch"


def _c_searchable(score: Any, device: Any) -> bool:
    """Whether the C search can run ``score``: a linear layer of float32 or float64 CPU tensors."""
    import torch

    from .engine import _native_best_first

    parts = getattr(score, "linear_parts", None)
    matched = getattr(score, "matched_linear_parts", None)
    if (parts is None and matched is None) or (device is not None and torch.device(device).type != "cpu"):
        return False
    if not _native_best_first.available():
        return False
    tensors = parts() if parts is not None else matched()[:3]
    dtypes = {t.dtype for t in tensors}
    return (len(dtypes) == 1 and dtypes.pop() in (torch.float32, torch.float64)
            and all(t.device.type == "cpu" for t in tensors))
