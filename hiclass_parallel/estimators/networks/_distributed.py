"""Data-parallel training over ``torch.distributed``: one skorch callback, no wrapper module.

Every process (rank) fits the same :class:`HierarchicalClassifier` on its own shard of the
data; :class:`DataParallel` keeps the ranks in step: it broadcasts rank 0's initial weights
when training begins and averages the gradients over all ranks after every backward pass,
before the optimizer steps. Equal gradients and equal optimizer states give every rank the
same weights after every step, so any rank (rank 0 by convention) predicts, saves or pickles
the model afterwards, and the pickle loads in a single process.

Why a callback and not ``DistributedDataParallel``: DDP wraps a module, and the classifier
needs its module unwrapped (``encode``/``scorer`` for path-local training and best-first
decoding); the tree loss has no parameters, and wrapping it in DDP is an error (accelerate
does so on multi-CPU; see ``docs/scale-out.md``). Per step, the dense gradients
go in one all-reduce (not DDP's bucketed, overlapped ones: fine for the classifier's small
dense layers, and the place to switch to accelerate for large ones), and each sparse gradient
moves only the rows a rank touched (one all-gather for all of them), never the table.

The process group is the caller's: ``torch.distributed.init_process_group`` (``torchrun`` sets
the environment for it), ``"gloo"`` on CPU, ``"nccl"`` on GPUs with ``device=f"cuda:{local_rank}"``.
Without an initialised group, or with one process, the callback does nothing.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from typing import Any

import torch
import torch.distributed as dist
from skorch.callbacks import Callback

from . import _native_path_step
from ._data import split_target
from ._native_path_step import rows_merge

__all__ = ["DataParallel", "data_parallel_group"]


def _bind_torch_defaults_early() -> None:
    """Import ``torch.distributed.nn`` now, while no process group exists.

    Its functions take ``group=group.WORLD`` as a default argument, evaluated when the module
    is first imported: imported after ``init_process_group`` (torch imports it lazily with
    ``torch._dynamo``, which the first optimizer a fit builds pulls in), the defaults hold
    the default process group for good. ``destroy_process_group`` then cannot free the group:
    its gloo worker threads outlive it, and one that drops the last reference to a
    collective's tensor while the interpreter exits takes the GIL during finalization, which
    ends the thread through a C++ frame that may not unwind: the process aborts
    ("terminate called without an active exception"). Imported first, the defaults are
    ``None`` (the default group at call time) and the group is freed when destroyed.
    """
    if not dist.is_available() or dist.is_initialized() or "torch.distributed.nn" in sys.modules:
        return  # already imported, or too late: binding it now would hold the group
    try:
        import torch.distributed.nn  # noqa: F401
    except ImportError:  # pragma: no cover - builds without the distributed extras
        pass


_bind_torch_defaults_early()


def _group_held_by_torch_defaults() -> bool:
    """Whether a function of ``torch.distributed.nn.functional`` holds a process group as a
    default argument (the module was first imported while one existed)."""
    functional = sys.modules.get("torch.distributed.nn.functional")
    if functional is None or not dist.is_available():
        return False
    return any(isinstance(default, dist.ProcessGroup)
               for value in vars(functional).values() if callable(value)
               for default in (getattr(value, "__defaults__", None) or ()))

#: A gradient's kind in the header the ranks exchange: none, dense, or sparse over ``k`` index
#: dimensions (``_DENSE + k``). The header's last entry is the batch's: ``_WEIGHTED`` with the
#: bits of its total sample weight (float64), or ``_NONE``.
_NONE, _DENSE, _WEIGHTED = 0, 1, -1


def _batch_weight(batch: Any) -> float | None:
    """The total weight of a weighted batch's labelled items (its target is the pair ``(node
    ids, weights)``); ``None`` for an unweighted batch."""
    from skorch.dataset import unpack_data


    if batch is None:
        return None
    ids, weight = split_target(unpack_data(batch)[1])
    if weight is None:
        return None
    ids, weight = torch.as_tensor(ids), torch.as_tensor(weight)
    return float((weight.double() * (ids.to(weight.device) >= 0)).sum())


def _float_bits(value: float) -> int:
    return int(torch.tensor([value], dtype=torch.float64).view(torch.int64)[0])


def _bits_float(bits: int) -> float:
    return float(torch.tensor([bits], dtype=torch.int64).view(torch.float64)[0])


def _active(group: Any) -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def _local_rows(param: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's sparse gradient of ``param`` over ``k`` index dimensions, coalesced: the
    linear index of each entry (row-major over ``param.shape[:k]``) and its values; none
    (a batch that touched nothing) is no rows."""
    grad = param.grad
    if grad is None:
        return (torch.zeros(0, dtype=torch.int64, device=param.device),
                param.new_zeros((0, *param.shape[k:])))
    grad = grad.coalesce()
    index, values = grad.indices(), grad.values().to(param.dtype).contiguous()
    if k == 1:
        return index[0], values
    strides = torch.ones(k, dtype=torch.int64, device=index.device)
    for d in range(k - 2, -1, -1):
        strides[d] = strides[d + 1] * param.shape[d + 1]
    return (index * strides[:, None]).sum(0), values


def _merges_natively(param: torch.Tensor) -> bool:
    """Whether the ranks' rows of ``param``'s gradient are summed by the C merge (float32 on
    the CPU, the kernel built) rather than by torch's unique and index_add."""
    return param.dtype == torch.float32 and param.device.type == "cpu" and _native_path_step.available()


def _block(buffer: torch.Tensor, at: int, dtype: torch.dtype, rows: int, tail: tuple[int, ...] = ()) -> torch.Tensor:
    """``rows`` rows of shape ``tail`` and type ``dtype`` stored from byte ``at`` of ``buffer``."""
    size = rows * math.prod(tail) * torch.empty((), dtype=dtype).element_size()
    return buffer[at:at + size].view(dtype).view(rows, *tail)


class DataParallel(Callback):
    """Average gradients across ``torch.distributed`` ranks: data-parallel training.

    Pass it in ``callbacks``; each rank calls ``fit`` on its own shard (same estimator
    parameters, same ``random_state``, shards with the same number of mini-batches).

    Parameters
    ----------
    group : torch.distributed.ProcessGroup, default=None
        The process group; ``None``: the default group.
    check_batches : bool, default=True
        When training begins, check that every rank has as many mini-batches per epoch
        (a rank with fewer would leave the others waiting in an all-reduce forever).
        Needs a data set with a length; streams are not checked.

    Attributes
    ----------
    traffic_ : dict
        Since training began: ``"steps"`` averaged, ``"bytes"`` this rank received in them
        (all-gathers: ``(world - 1)`` times the bytes each rank sends; all-reduces: a ring's
        ``2 (world - 1) / world`` times the buffer), and ``"rows"``: per sparse parameter, the
        rows of the averaged gradients summed over the steps; ``"seconds"`` spent averaging
        (waiting for the other ranks included).

    Notes
    -----
    Dense gradients are averaged by one all-reduce per step (all of them end to end). A
    sparse gradient (:class:`SparseMLP`'s input and output rows, trained by
    :class:`LazyAdam`) moves only the rows its rank touched: each rank's coalesced rows (index
    and values) go to every rank in one all-gather, and every rank sums them, in rank order,
    into the union of the rows, coalesced, as one process would have over the combined
    batch. So a step moves ``world x`` the largest rank's touched rows, never the table, and
    the ranks end bit-identical. Any sparse COO gradient in ``p.grad`` is taken, coalesced or
    not (autograd's, or one a fused step set). Dropout masks and shuffling differ between
    ranks only through the data.

    With sample weights (``fit``'s ``sample_weight`` or ``class_weight``), each rank's loss is
    the weighted mean over its own batch, and the ranks' gradients are averaged with their
    batches' total weights (the weight of their labelled items), not equally: the step is
    that of the weighted mean over the combined batch (exactly so when every labelled item
    has as many loss rows, e.g. labels all at one depth). Every rank must then be weighted.

    Teardown: import the package before ``init_process_group`` and end each rank with
    ``destroy_process_group()``. Importing the package imports ``torch.distributed.nn`` while
    no group exists; torch otherwise imports it during the first fit, and its functions'
    default arguments then hold the group for good, so that destroying it frees nothing and
    gloo's threads live on into interpreter exit, where one of them can abort the process
    ("terminate called without an active exception"). Training warns when it finds the
    group held so.

    Examples
    --------
    Without a process group (one process) it changes nothing:

    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import DataParallel, HierarchicalClassifier
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=100, n_features=4, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=1, callbacks=[DataParallel()]).fit(X, y)

    Under ``torchrun --nproc_per_node 2 train.py``, ``train.py`` reads (the package imported
    before the process group is made: see the Notes)::

        import torch.distributed as dist
        from hiclass_parallel.estimators import DataParallel, HierarchicalClassifier, save_classifier
        dist.init_process_group("gloo")          # "nccl" with one GPU per rank
        rank, world = dist.get_rank(), dist.get_world_size()
        clf = HierarchicalClassifier(tree, random_state=0, callbacks=[DataParallel()])
        clf.fit(X[rank::world], y[rank::world])  # each rank its shard
        if rank == 0:
            save_classifier(clf, "model")
        dist.destroy_process_group()
    """

    def __init__(self, group: Any = None, check_batches: bool = True):
        self.group = group
        self.check_batches = check_batches

    def on_train_begin(self, net: Any, X: Any = None, y: Any = None, **kwargs: Any) -> None:
        self.traffic_ = {"steps": 0, "bytes": 0, "rows": {}, "seconds": 0.0}
        if not _active(self.group):
            return
        if _group_held_by_torch_defaults():
            warnings.warn(
                "torch.distributed.nn was first imported while a process group existed: its functions' default "
                "arguments (group=group.WORLD) hold that group, so destroy_process_group() cannot free it and its "
                "gloo threads outlive it, which can abort the process at exit ('terminate called without an active "
                "exception'). Import hiclass_parallel (or torch.distributed.nn) before init_process_group",
                RuntimeWarning, stacklevel=2)
        if self.check_batches and X is not None and hasattr(X, "__len__"):
            batch = net.batch_size if net.batch_size > 0 else max(len(X), 1)
            device = next(net.module_.parameters(), torch.empty(0)).device  # nccl gathers GPU tensors
            mine = torch.tensor([math.ceil(len(X) / batch)], dtype=torch.int64, device=device)
            counts = self._all_gather(mine).tolist()
            counts = [int(c) for (c,) in counts]
            if len(set(counts)) > 1:
                raise ValueError(
                    f"ranks have different numbers of mini-batches per epoch ({counts}): every all-reduce "
                    "needs every rank, so give each rank a shard with as many batches (e.g. equal sizes)"
                )
        src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
        with torch.no_grad():
            for tensor in net.module_.state_dict().values():
                if tensor.is_floating_point() or tensor.dtype in (torch.int64, torch.int32):
                    dist.broadcast(tensor, src=src, group=self.group)

    def on_grad_computed(self, net: Any, named_parameters: Any, batch: Any = None, training: bool = False,
                         **kwargs: Any) -> None:
        if not (training and _active(self.group)):
            return
        named = list(named_parameters)
        if not named:
            return
        start = time.perf_counter()
        # One header from every rank: each gradient's kind and its number of sparse entries,
        # so that all ranks agree which gradients are sparse (a rank whose batch left a
        # parameter untouched may have none) and how much each sends.
        local = []
        for _, param in named:
            if param.grad is not None and param.grad.is_sparse:
                param.grad = param.grad.coalesce()  # the same gradient; a no-op if built coalesced
                local.append((_DENSE + param.grad.sparse_dim(), param.grad._nnz()))
            else:
                local.append((_NONE if param.grad is None else _DENSE, 0))
        weight = _batch_weight(batch)
        local.append((_NONE, 0) if weight is None else (_WEIGHTED, _float_bits(weight)))
        header = torch.tensor(local, dtype=torch.int64, device=named[0][1].device).t().contiguous()
        kinds, counts = self._all_gather(header).unbind(1)  # (world, n_params + 1) each
        self._weigh(named, kinds[:, -1].tolist(), counts[:, -1].tolist(), weight)
        kinds, counts = kinds[:, :-1], counts[:, :-1]
        dense, sparse = [], []
        for i, (name, param) in enumerate(named):
            seen = set(kinds[:, i].tolist()) - {_NONE}
            if len(seen) > 1:
                raise ValueError(f"ranks disagree on the kind of {name}'s gradient (dense, or sparse over how "
                                 "many dimensions): every rank must run the same model")
            if seen == {_DENSE}:
                dense.append(param)
            elif seen:
                sparse.append((name, param, seen.pop() - _DENSE, counts[:, i].tolist()))
        # Small dense gradients (the input layer's bias) ride along with the sparse rows: one
        # exchange instead of two (for 2 ranks the same bytes as an all-reduce).
        ride = bool(sparse) and sum(p.numel() * p.element_size() for p in dense) <= sum(
            max(counts) * (p.numel() // math.prod(p.shape[:k])) * p.element_size() for _, p, k, counts in sparse)
        if dense and not ride:
            self._reduce_dense(dense)
        if sparse:
            self._reduce_rows(sparse, dense if ride else [])
        self.traffic_["steps"] += 1
        self.traffic_["seconds"] += time.perf_counter() - start

    def _weigh(self, named: list, kinds: list[int], bits: list[int], weight: float | None) -> None:
        """Scale this rank's gradients by ``world * W_r / sum(W)`` (``W`` the ranks' batch
        weights) so that the mean the exchange takes is weighted by the batches' weights."""
        if set(kinds) == {_NONE}:
            return
        if _NONE in kinds:
            raise ValueError("some ranks train with sample weights and others without: give every rank weights "
                             "(sample_weight or class_weight) or none")
        total = sum(_bits_float(b) for b in bits)
        if not total > 0:
            return  # no rank has a labelled item of positive weight: every gradient is zero
        scale = len(kinds) * weight / total
        if scale == 1.0:
            return
        for _, param in named:
            if param.grad is not None:
                param.grad = param.grad * scale

    def _all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """``(world, *tensor.shape)``: every rank's ``tensor`` (the same shape on every rank)."""
        world = dist.get_world_size(self.group)
        out = tensor.new_empty((world, *tensor.shape))
        dist.all_gather(list(out.unbind(0)), tensor, group=self.group)
        self.traffic_["bytes"] += (world - 1) * tensor.numel() * tensor.element_size()
        return out

    def _reduce_dense(self, params: list[torch.Tensor]) -> None:
        """Average dense gradients: one all-reduce of them all, end to end, per dtype (a rank
        without a gradient adds zeros)."""
        world = dist.get_world_size(self.group)
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for param in params:
            by_dtype.setdefault(param.dtype, []).append(param)
        for group in by_dtype.values():
            flat = torch.cat([torch.zeros_like(p).view(-1) if p.grad is None else p.grad.reshape(-1) for p in group])
            dist.all_reduce(flat, group=self.group)
            self.traffic_["bytes"] += 2 * (world - 1) * flat.numel() * flat.element_size() // world  # a ring's
            flat /= world
            for param, part in zip(group, flat.split([p.numel() for p in group])):
                param.grad = part.view_as(param)

    def _reduce_rows(self, sparse: list[tuple[str, torch.Tensor, int, list[int]]], dense: list[torch.Tensor]) -> None:
        """Average sparse gradients over the union of the entries the ranks touched (and the
        ``dense`` gradients whole).

        Each rank writes its coalesced entries (linear indices and values; room for the
        largest count among the ranks) and its dense gradients into one byte buffer laid out
        alike on every rank; one exchange gives every rank every buffer, and every rank sums
        the same blocks in rank order (the entries into their union), so the ranks end
        bit-identical. The tables themselves never move.
        """
        world, rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        size = 0

        def place(nbytes: int) -> int:  # 8-byte aligned blocks, alike on every rank
            nonlocal size
            at, size = size, size + -(-nbytes // 8) * 8
            return at

        layout = []
        for _, param, k, counts in sparse:
            tail = tuple(param.shape[k:])
            layout.append((place(8 * max(counts)), place(max(counts) * math.prod(tail) * param.element_size()), tail))
        dense_at = [place(p.numel() * p.element_size()) for p in dense]
        if size == 0:  # no rank touched any row
            self._set_rows(sparse, layout, [])
            return
        device = sparse[0][1].device
        send = self._buffer("send", size, device)
        for (_, param, k, counts), (key_at, value_at, tail) in zip(sparse, layout):
            keys, values = _local_rows(param, k)
            _block(send, key_at, torch.int64, counts[rank]).copy_(keys)
            _block(send, value_at, param.dtype, counts[rank], tail).copy_(values)
        for param, at in zip(dense, dense_at):
            block = _block(send, at, param.dtype, param.numel())
            if param.grad is None:
                block.zero_()
            else:
                block.copy_(param.grad.reshape(-1))
        buffers = list(self._buffer("received", world * size, device).view(world, size).unbind(0))
        buffers[rank] = send
        self._exchange(buffers)
        self._set_rows(sparse, layout, buffers)
        for param, at in zip(dense, dense_at):
            total = _block(buffers[0], at, param.dtype, param.numel()).clone()
            for buffer in buffers[1:]:  # in rank order
                total += _block(buffer, at, param.dtype, param.numel())
            param.grad = total.div_(world).view_as(param)

    def _set_rows(self, sparse: list[tuple[str, torch.Tensor, int, list[int]]],
                  layout: list[tuple[int, int, tuple[int, ...]]], buffers: list[torch.Tensor]) -> None:
        """Each sparse gradient: the mean of every rank's entries (in ``buffers``), coalesced."""
        world = dist.get_world_size(self.group)
        for (name, param, k, counts), (key_at, value_at, tail) in zip(sparse, layout):
            blocks = [(_block(b, key_at, torch.int64, n), _block(b, value_at, param.dtype, n, tail))
                      for b, n in zip(buffers, counts)]
            if blocks and _merges_natively(param):
                # One pass in C over the ranks' sorted keys (the same sums, in rank order), into
                # buffers kept between steps (fresh ones each step cost page faults as long as the
                # merge): the gradient is valid until the next step, as the fused step's are.
                total = sum(counts)
                out = (self._buffer(f"keys:{name}", total, param.device, torch.int64),
                       self._buffer(f"rows:{name}", total * math.prod(tail), param.device, torch.float32))
                union, summed = rows_merge([key for key, _ in blocks], [values for _, values in blocks], world, out)
            else:
                keys = torch.cat([key for key, _ in blocks]) if blocks else torch.zeros(0, dtype=torch.int64)
                union, where = torch.unique(keys.to(param.device), sorted=True, return_inverse=True)
                summed = param.new_zeros((union.shape[0], *tail))
                for (_, values), rows in zip(blocks, where.split(counts)):  # in rank order
                    summed.index_add_(0, rows, values)
                summed /= world
            index = union[None] if k == 1 else torch.stack(torch.unravel_index(union, tuple(param.shape[:k])))
            param.grad = torch.sparse_coo_tensor(index, summed, param.shape, is_coalesced=True,
                                                 check_invariants=False)
            self.traffic_["rows"][name] = self.traffic_["rows"].get(name, 0) + union.shape[0]

    def _exchange(self, buffers: list[torch.Tensor]) -> None:
        """All-gather by point-to-point: this rank's ``buffers[rank]`` to every other rank, theirs
        into the others (gloo's ring all-gather measured slower than this for 2 ranks)."""
        rank = dist.get_rank(self.group)
        peer = (lambda r: dist.get_global_rank(self.group, r)) if self.group is not None else (lambda r: r)
        ops = [dist.P2POp(op, buffers[rank if op is dist.isend else r], peer(r), group=self.group)
               for r in range(len(buffers)) if r != rank for op in (dist.isend, dist.irecv)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        self.traffic_["bytes"] += (len(buffers) - 1) * buffers[rank].numel() * buffers[rank].element_size()

    def _buffer(self, name: str, size: int, device: torch.device, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """``size`` elements of ``dtype`` (by default bytes) of a buffer kept between steps (a
        fresh one each step costs page faults). Typed, not a view of bytes: a gradient that is
        a view of it pickles and saves as its own dtype."""
        buffers = self.__dict__.setdefault("_buffers", {})
        buffer = buffers.get(name)
        if buffer is None or buffer.numel() < size or buffer.device != device or buffer.dtype != dtype:
            buffer = buffers[name] = torch.empty(size + size // 4, dtype=dtype, device=device)
        return buffer[:size]

    def on_train_end(self, net: Any, **kwargs: Any) -> None:
        self.__dict__.pop("_buffers", None)

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "_buffers"}


def data_parallel_group(estimator: Any) -> tuple[Any] | None:
    """``(group,)`` of the estimator's :class:`DataParallel` callback when its process group
    has several ranks, else ``None``."""
    for callback in estimator.callbacks or []:
        if isinstance(callback, DataParallel) and _active(callback.group):
            return (callback.group,)
    return None
