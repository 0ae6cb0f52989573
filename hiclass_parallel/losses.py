"""Layer 5: torch criteria built on the lean engine (:mod:`hiclass_parallel.ops`).

:class:`HierarchicalCrossEntropy` is the paper's training loss -- cross-entropy at every
labelled level of every sample, in parallel -- computed without the ``(B, L, C)`` tensor:
each row's loss is ``logsumexp(its group) - score(its class)``, the group log-normalisers come
from one segment reduction over ``(B, C)``, and the backward pass is one fused
``softmax * weight - one_hot`` over ``(B, C)``.

:class:`PathLocalCrossEntropy` is the same loss for the sibling partition, but takes a *score
function* instead of the full scores and asks it only for the groups on each sample's
labelled path (:mod:`hiclass_parallel.ops.sibling_paths`): per sample, the sum of the group
sizes on its path times the hidden width, never classes times hidden. Loss and gradients are
those of ``HierarchicalCrossEntropy(tree, "sibling", stop, ...)`` on the full scores (tested
on random trees with shuffled ids). The level partition has no such exact form (see
:mod:`hiclass_parallel.ops.sibling_paths`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .ops.engine._engine import SEMANTICS, autograd, backend_for, layout, layout_arrays, normalise_mask_value
from .ops.groups import node_log_probs
from .ops.sibling_paths import ScoreFn, expand_rows, path_rows, score_matrix, segment_logsumexp, sibling_plan
from .tree import PAD, PARTITIONS, Tree

__all__ = ["HierarchicalCrossEntropy", "PathLocalCrossEntropy", "DagCrossEntropy", "in_batch_level_loss", "REDUCTIONS"]

#: Reductions of :class:`HierarchicalCrossEntropy`.
REDUCTIONS = ("mean", "sum", "none")

# Layout arrays the loss needs on the device, registered as (non-persistent) buffers.
_BUFFERS = ("src", "pad", "group_pos", "col_group", "log_masked", "paths_ext", "depth", "stop_col")


def _check_args(tree: Tree, stop: bool, reduction: str, semantics: str | None) -> str:
    """The arguments both criteria take, checked; returns the semantics (``None``: by ``stop``)."""
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be a hiclass_parallel.Tree, got {type(tree).__name__}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if semantics is None:
        semantics = "terminal" if stop else "partial"
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
    return semantics


def _check_level_contrast(weight: Any) -> float:
    if isinstance(weight, bool) or not np.isfinite(float(weight)) or float(weight) < 0:
        raise ValueError(f"level_contrast must be a finite number >= 0, got {weight!r}")
    return float(weight)


def _row_weights(sample_weight: torch.Tensor | None, target: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``sample_weight`` as ``(B,)`` values of ``dtype`` on the target's device (``None`` stays
    ``None``), and the target with every zero-weight sample made unlabelled (``-1``): such a
    sample then counts nowhere, not even among the in-batch candidates, as if it were dropped."""
    if sample_weight is None:
        return None, target
    weight = torch.as_tensor(sample_weight).to(device=target.device, dtype=dtype)
    if weight.shape != (target.shape[0],):
        raise ValueError(f"sample_weight has shape {tuple(weight.shape)}; expected one weight per sample "
                         f"({target.shape[0]},)")
    return weight, torch.where(weight > 0, target, torch.full_like(target, PAD))


def _check_ids(target: torch.Tensor, n: int, what: str) -> None:
    """``target`` must be ``(B,)`` integer ids in ``[0, n)``, or ``-1`` for unlabelled samples."""
    if target.ndim != 1 or target.dtype.is_floating_point or target.dtype == torch.bool:
        raise ValueError(f"target must be {what} of shape (B,), got {target.dtype} {tuple(target.shape)}")
    bad = (target < PAD) | (target >= n)
    if bool(bad.any()):
        raise IndexError(f"target ids {sorted(set(target[bad].tolist()))[:5]} are out of range [0, {n}) (-1: unlabelled)")


class HierarchicalCrossEntropy(nn.Module):
    """Cross-entropy at every labelled level of every sample, in parallel, in O(B*C).

    The paper's loss (partition scores by level, flatten, drop padded rows, cross-entropy)
    without its ``(B, L, C)`` tensor; also for the sibling partition (a hierarchical
    softmax) and with stop columns.

    Parameters
    ----------
    tree : Tree
        The class tree.
    partition : {"level", "sibling"}, default="level"
        ``"level"``: one softmax per depth (the paper's). ``"sibling"``: one softmax per
        set of siblings.
    stop : bool, default=False
        Whether the scores carry stop columns (width
        :func:`~hiclass_parallel.ops.groups.n_outputs`).
    reduction : {"mean", "sum", "none"}, default="mean"
        ``"mean"``: the paper's mean over all labelled rows (levels, plus stop rows); with
        ``level_weights``, the weighted mean ``sum(w * loss) / sum(w)``. ``"sum"``: the
        (weighted) sum. ``"none"``: the (weighted) sum of each sample's rows, shape ``(B,)``.
        A batch without any labelled row gives 0 (not NaN) under ``"mean"``.
    level_weights : sequence of float of length n_levels, default=None
        Non-negative weight of the rows at each depth; a stop row counts at the depth of
        the group it belongs to (one below the labelled node).
    ignore_index : int, default=-1
        Target value of an unlabelled sample (contributes nothing); in path targets, the
        padding value ``-1`` and ``ignore_index`` both mark missing levels.
    semantics : {"partial", "terminal"}, default=None
        How to read a label at an internal node. ``"partial"`` (the paper's): known down to
        that node, finer levels unknown; only the levels it reaches are trained.
        ``"terminal"``: the node is the answer; with ``stop=True`` it also trains the stop
        column of the group below it ("stop here"). A leaf ends every path through it, so
        a leaf label needs no stop row. ``None`` means ``"terminal"`` when ``stop=True``,
        else ``"partial"``.
    mask_value : float, default=None
        ``None`` (or ``-inf``/``nan``): exact per-group softmax. A finite value reproduces
        the paper's dense rows filled with that value.
    validate : bool, default=True
        Check targets (ids in range, paths that exist in the tree). On a GPU this costs a
        device-to-host sync per call.

    Attributes
    ----------
    n_outputs : int
        Width of the scores the criterion expects.

    Notes
    -----
    The tree's arrays are registered as non-persistent buffers: ``.to(device)`` moves them,
    pickling keeps them, and ``state_dict`` stays free of them (they are derived from the
    tree, which the module keeps).

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.losses import HierarchicalCrossEntropy
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> criterion = HierarchicalCrossEntropy(tree)
    >>> scores = torch.zeros(2, criterion.n_outputs, requires_grad=True)
    >>> loss = criterion(scores, torch.tensor([6, -1]))  # a leaf at depth 2, an unlabelled sample
    >>> round(loss.item(), 4)  # mean of log 2, log 4 and log 3 (rows of levels 0, 1, 2)
    1.0594
    >>> loss.backward()
    >>> scores.grad.shape
    torch.Size([2, 9])
    """

    def __init__(
        self,
        tree: Tree,
        partition: str = "level",
        stop: bool = False,
        reduction: str = "mean",
        level_weights: Sequence[float] | None = None,
        ignore_index: int = -1,
        *,
        semantics: str | None = None,
        mask_value: float | None = None,
        validate: bool = True,
    ):
        super().__init__()
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")
        semantics = _check_args(tree, stop, reduction, semantics)
        self.tree = tree
        self.partition = partition
        self.stop = bool(stop)
        self.reduction = reduction
        self.ignore_index = int(ignore_index)
        self.semantics = semantics
        self.mask_value = mask_value
        self.validate = bool(validate)
        self._mask_value = normalise_mask_value(mask_value)
        lay = layout(tree, partition, self.stop)
        self.n_outputs = lay.n_outputs
        host = layout_arrays(lay, torch.empty(0))
        for name in _BUFFERS:
            self.register_buffer(name, host[name], persistent=False)
        if level_weights is None:
            weights = torch.ones(tree.n_levels + 1, dtype=torch.float64)
            self.weighted = False
        else:
            weights = torch.as_tensor(np.asarray(level_weights, dtype=np.float64))
            if weights.shape != (tree.n_levels,):
                raise ValueError(
                    f"level_weights has shape {tuple(weights.shape)}; expected one weight per level ({tree.n_levels},)"
                )
            if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
                raise ValueError(f"level_weights must be finite and non-negative, got {weights.tolist()}")
            weights = torch.cat([weights, weights.new_zeros(1)])  # a stop below the last level never occurs
            self.weighted = True
        self.register_buffer("level_weights", weights, persistent=False)

    def extra_repr(self) -> str:
        return (
            f"n_outputs={self.n_outputs}, partition={self.partition!r}, stop={self.stop}, "
            f"semantics={self.semantics!r}, reduction={self.reduction!r}"
        )

    def _arrays(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in _BUFFERS}

    def target_nodes(self, target: torch.Tensor) -> torch.Tensor:
        """Final node id of each target (``-1`` for unlabelled), from ids ``(B,)`` or paths ``(B, L)``."""
        if target.dtype.is_floating_point or target.dtype == torch.bool or target.is_complex():
            raise TypeError(f"target must hold integer node ids, got dtype {target.dtype}")
        target = target.to(device=self.paths_ext.device, dtype=torch.int64)
        C, L = self.tree.n_classes, self.tree.n_levels
        if target.ndim == 1:
            missing = target == PAD
            if self.ignore_index != PAD:
                missing |= target == self.ignore_index
            if self.validate:
                bad = ~missing & ((target < 0) | (target >= C))
                if bool(bad.any()):
                    raise IndexError(
                        f"target ids {sorted(set(target[bad].tolist()))[:5]} are out of range [0, {C}) "
                        f"(use {self.ignore_index} for unlabelled samples)"
                    )
            return torch.where(missing, PAD, target)
        if target.ndim != 2 or target.shape[1] > L:
            raise ValueError(
                f"target has shape {tuple(target.shape)}: expected node ids (B,) or paths (B, L) with L <= {L}"
            )
        paths = torch.where(target == self.ignore_index, PAD, target)
        if paths.shape[1] < L:
            paths = torch.cat([paths, paths.new_full((paths.shape[0], L - paths.shape[1]), PAD)], 1)
        count = (paths != PAD).sum(1)
        nodes = paths.gather(1, (count - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
        nodes = torch.where(count > 0, nodes, PAD)
        if self.validate:
            in_range = (nodes >= PAD) & (nodes < C)
            expected = self.paths_ext[torch.where(in_range & (nodes >= 0), nodes, C)]
            wrong = ~in_range | (expected != paths).any(1)
            if bool(wrong.any()):
                row = int(wrong.nonzero()[0, 0])
                raise ValueError(
                    f"target path {paths[row].tolist()} (row {row}) is not an ancestral path of the tree, "
                    f"right-padded with -1"
                )
        return nodes

    def forward(self, scores: torch.Tensor, target: torch.Tensor,
                sample_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Loss of ``scores (B, n_outputs)`` against node ids ``(B,)`` or paths ``(B, L)``.

        ``sample_weight`` (``(B,)``, non-negative; ``None``: all 1) multiplies each sample's
        rows: ``"mean"`` is then ``sum(w * loss) / sum(w)`` over the labelled rows, so an
        integer weight counts as that many copies of the sample, and a zero weight as none."""
        if scores.ndim != 2 or scores.shape[1] != self.n_outputs:
            raise ValueError(
                f"scores have shape {tuple(scores.shape)}; expected (batch, {self.n_outputs}) "
                f"for partition={self.partition!r}, stop={self.stop}"
            )
        if not scores.dtype.is_floating_point:
            raise TypeError(f"scores must be floating point, got dtype {scores.dtype}")
        if target.shape[0] != scores.shape[0]:
            raise ValueError(f"target has {target.shape[0]} samples but scores have {scores.shape[0]}")
        weight, nodes = _row_weights(sample_weight, self.target_nodes(target), scores.dtype)
        lay = layout(self.tree, self.partition, self.stop)
        backend = backend_for(scores, lay)
        if backend.fuses_loss:
            arrays = {**self._arrays(), "level_weights": self.level_weights}
            stop_rows = self.stop and self.semantics == "terminal"
            per_sample, counts = autograd().FusedCrossEntropy.apply(
                scores, nodes, backend, lay, arrays, self._mask_value, stop_rows
            )
            if weight is not None:  # per-sample sums: the sample's weight scales them and their count
                per_sample, counts = per_sample * weight, counts * weight
            return self._reduce(per_sample, counts)
        C, L = self.tree.n_classes, self.tree.n_levels
        labelled = nodes >= 0
        safe = torch.where(labelled, nodes, C)
        cols = self.paths_ext[safe]  # (B, L), -1 beyond the label's depth
        used = cols >= 0
        weights = self.level_weights[:L].to(scores.dtype).expand_as(cols) * used
        cols = cols.clamp_min(0)
        if self.stop and self.semantics == "terminal":
            stop_col = self.stop_col[safe.clamp_max(C - 1)]
            has_stop = labelled & (stop_col >= 0)
            depth = self.depth[safe.clamp_max(C - 1)]
            stop_w = self.level_weights[(depth + 1).clamp_max(L)].to(scores.dtype) * has_stop
            cols = torch.cat([cols, stop_col.clamp_min(0).unsqueeze(1)], 1)
            weights = torch.cat([weights, stop_w.unsqueeze(1)], 1)
        if weight is not None:
            weights = weights * weight.unsqueeze(1)
        groups = self.col_group[cols]
        per_sample = autograd().GroupCrossEntropy.apply(
            scores, cols, groups, weights, backend, lay, self._arrays(), self._mask_value
        )
        return self._reduce(per_sample, weights)

    def _reduce(self, per_sample: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Apply ``reduction``; ``weights`` holds the rows' weights (any shape) for the mean."""
        if self.reduction == "none":
            return per_sample
        total = per_sample.sum()
        if self.reduction == "sum":
            return total
        count = weights.sum()
        return total / torch.where(count > 0, count, torch.ones_like(count))


class PathLocalCrossEntropy(nn.Module):
    """Exact sibling cross-entropy over the groups on each labelled path, scored on demand.

    Used by :class:`~hiclass_parallel.estimators.HierarchicalClassifier` with the sibling
    partition and a module that scores columns on demand (:class:`~hiclass_parallel.estimators.SparseMLP`).

    Parameters
    ----------
    tree : Tree
        The class tree.
    stop : bool, default=False
        Whether the score vector has stop columns (one per internal node, after the ``C``
        class columns, as :func:`~hiclass_parallel.ops.groups.n_outputs` counts them).
    reduction : {"mean", "sum", "none"}, default="mean"
        ``"mean"``: mean over all labelled rows (one per path node, plus stop rows), as
        :class:`~hiclass_parallel.losses.HierarchicalCrossEntropy`; ``"sum"``; ``"none"``:
        per-sample sums ``(B,)``.
    semantics : {"partial", "terminal"}, default=None
        As in :class:`~hiclass_parallel.losses.HierarchicalCrossEntropy`: ``None`` means
        ``"terminal"`` with ``stop=True``, else ``"partial"``.
    level_contrast : float, default=0.0
        Weight of an extra term while training (``criterion.train()``; evaluation mode gives
        the exact sibling loss alone, so validation losses stay comparable): at every depth,
        each sample's ancestor at that depth against the ancestors at that depth of the
        other samples of the batch, one softmax per depth over those in-batch classes (the
        paper's level partition, with the batch as the sample of its classes). The sibling
        softmax only ever compares siblings; this term also pushes apart classes of different
        branches that the input confuses. It costs one product of the batch against its
        distinct ancestors. :class:`~hiclass_parallel.estimators.HierarchicalClassifier` sets
        0.1 for path-local training: a larger weight favours hierarchical F1, a smaller one
        the exact class. With ``"mean"`` the term is the mean over (sample,
        depth) rows; with ``"sum"`` and ``"none"``, sums (per sample for ``"none"``).

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.losses import HierarchicalCrossEntropy
    >>> from hiclass_parallel.losses import PathLocalCrossEntropy
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> scores = torch.randn(4, 9, dtype=torch.float64)
    >>> target = torch.tensor([6, 2, 1, -1])
    >>> local = PathLocalCrossEntropy(tree)(lambda rows, cols: scores[rows, cols], target)
    >>> full = HierarchicalCrossEntropy(tree, "sibling")(scores, target)
    >>> bool(torch.isclose(local, full))
    True
    """

    def __init__(
        self, tree: Tree, stop: bool = False, reduction: str = "mean", *, semantics: str | None = None,
        level_contrast: float = 0.0,
    ):
        super().__init__()
        semantics = _check_args(tree, stop, reduction, semantics)
        level_contrast = _check_level_contrast(level_contrast)
        self.tree = tree
        self.stop = bool(stop)
        self.reduction = reduction
        self.semantics = semantics
        self.level_contrast = level_contrast
        self.n_outputs = sibling_plan(tree, self.stop).n_outputs

    def extra_repr(self) -> str:
        return (f"n_outputs={self.n_outputs}, stop={self.stop}, semantics={self.semantics!r}, "
                f"reduction={self.reduction!r}, level_contrast={self.level_contrast}")

    def forward(self, score: ScoreFn, target: torch.Tensor, sample_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Loss of the scores ``score(samples, columns)`` against node ids ``target (B,)``.

        ``-1`` marks an unlabelled sample. Returns a scalar (``"mean"``, ``"sum"``) or
        per-sample losses ``(B,)`` (``"none"``). ``sample_weight`` (``(B,)``, non-negative;
        ``None``: all 1) multiplies each sample's rows, of both terms: ``"mean"`` is then
        ``sum(w * loss) / sum(w)`` over each term's rows, so an integer weight counts as that
        many copies of the sample; a zero-weight sample counts as dropped (not even an in-batch
        candidate).
        """
        _check_ids(target, self.tree.n_classes, "integer node ids")
        plan = sibling_plan(self.tree, self.stop)
        weight = None
        if sample_weight is not None:
            weight, target = _row_weights(sample_weight, target, torch.float64)
        sample, group, column = path_rows(plan, target, self.semantics == "terminal")
        row, cand, start = expand_rows(plan, group)
        values = score(sample[row], cand)
        lse = segment_logsumexp(values, row, group.shape[0])
        picked = values[start + plan.arrays(target)["col_pos"][column]]
        per_row = lse - picked
        B = target.shape[0]
        per_sample = torch.zeros(B, dtype=values.dtype, device=values.device).index_add(0, sample, per_row)
        contrast = None
        if self.training and self.level_contrast > 0:
            contrast = in_batch_level_loss(score, target, plan.arrays(target)["paths"])
        if weight is not None:
            weight = weight.to(values.dtype)
            per_sample, n_rows = per_sample * weight, weight[sample].sum()
            if contrast is not None:
                contrast = (contrast[0] * weight, _weighted_rows(target, plan.arrays(target)["paths"], weight))
            return _reduce(per_sample, torch.where(n_rows > 0, n_rows, torch.ones_like(n_rows)), self.reduction,
                           self.level_contrast, contrast)
        return _reduce(per_sample, max(int(sample.shape[0]), 1), self.reduction, self.level_contrast, contrast)


def _reduce(per_sample: torch.Tensor, n_rows: Any, reduction: str, weight: float,
            contrast: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """Per-sample losses reduced (``"mean"``: over ``n_rows``), plus ``weight`` times the in-batch
    level term ``contrast = (per-sample sums, its row count)`` reduced the same way (its mean
    over its own rows)."""
    if reduction == "none":
        return per_sample if contrast is None else per_sample + weight * contrast[0]
    total = per_sample.sum()
    if reduction == "sum":
        return total if contrast is None else total + weight * contrast[0].sum()
    mean = total / n_rows
    if contrast is None:
        return mean
    rows = contrast[1]  # a count, or a weighted one (of sample weights): only an empty term reads as 1
    return mean + weight * contrast[0].sum() / torch.where(rows > 0, rows, torch.ones_like(rows))


def _weighted_rows(target: torch.Tensor, paths: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The in-batch level term's (sample, depth) rows of a tree's single labels, each counted
    with its sample's weight: ``sum_b w_b * (depth of b's label + 1)``."""
    labelled = target >= 0
    rows = (paths[torch.where(labelled, target, 0)] >= 0).sum(1).to(weight.dtype)
    return (torch.where(labelled, rows, torch.zeros_like(rows)) * weight).sum()


def in_batch_level_loss(score: ScoreFn, target: torch.Tensor, paths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample sums of the in-batch level softmax loss, and the number of its rows (a tensor).

    For every labelled sample ``b`` and depth ``d`` of its path, the row's candidates are the
    distinct ancestors at depth ``d`` of the batch's targets; its loss is their logsumexp
    minus the score of ``b``'s own ancestor. All rows come from one score block: the batch
    against its distinct ancestors (``paths`` is the tree's ``(C, L)`` path table).

    Parameters
    ----------
    score : callable
        ``score(samples, columns) -> scores``, optionally with ``matrix(rows, columns)``
        (:func:`~hiclass_parallel.ops.sibling_paths.score_matrix`).
    target : torch.Tensor of shape (B,)
        Node ids; ``-1`` marks an unlabelled sample.
    paths : torch.Tensor of shape (n_classes, n_levels)
        The tree's ancestral paths (``Tree.paths``), ``-1``-padded.

    Returns
    -------
    per_sample : torch.Tensor of shape (B,)
    n_rows : torch.Tensor
        The number of (sample, depth) rows.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.losses import in_batch_level_loss
    >>> tree = Tree.from_parents([-1, -1, 0, 1])  # 0 > 2 and 1 > 3
    >>> scores = torch.zeros(2, 4)
    >>> paths = torch.as_tensor(tree.paths.copy())
    >>> loss, rows = in_batch_level_loss(lambda r, c: scores[r, c], torch.tensor([2, 3]), paths)
    >>> loss  # two depths, two equal candidates each: 2 log 2
    tensor([1.3863, 1.3863])
    >>> int(rows)
    4
    """
    owner = torch.nonzero(target >= 0).squeeze(1)
    return _level_loss_of_pairs(score, owner, target[owner], paths, target.shape[0])


def _level_loss_of_pairs(
    score: ScoreFn, owner: torch.Tensor, nodes: torch.Tensor, paths: torch.Tensor, n_samples: int,
    weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The in-batch level loss where a sample may own several target nodes (a DAG label's copies).

    ``(owner[i], nodes[i])`` pairs: sample ``owner[i]`` is right with ``nodes[i]``. At depth
    ``d`` a sample's positives are the distinct depth-``d`` ancestors of its nodes, and its row
    loss is ``logsumexp(all candidates) - logsumexp(its positives)``: with one node per sample,
    the score of its own ancestor. With ``weight`` (``(n_samples,)``), the row count returned
    counts each sample's rows with its weight.
    """
    samples, row_of = torch.unique(owner, return_inverse=True)  # block rows: the samples with pairs
    anc = paths[nodes]  # (P, L), PAD-padded
    valid = anc >= 0
    columns, where = torch.unique(anc[valid], return_inverse=True)
    block = score_matrix(score, samples, columns)  # (S, K)
    S, K, L = block.shape[0], block.shape[1], anc.shape[1]
    col_depth = (paths[columns] >= 0).sum(1) - 1
    # Every depth's logsumexp at once: shift each column by its row's max at its depth
    # (detached: the shift cancels in value and gradient), exponentiate once, and sum the
    # columns of each depth with one index_add. A depth without columns sums to 0; it is
    # read as 1 so that its log and gradient stay finite (`where` drops those rows).
    depth_index = col_depth.expand(S, -1)
    with torch.no_grad():
        lowest = torch.finfo(block.dtype).min
        shift = block.new_full((S, L), lowest).scatter_reduce(1, depth_index, block, "amax")
    sums = block.new_zeros(S, L).index_add(1, col_depth, (block - shift.gather(1, depth_index)).exp())
    lse_all = sums.masked_fill(sums == 0, 1.0).log() + shift
    # The positives: distinct (sample, column) pairs (two copies share their upper ancestors).
    pair_row = row_of.unsqueeze(1).expand(-1, L)[valid]
    positive = torch.unique(pair_row * K + where)
    pos_row, pos_col = positive // K, positive % K
    segment = pos_row * L + col_depth[pos_col]
    lse_pos = segment_logsumexp(block[pos_row, pos_col], segment, S * L).view(S, L)
    has = torch.zeros(S * L, dtype=torch.bool, device=block.device)
    has[segment] = True
    has = has.view(S, L)
    per_row = torch.where(has, lse_all - lse_pos.masked_fill(~has, 0.0), torch.zeros((), dtype=block.dtype, device=block.device))
    per_sample = torch.zeros(n_samples, dtype=block.dtype, device=block.device).index_add(0, samples, per_row.sum(1))
    if weight is not None:
        return per_sample, (has.sum(1).to(weight.dtype) * weight[samples]).sum()
    return per_sample, has.sum()


class DagCrossEntropy(nn.Module):
    """Cross-entropy of labels of a DAG: ``-log`` of the total probability of all their paths.

    A class with several parents (:class:`~hiclass_parallel.dag.Dag`) is unrolled into one copy
    per ancestral path (:meth:`Dag.unroll <hiclass_parallel.dag.Dag.unroll>`), so a label names
    several nodes of the unrolled tree. Every one of those paths is a correct reading of the
    label, so the loss of a sample is ``-logsumexp`` over its copies of their joint
    log-probabilities (:func:`~hiclass_parallel.ops.node_log_probs`): the model may put the mass
    on any path to the label, and on a tree (one copy per label) this is the per-sample sum of
    :class:`HierarchicalCrossEntropy`'s rows. Under the sibling partition with stops and
    terminal semantics, the copies' answer probabilities are disjoint events, so their sum is
    the probability that the answer is the label.

    Parameters
    ----------
    unrolled : UnrolledDag
        The unrolled DAG (its ``tree`` sets the score width).
    partition : {"level", "sibling"}, default="sibling"
    stop : bool, default=False
        Whether the scores carry stop columns.
    semantics : {"partial", "terminal"}, default=None
        ``None``: ``"terminal"`` with ``stop=True``, else ``"partial"`` (the copies' subtree
        probabilities under the sibling partition).
    reduction : {"mean", "sum", "none"}, default="mean"
        Mean over labelled samples, sum, or per-sample losses ``(B,)``.
    level_contrast : float, default=0.0
        Weight of :class:`PathLocalCrossEntropy`'s in-batch level term while training, with
        several positives: at depth ``d`` a sample's positives are the depth-``d`` ancestors of
        all its label's copies, and its row loss is the logsumexp over the batch's depth-``d``
        ancestors minus the logsumexp over its positives (on a tree, the single-label term).
        :class:`~hiclass_parallel.estimators.MultiLabelHierarchicalClassifier` sets 0.3 for
        path-local training (``docs/dag.md``). Added as ``weight x`` the mean over (sample,
        depth) rows for ``"mean"``, sums otherwise.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.dag import Dag
    >>> from hiclass_parallel.losses import DagCrossEntropy
    >>> unrolled = Dag.from_edges([("a", None), ("b", None), ("c", "a"), ("c", "b")]).unroll()
    >>> criterion = DagCrossEntropy(unrolled)
    >>> scores = torch.zeros(1, unrolled.tree.n_classes)  # a, b equally likely; c their only child
    >>> c = int(unrolled.dag.to_ids(["c"])[0])
    >>> float(criterion(scores, torch.tensor([c])))  # both paths to c: probability 1, loss 0
    0.0
    """

    def __init__(
        self,
        unrolled: Any,
        partition: str = "sibling",
        stop: bool = False,
        semantics: str | None = None,
        reduction: str = "mean",
        level_contrast: float = 0.0,
    ):
        super().__init__()
        semantics = _check_args(unrolled.tree, stop, reduction, semantics)
        self.level_contrast = _check_level_contrast(level_contrast)
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")
        if semantics == "terminal" and not stop:
            raise ValueError("semantics='terminal' needs stop=True")
        self.unrolled, self.tree = unrolled, unrolled.tree
        self.partition, self.stop, self.semantics, self.reduction = partition, bool(stop), semantics, reduction
        offsets = np.asarray(unrolled.copy_offsets, dtype=np.int64)
        counts = np.diff(offsets)
        width = int(counts.max()) if counts.size else 1
        copies = np.full((counts.size + 1, width), PAD, dtype=np.int64)  # last row: unlabelled
        slot = np.arange(width)
        filled = slot[None, :] < counts[:, None]
        copies[:-1][filled] = (offsets[:-1, None] + slot[None, :])[filled]
        self.register_buffer("copies", torch.from_numpy(copies), persistent=False)
        # the per-copy path losses of path-local training (a score function), sibling partition only
        self.path_local = (PathLocalCrossEntropy(self.tree, self.stop, "none", semantics=semantics)
                           if partition == "sibling" else None)

    def forward(self, scores: torch.Tensor | ScoreFn, target: torch.Tensor,
                sample_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Loss of the unrolled tree's scores against DAG node ids ``target (B,)`` (``-1``: unlabelled).

        ``scores`` is either every score, ``(B, n_outputs)``, or (sibling partition) a score
        function ``score(samples, columns)`` as :class:`PathLocalCrossEntropy` takes: then only
        the sibling groups on the paths of each label's copies are scored (path-local training).
        ``sample_weight`` (``(B,)``, non-negative; ``None``: all 1) multiplies each target's
        loss: ``"mean"`` is then ``sum(w * loss) / sum(w)`` (the level term's rows likewise); a
        zero weight counts as a dropped target.
        """
        n_nodes = self.copies.shape[0] - 1
        _check_ids(target, n_nodes, "DAG node ids")
        weight, target = _row_weights(sample_weight, target, torch.float64)
        labelled = target >= 0
        cols = self.copies[torch.where(labelled, target, n_nodes).to(self.copies.device)]
        contrast_on = self.training and self.level_contrast > 0
        if callable(scores) or contrast_on:  # the (sample, copy) pairs, once for both uses
            owner, slot = torch.nonzero(cols >= 0, as_tuple=True)
            copy_ids = cols[owner, slot]
        if callable(scores):
            log_p = self._path_local_log_probs(scores, owner, copy_ids, cols.shape[0])
        else:
            joint = node_log_probs(scores, self.tree, self.partition, self.stop, self.semantics)
            values = joint.gather(1, cols.clamp_min(0))
            values = torch.where(cols >= 0, values, torch.full_like(values, -torch.inf))
            log_p = torch.logsumexp(values, 1)
        per_sample = torch.where(labelled, -log_p, torch.zeros_like(log_p))
        contrast = None
        if contrast_on:
            score = scores if callable(scores) else (lambda rows, columns: scores[rows, columns])
            # the tree's path table, as the sibling plan keeps it on the device
            paths = sibling_plan(self.tree, self.stop).arrays(cols)["paths"]
            contrast = _level_loss_of_pairs(score, owner, copy_ids, paths, cols.shape[0],
                                            None if weight is None else weight.to(per_sample.dtype))
        if weight is not None:
            weight = weight.to(per_sample.dtype)
            per_sample, total = per_sample * weight, (weight * labelled).sum()
            if contrast is not None:
                contrast = (contrast[0] * weight, contrast[1])
            return _reduce(per_sample, torch.where(total > 0, total, torch.ones_like(total)), self.reduction,
                           self.level_contrast, contrast)
        return _reduce(per_sample, labelled.sum().clamp_min(1), self.reduction, self.level_contrast, contrast)

    def _path_local_log_probs(
        self, score: ScoreFn, owner: torch.Tensor, copy_ids: torch.Tensor, n_samples: int
    ) -> torch.Tensor:
        """``log`` of the summed path probabilities of each sample's copies, given as
        ``(owner, copy_ids)`` pairs, scoring only the groups on those paths: one
        :class:`PathLocalCrossEntropy` row per pair, then a segment log-sum-exp per sample."""
        if self.path_local is None:
            raise ValueError(
                "path-local DAG training (a score function) needs partition='sibling': under the level "
                "partition a group's normaliser spans a whole depth"
            )
        per_copy = self.path_local(lambda rows, columns: score(owner[rows], columns), copy_ids)  # -log P(each copy's path)
        return segment_logsumexp(-per_copy, owner, n_samples)
