"""Data-parallel training on CPU (issue 13 item 1): 2 processes, gloo, torch.multiprocessing.

Each rank fits on its shard with the :class:`DataParallel` callback; the ranks must end with
identical weights, equal to one process training on the same data with twice the batch size
(the mean of two equal-size batch means is the mean of the union).
"""

from __future__ import annotations

import os
import pickle
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import DataParallel, HierarchicalClassifier

pytestmark = pytest.mark.scale_out

BATCH = 16


def shards(X, y, world):
    """Rank r gets batches r, r + world, ...: with shuffling off, its k-th batch is half of
    the single process's k-th batch of size world * BATCH."""
    block = np.arange(X.shape[0]) // BATCH % world
    return [(X[block == r], y[block == r]) for r in range(world)]


def _params(sparse: bool):
    common = dict(max_epochs=3, batch_size=BATCH, random_state=0, iterator_train__shuffle=False)
    # The in-batch level term draws its negatives from each rank's own half batch, so only
    # without it do two ranks equal one process with the double batch.
    sparse_params = dict(common, module__hidden_units=16, criterion__level_contrast=0.0)
    return sparse_params if sparse else dict(common, module__dropout=0.0)


def _data(sparse: bool):
    X, y, tree = make_hierarchical_classification(n_samples=256, n_features=12, branching=3, depth=2, random_state=0)
    if sparse:
        import scipy.sparse as sp

        X = sp.csr_matrix(np.where(X > 0.5, X, 0.0).astype(np.float32))
    return X, y, tree


def _worker(rank: int, world: int, port: int, out: str, sparse: bool) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        X, y, tree = _data(sparse)
        Xr, yr = shards(X, y, world)[rank]
        clf = HierarchicalClassifier(tree, callbacks=[DataParallel()], **_params(sparse)).fit(Xr, yr)
        state = {k: v.detach().clone() for k, v in clf.net_.module_.state_dict().items()}
        torch.save(state, os.path.join(out, f"rank{rank}.pt"))
        if rank == 0:
            with open(os.path.join(out, "model.pkl"), "wb") as f:
                pickle.dump(clf, f)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sparse", [False, True], ids=["MLP", "SparseMLP-path-local"])
def test_two_cpu_processes_train_identical_weights(tmp_path, sparse, one_torch_thread):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path), sparse), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert ranks[0].keys() == ranks[1].keys()
    for key in ranks[0]:
        torch.testing.assert_close(ranks[0][key], ranks[1][key], rtol=0, atol=0)

    # The same result as one process on all the data, with batches twice as large.
    X, y, tree = _data(sparse)
    single = HierarchicalClassifier(tree, **dict(_params(sparse), batch_size=2 * BATCH)).fit(X, y)
    for key, value in single.net_.module_.state_dict().items():
        torch.testing.assert_close(ranks[0][key], value, rtol=1e-4, atol=1e-5)

    # Rank 0's pickle predicts in one process (no process group here).
    with open(tmp_path / "model.pkl", "rb") as f:
        loaded = pickle.load(f)
    np.testing.assert_array_equal(loaded.predict(X), single.predict(X))


def test_without_a_process_group_the_callback_changes_nothing(one_torch_thread):
    X, y, tree = _data(False)
    plain = HierarchicalClassifier(tree, **_params(False)).fit(X, y)
    with_cb = HierarchicalClassifier(tree, callbacks=[DataParallel()], **_params(False)).fit(X, y)
    np.testing.assert_array_equal(plain.decision_function(X), with_cb.decision_function(X))
