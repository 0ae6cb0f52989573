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
does so on multi-CPU; see ``docs/scale-out.md``). The cost is one all-reduce per parameter
tensor per step instead of DDP's bucketed, overlapped ones: fine for the classifier's small
networks, and the place to switch to accelerate for large ones.

The process group is the caller's: ``torch.distributed.init_process_group`` (``torchrun`` sets
the environment for it), ``"gloo"`` on CPU, ``"nccl"`` on GPUs with ``device=f"cuda:{local_rank}"``.
Without an initialised group, or with one process, the callback does nothing.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from skorch.callbacks import Callback

__all__ = ["DataParallel"]


def _active(group: Any) -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


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

    Notes
    -----
    Sparse gradients (:class:`SparseMLP` with :class:`LazyAdam`) are averaged densely and
    made sparse again over the rows any rank touched: correct, but the all-reduce moves the
    whole weight. Dropout masks and shuffling differ between ranks only through the data.

    Examples
    --------
    Without a process group (one process) it changes nothing:

    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import DataParallel, HierarchicalClassifier
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=100, n_features=4, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=1, callbacks=[DataParallel()]).fit(X, y)

    Under ``torchrun --nproc_per_node 2 train.py``, ``train.py`` reads::

        import torch.distributed as dist
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
        if not _active(self.group):
            return
        if self.check_batches and X is not None and hasattr(X, "__len__"):
            batch = net.batch_size if net.batch_size > 0 else max(len(X), 1)
            mine = torch.tensor([math.ceil(len(X) / batch)], dtype=torch.int64)
            counts = [torch.zeros_like(mine) for _ in range(dist.get_world_size(self.group))]
            dist.all_gather(counts, mine, group=self.group)
            counts = [int(c) for c in counts]
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
        world = dist.get_world_size(self.group)
        params = [param for _, param in named_parameters]
        # Ranks agree on which gradients are sparse (a rank may have none for a parameter its
        # batch left untouched), so that every rank's optimizer takes the same kind of step.
        sparse = torch.tensor([p.grad is not None and p.grad.is_sparse for p in params], dtype=torch.int32)
        dist.all_reduce(sparse, op=dist.ReduceOp.MAX, group=self.group)
        for param, is_sparse in zip(params, sparse.tolist()):
            grad = param.grad
            dense = torch.zeros_like(param) if grad is None else (grad.to_dense() if grad.is_sparse else grad)
            dist.all_reduce(dense, group=self.group)
            dense /= world
            param.grad = dense.to_sparse(sparse_dim=1).coalesce() if is_sparse else dense
