"""A training step's plan: the batch as fixed-shape, padded index tensors, built on the host.

The torch route of :class:`~hiclass_parallel.losses.PathLocalCrossEntropy` plans every step on
the device it trains on: the rows of each labelled path (:func:`~hiclass_parallel.ops.sibling_paths.path_rows`),
their candidate columns (:func:`~hiclass_parallel.ops.sibling_paths.expand_rows`), the distinct
columns scored, the label checks. Their sizes depend on the data, so on a GPU each of them asks
the host for a size: a synchronisation. :class:`StepPlanner` does the same planning with NumPy on
the host (where the batch already is, so the label checks cost no round trip, and without a
Python loop over groups or rows) and pads every array to a power-of-two bucket of its size (the
batch's softmax rows, its distinct groups and their summed widths, its distinct columns,
features and input entries; the input's rows to the batch size): a plan's shapes take few
values, so the kernels compile, and a CUDA graph is captured, once per shape. The whole plan is
one ``int32`` buffer, so it goes to the device in one copy.

The plan holds two blocks of *softmax rows* of the same form: the sibling rows (one per
``(sample, depth)`` of each labelled path, plus a stop row under terminal semantics) and, with
the in-batch level term, the level rows (one per ``(sample, depth)``, whose candidates are the
batch's distinct ancestors at that depth). A row names its sample, a slot of its block's table
(the candidate columns of a group, or of a depth: a flat table with a pointer per slot, so a
wide group does not widen the others), its target's position among them and its
weight, the normalisation of the mean already in it: the step's loss is then the plain sum of
``weight * (logsumexp(candidates) - score(target))`` over the rows. Candidates are positions in
the plan's distinct columns ``out_rows``, which are also the output rows the step updates;
``in_rows`` are the input rows (features) it updates.

A group wider than the planner's ``sample`` limit (the classifier's ``softmax_sample``: the
full WordNet tree's top level, tens of thousands of classes that every row scores) is scored on
a sampled candidate set shared by the batch, as the fused CPU step does: the batch's targets in
the group and uniform draws without replacement from its other columns, up to ``size``
candidates, each drawn column's logit corrected by ``log(others / drawn)`` (the block's
``offset``, parallel to its table; 0 for targets and for exact groups). The draws come from the
``seed`` given with the batch; prediction never comes here and stays exact.

A planner is a plain callable, ``planner(X, y, sample_weight, seed) -> StepPlan``, so a data-loader
worker can run it while the previous step trains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .....ops.sibling_paths import SiblingPlan
from .....tree import PAD

__all__ = ["StepPlan", "StepPlanner", "bucket"]

#: The integer arrays of a plan, and the float ones (stored bit for bit in the same buffer).
_INT_FIELDS = ("row_ptr", "entry_pos", "entry_row", "in_rows", "out_rows", "present", "entry_word", "text_ptr",
               "text_word",
               "sib_sample", "sib_slot", "sib_target", "sib_table_ptr", "sib_table",
               "lvl_sample", "lvl_slot", "lvl_target", "lvl_table_ptr", "lvl_table")
_FLOAT_FIELDS = ("entry_value", "sib_weight", "lvl_weight", "n_samples", "text_value", "sib_offset", "lvl_offset")
_ALIGN = 4  # int32 elements: every array starts on a 16-byte boundary
_INT32_LIMIT = 2**31


def bucket(n: int, floor: int = 16) -> int:
    """The padded size of ``n``: the next power of two at least ``max(n, floor)``.

    Examples
    --------
    >>> from hiclass_parallel.estimators.networks.engines.device import _plan
    >>> _plan.bucket(3), _plan.bucket(17), _plan.bucket(64)
    (16, 32, 64)
    """
    n = max(int(n), int(floor), 1)
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True, eq=False)
class StepPlan:
    """One step's padded index tensors, all views of one ``int32`` buffer.

    Attributes
    ----------
    buffer : torch.Tensor of int32
        Every array, back to back (floats stored bit for bit).
    fields : dict
        ``name -> (offset, shape, is_float)`` of each array in ``buffer``.
    n_samples : int
        Rows of the batch (before padding to ``batch_rows``).
    key : tuple of int
        The shapes of the plan: two plans with the same key have arrays of the same shapes (a
        CUDA graph captured for one replays for the other).

    Notes
    -----
    The arrays (``plan["name"]``):

    - ``row_ptr (batch_rows + 1,)``: each sample's input entries ``[row_ptr[b], row_ptr[b + 1])``;
      ``entry_pos (Z,)`` the position of each entry's feature in ``in_rows``, ``entry_value (Z,)``
      its value; ``in_rows (UF,)`` the distinct features (``-1`` pads);
    - ``out_rows (U,)``: the distinct output columns the rows score (``-1`` pads);
    - per block ``sib`` and ``lvl``: ``*_sample (R,)``, ``*_slot (R,)``, ``*_target (R,)`` (the
      target's position in the slot's candidates), ``*_weight (R,)`` (0 for a padding row),
      ``*_table (TC,)`` (every slot's candidates as positions in ``out_rows``) and
      ``*_table_ptr (T,)`` (slot ``s``'s candidates are ``table[ptr[s]:ptr[s + 1]]``);
    - ``n_samples (1,)``: the batch's real rows, as a float (the loss accumulator weighs each step's
      loss by it, as skorch averages batch losses).
    """

    buffer: torch.Tensor
    fields: dict
    n_samples: int
    key: tuple
    _views: dict = field(default_factory=dict, repr=False)

    def __getitem__(self, name: str) -> torch.Tensor:
        view = self._views.get(name)
        if view is None:
            offset, shape, is_float = self.fields[name]
            size = int(np.prod(shape))
            view = self.buffer[offset:offset + size].view(shape)
            if is_float:
                view = view.view(torch.float32)
            self._views[name] = view
        return view

    def pinned(self) -> StepPlan:
        """The plan in pinned host memory where CUDA is available (a copy from it to the device
        does not wait), else itself."""
        if self.buffer.device.type != "cpu" or not torch.cuda.is_available() or self.buffer.is_pinned():
            return self
        return StepPlan(self.buffer.pin_memory(), self.fields, self.n_samples, self.key)

    def to(self, device: Any, non_blocking: bool = True) -> StepPlan:
        """The plan on ``device``, in one copy (from pinned memory for CUDA, so it does not wait)."""
        device = torch.device(device)
        if self.buffer.device == device:
            return self
        buffer = self.buffer
        if device.type == "cuda" and buffer.device.type == "cpu" and not buffer.is_pinned():
            buffer = buffer.pin_memory()
        return StepPlan(buffer.to(device, non_blocking=non_blocking), self.fields, self.n_samples, self.key)


def _pad(values: np.ndarray, size: int, fill: int | float) -> np.ndarray:
    out = np.full(size, fill, dtype=values.dtype)
    out[:values.size] = values
    return out


class StepPlanner:
    """Turns a batch into a :class:`StepPlan`: ``planner(X, y, sample_weight=None)``.

    Parameters
    ----------
    plan : SiblingPlan
        The tree's sibling groups (:func:`~hiclass_parallel.ops.sibling_paths.sibling_plan`).
    terminal : bool
        Terminal semantics: an internal target adds its stop row (with stop columns).
    level_contrast : float, default=0.0
        Weight of the in-batch level term (0: no level rows).
    batch_rows : int, default=None
        Pad every batch to this many rows (the net's batch size: the last, shorter batch then
        gets the same shapes); ``None``: each batch's own size.
    floor : int, default=16
        The smallest bucket of each padded size.
    text : tuple of arrays, default=None
        The class texts of a :class:`~hiclass_parallel.estimators.SparseMLP` with
        ``class_features``: its ``vocabulary_position`` and its head's ``text_ptr``,
        ``text_idx`` and ``text_val``; the plan then holds the match term's arrays too.
    sample : int or (int, int), default=0
        The sampled softmax of wide groups: a group wider than ``above`` columns trains on at
        most ``size`` candidates (an int: both); 0: every softmax exact. Applies to the batches
        planned with a ``seed``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.ops.sibling_paths import sibling_plan
    >>> from hiclass_parallel.estimators.networks.engines.device import StepPlanner
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> planner = StepPlanner(sibling_plan(tree, stop=False), terminal=False)
    >>> step = planner(sp.csr_matrix(np.eye(2, 5, dtype=np.float32)), np.array([6, -1]))
    >>> step["sib_weight"][:4].tolist()  # node 6's path 0 > 3 > 6: three rows, mean over them
    [0.3333333432674408, 0.3333333432674408, 0.3333333432674408, 0.0]
    """

    def __init__(self, plan: SiblingPlan, terminal: bool, level_contrast: float = 0.0,
                 batch_rows: int | None = None, floor: int = 16, text: tuple[Any, Any, Any, Any] | None = None,
                 sample: int | tuple[int, int] = 0):
        if not isinstance(plan, SiblingPlan):
            raise TypeError(f"plan must be a SiblingPlan (ops.sibling_paths.sibling_plan), got {type(plan).__name__}")
        level_contrast = float(level_contrast)
        if not np.isfinite(level_contrast) or level_contrast < 0:
            raise ValueError(f"level_contrast must be a finite number >= 0, got {level_contrast!r}")
        if batch_rows is not None and int(batch_rows) <= 0:
            raise ValueError(f"batch_rows must be a positive int or None, got {batch_rows!r}")
        if plan.n_outputs >= _INT32_LIMIT:
            raise ValueError(f"the tree has {plan.n_outputs:,} outputs: a step plan holds int32 column ids "
                             f"(fewer than {_INT32_LIMIT:,})")
        self.plan = plan
        self.terminal = bool(terminal)
        self.level_contrast = level_contrast
        self.batch_rows = None if batch_rows is None else int(batch_rows)
        self.floor = int(floor)
        above, size = (sample, sample) if isinstance(sample, (int, np.integer)) else sample
        if int(above) < 0 or int(size) < 0 or (int(above) > 0 and int(size) < 1):
            raise ValueError(f"sample must be 0 or a positive limit (or a pair of them), got {sample!r}")
        self.sample = (int(above), int(size))
        widths = np.diff(plan.group_ptr)
        #: Whether some group is wider than the limit (else no batch needs a seed).
        self.samples = self.sample[0] > 0 and bool(widths.size) and int(widths.max()) > self.sample[0]
        self.text = None
        if text is not None:  # host copies of the class texts (module buffers, possibly on a device)
            host = [np.asarray(t.detach().cpu() if isinstance(t, torch.Tensor) else t) for t in text]
            self.text = tuple(a.astype(np.int64) for a in host[:3]) + (host[3].astype(np.float32),)
            if self.text[1].shape != (plan.n_outputs + 1,):
                raise ValueError(f"the class texts' row pointers have shape {self.text[1].shape}; expected one row per "
                                 f"output ({plan.n_outputs + 1},)")

    # ------------------------------------------------------------------ checks
    def _targets(self, y: Any, n: int, sample_weight: Any) -> tuple[np.ndarray, np.ndarray | None]:
        y = np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y)
        if y.shape != (n,) or y.dtype.kind not in "iu":
            raise ValueError(f"y must be integer node ids of shape ({n},), got {y.dtype} {y.shape}")
        y = y.astype(np.int64)
        bad = (y < PAD) | (y >= self.plan.n_classes)
        if bad.any():
            raise IndexError(f"target ids {sorted(set(y[bad].tolist()))[:5]} are out of range "
                             f"[0, {self.plan.n_classes}) (-1: unlabelled)")
        if sample_weight is None:
            return y, None
        w = np.asarray(sample_weight.cpu() if isinstance(sample_weight, torch.Tensor) else sample_weight,
                       dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"sample_weight has shape {w.shape}; expected one weight per sample ({n},)")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("sample_weight must hold finite, non-negative weights")
        return np.where(w > 0, y, PAD), w

    @staticmethod
    def _csr(X: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        if isinstance(X, torch.Tensor):
            if X.layout != torch.sparse_csr:
                raise TypeError(f"X must be a torch sparse CSR tensor or a scipy sparse matrix, got layout {X.layout}")
            return (X.crow_indices().cpu().numpy(), X.col_indices().cpu().numpy(),
                    X.values().detach().cpu().numpy(), X.shape[0])
        import scipy.sparse as sp

        if not sp.issparse(X):
            raise TypeError(f"X must be a torch sparse CSR tensor or a scipy sparse matrix, got {type(X).__name__}")
        X = sp.csr_matrix(X)
        return X.indptr, X.indices, X.data, X.shape[0]

    # ------------------------------------------------------------------ planning
    def __call__(self, X: Any, y: Any, sample_weight: Any = None, seed: int | None = None) -> StepPlan:
        """The plan of one batch: ``X`` a sparse batch (torch CSR or scipy), ``y`` node ids ``(B,)``
        (``-1``: unlabelled), ``sample_weight`` ``(B,)`` or ``None``, ``seed`` the draws of the
        sampled softmax (``None``: every softmax of this batch exact)."""
        sp_plan, floor = self.plan, self.floor
        indptr, indices, values, n = self._csr(X)
        nodes, weight = self._targets(y, n, sample_weight)
        rows = n if self.batch_rows is None else self.batch_rows
        if n > rows:
            raise ValueError(f"the batch has {n} rows, more than the planner's batch_rows={rows}")
        C, L = sp_plan.n_classes, sp_plan.n_levels
        labelled = nodes >= 0
        safe = np.where(labelled, nodes, C)
        path = sp_plan.paths[safe]  # (n, L), -1 beyond each label's depth
        stop_rows = self.terminal and sp_plan.stop
        D = L + int(stop_rows)
        target = np.full((n, D), PAD, dtype=np.int64)
        group = np.full((n, D), PAD, dtype=np.int64)
        target[:, :L] = path
        group[:, :L] = np.where(path >= 0, sp_plan.group_of[np.maximum(path, 0)], PAD)
        if stop_rows:
            child = sp_plan.child_group[np.minimum(safe, C - 1)]
            has = labelled & (child >= 0)
            group[has, L] = child[has]
            target[has, L] = C + child[has] - 1
        valid = group >= 0
        # the batch's distinct groups, their columns (one flat table, a slot per group), and the
        # distinct columns of all
        groups, slot = np.unique(group[valid], return_inverse=True)
        ptr = sp_plan.group_ptr
        sizes = ptr[groups + 1] - ptr[groups]
        members = sp_plan.group_cols[_ranges(ptr[groups], sizes)]
        flat = np.flatnonzero(valid.reshape(-1))
        target_col = target.reshape(-1)[flat]
        offset = np.zeros(members.size, dtype=np.float32)
        if self.samples and seed is not None and (sizes > self.sample[0]).any():
            members, sizes, offset = self._sampled(groups, sizes, members, slot, target_col, seed)
        # distinct already (a column belongs to one group, and the groups are distinct): no sort;
        # `where` maps a column to its position (read only at the columns written here)
        out_rows = members
        where = np.empty(sp_plan.n_outputs, dtype=np.int64)
        where[out_rows] = np.arange(out_rows.size)
        start = np.cumsum(sizes) - sizes  # each slot's first position in the table
        if weight is None:
            w_rows = np.full(flat.size, 1.0 / max(flat.size, 1))
        else:
            w_rows = weight[flat // D]
            total = w_rows.sum()
            w_rows = w_rows / (total if total > 0 else 1.0)
        # the target's position among its slot's candidates (its group's position where exact)
        blocks = {"sib": (flat // D, slot, where[target_col] - start[slot], w_rows, sizes, members, offset)}
        if self.level_contrast > 0:
            blocks["lvl"] = self._level_rows(path, labelled, weight)
        else:
            empty = np.zeros(0, dtype=np.int64)
            blocks["lvl"] = (empty, empty, empty, np.zeros(0), empty, empty, np.zeros(0, dtype=np.float32))
        U = bucket(out_rows.size, floor)
        arrays = {"out_rows": _pad(out_rows.astype(np.int64), U, PAD)}
        key = [rows, U]
        for name, (sample, slot_, tpos, w, sizes, cols, offsets) in blocks.items():
            # live rows padded to a bucket (weight 0); slots' candidates as positions in out_rows
            R = bucket(sample.size, floor) if name == "sib" or self.level_contrast > 0 else 0
            T, TC = bucket(sizes.size + 1, floor), bucket(cols.size, floor)
            table_ptr = np.full(T, cols.size, dtype=np.int64)
            table_ptr[:sizes.size + 1] = np.concatenate([[0], np.cumsum(sizes)])
            arrays.update({
                f"{name}_sample": _pad(sample.astype(np.int64), R, 0),
                f"{name}_slot": _pad(slot_.astype(np.int64), R, 0), f"{name}_target": _pad(tpos.astype(np.int64), R, 0),
                f"{name}_weight": _pad(w.astype(np.float32), R, 0.0), f"{name}_table_ptr": table_ptr,
                f"{name}_table": _pad(where[cols], TC, 0), f"{name}_offset": _pad(offsets, TC, 0.0),
            })
            key += [R, T, TC]
        # the input: entries in row order, features as positions among the distinct ones
        nnz = int(indptr[n])
        in_rows = np.unique(indices[:nnz])
        if in_rows.size and in_rows[-1] >= _INT32_LIMIT:
            raise ValueError(f"feature id {int(in_rows[-1]):,} does not fit a step plan's int32 ids")
        Z, UF = bucket(nnz, floor), bucket(in_rows.size, floor)
        row_ptr = np.concatenate([indptr[:n + 1], np.full(rows - n, nnz)]).astype(np.int64)
        arrays.update({
            "row_ptr": row_ptr,
            "entry_pos": _pad(np.searchsorted(in_rows, indices[:nnz]).astype(np.int64), Z, 0),
            "entry_value": _pad(np.asarray(values[:nnz], dtype=np.float32), Z, 0.0),
            "in_rows": _pad(in_rows.astype(np.int64), UF, PAD),
            "n_samples": np.array([n], dtype=np.float32),
            "entry_row": _pad(np.repeat(np.arange(n), np.diff(indptr[:n + 1])).astype(np.int64), Z, 0),
        })
        key += [Z, UF]
        if self.text is not None:
            key += self._text(arrays, indices[:nnz], out_rows, Z, U)
        return _pack(arrays, n, tuple(key))

    def _sampled(self, groups: np.ndarray, sizes: np.ndarray, members: np.ndarray, slot: np.ndarray,
                 target_col: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sampled softmax of the batch's wide groups (``members`` and ``sizes`` by slot, as
        the exact plan has them): each keeps the batch's targets in it and ``size - targets``
        uniform draws without replacement from its other columns, in its column order; the
        drawn columns' logits get ``log(others / drawn)``. A loop over the wide groups only
        (the full WordNet tree has one)."""
        above, size = self.sample
        rng = np.random.default_rng(int(seed))
        start = np.cumsum(sizes) - sizes
        keep = np.ones(members.size, dtype=bool)
        offset = np.zeros(members.size, dtype=np.float32)
        new_sizes = sizes.copy()
        for i in np.flatnonzero(sizes > above):
            cols = members[start[i]:start[i] + sizes[i]]
            positive = np.isin(cols, target_col[slot == i])
            others = np.flatnonzero(~positive)
            m = min(max(size - int(positive.sum()), 0), others.size)
            drawn = np.zeros(cols.size, dtype=bool)
            drawn[others[rng.choice(others.size, m, replace=False)]] = True
            corr = np.float32(np.log(others.size / m)) if 0 < m < others.size else np.float32(0.0)
            segment = slice(start[i], start[i] + sizes[i])
            keep[segment] = positive | drawn
            offset[segment] = np.where(drawn, corr, np.float32(0.0))
            new_sizes[i] = int(keep[segment].sum())
        return members[keep], new_sizes, offset[keep]

    def _text(self, arrays: dict[str, np.ndarray], features: np.ndarray, out_rows: np.ndarray, Z: int,
              U: int) -> list[int]:
        """The class-text match's arrays: the batch's class-vocabulary positions ``present (P,)``
        (``P`` a bucket of their count plus one: the last column gathers the entries outside the
        vocabulary, and nothing reads it), each input entry's column there (``entry_word (Z,)``),
        and each output row's text entries among them (``text_ptr (U + 1,)``, ``text_word``,
        ``text_value``)."""
        position, text_ptr, text_idx, text_val = self.text
        vp = position[features]
        present = np.unique(vp[vp >= 0])
        P = bucket(present.size + 1, self.floor)
        entry_word = np.where(vp >= 0, np.searchsorted(present, np.maximum(vp, 0)), P - 1)
        start = text_ptr[out_rows]
        sizes = text_ptr[out_rows + 1] - start
        entries = _ranges(start, sizes)
        owner = np.repeat(np.arange(out_rows.size), sizes)
        word = text_idx[entries]
        pos = np.minimum(np.searchsorted(present, word), max(present.size - 1, 0))
        hit = present[pos] == word if present.size else np.zeros(word.size, dtype=bool)
        counts = np.bincount(owner[hit], minlength=U)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        NT = bucket(int(hit.sum()), self.floor)
        arrays.update({
            "present": _pad(present.astype(np.int64), P, 0),
            "entry_word": _pad(entry_word.astype(np.int64), Z, P - 1),
            "text_ptr": ptr.astype(np.int64),
            "text_word": _pad(pos[hit].astype(np.int64), NT, 0),
            "text_value": _pad(text_val[entries[hit]].astype(np.float32), NT, 0.0),
        })
        return [P, NT]

    def _level_rows(self, path: np.ndarray, labelled: np.ndarray, weight: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """The in-batch level term's rows: per (sample, depth) of a labelled path, the batch's
        distinct ancestors at that depth (the slot is the depth), weighted by ``level_contrast``
        over the term's own (weighted) row count."""
        n, L = path.shape
        C = self.plan.n_classes
        valid = (path >= 0) & labelled[:, None]
        flat = np.flatnonzero(valid.reshape(-1))
        b, d = flat // L, flat % L
        node = path.reshape(-1)[flat]
        keys = np.unique(d * C + node)  # the distinct (depth, ancestor) pairs, by depth
        sizes = np.bincount(keys // C, minlength=L)
        first = np.concatenate([[0], np.cumsum(sizes)])
        tpos = np.searchsorted(keys, d * C + node) - first[d]
        if weight is None:
            w = np.full(flat.size, self.level_contrast / max(flat.size, 1))
        else:
            total = weight[b].sum()
            w = self.level_contrast * weight[b] / (total if total > 0 else 1.0)
        return b, d, tpos, w, sizes, keys % C, np.zeros(keys.size, dtype=np.float32)


def _ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + k) for s, k in zip(starts, sizes)])``, without the loop."""
    total = int(sizes.sum())
    offsets = np.cumsum(sizes) - sizes
    return np.arange(total) - np.repeat(offsets - starts, sizes)


def _pack(arrays: dict[str, np.ndarray], n: int, key: tuple) -> StepPlan:
    """All arrays in one ``int32`` buffer (floats bit for bit), each aligned."""
    fields, offset = {}, 0
    for name, a in arrays.items():
        fields[name] = (offset, tuple(a.shape), name in _FLOAT_FIELDS)
        offset += -(-max(a.size, 1) // _ALIGN) * _ALIGN
    buffer = np.zeros(offset, dtype=np.int32)
    for name, a in arrays.items():
        start = fields[name][0]
        if name in _FLOAT_FIELDS:
            buffer[start:start + a.size] = a.astype(np.float32).view(np.int32).reshape(-1)
        else:
            buffer[start:start + a.size] = a.reshape(-1)
    return StepPlan(torch.from_numpy(buffer), fields, n, key)
