"""The fused step's thread pool: answers that do not depend on timing, and a pool that survives fork.

The step's phases split their work into as many chunks as threads; a chunk always runs with its
own scratch block whichever thread claims it, and the caller claims chunks too, so a worker that
the operating system does not schedule in time (busy cores) never stalls a phase. These tests
check the consequences a user sees: two fits under different contention give the same model bit
for bit, several callers share the pool without waiting for ever, and a forked child can use it.
"""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest
import torch
from support import sparse_rows

from hiclass_parallel import HierarchicalClassifier, Tree
from hiclass_parallel.estimators.networks import _native_path_step

pytestmark = pytest.mark.skipif(not _native_path_step.available(),
                                reason="the fused step's C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")


def _data():
    rng = np.random.default_rng(0)
    tree = Tree.from_parents(np.r_[-1, -1, rng.integers(0, 2, 10), rng.integers(2, 12, 60)])
    X = sparse_rows(400, 60, density=0.1, seed=0)
    y = rng.integers(0, tree.n_classes, 400)
    return tree, X, y


def _fit(threads: int = 2) -> dict[str, np.ndarray]:
    tree, X, y = _data()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0, batch_size=64).fit(X, y)
    finally:
        torch.set_num_threads(before)
    assert clf.net_.step_engine_ == "fused"
    return {k: v.detach().numpy().copy() for k, v in clf.net_.module_.state_dict().items()}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_a_fit_gives_the_same_weights_bit_for_bit_beside_a_busy_thread():
    quiet = _fit()
    stop = threading.Event()

    def busy() -> None:  # NumPy releases the GIL: a real competitor for the cores
        a = np.random.default_rng(1).standard_normal((300, 300))
        while not stop.is_set():
            a @ a

    competitor = threading.Thread(target=busy, daemon=True)
    competitor.start()
    try:
        loaded = _fit()
    finally:
        stop.set()
        competitor.join()
    _same(quiet, loaded)


def test_callers_on_several_threads_share_the_pool():
    # Two fits at once take turns phase by phase, and neither waits for ever (that each equals
    # a lone fit with its random_state is tests/estimators/networks/test_random_threads.py's).
    results: list = [None, None]

    def run(i: int) -> None:
        results[i] = _fit()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a fit sharing the pool did not finish"
    for r in results:
        assert r is not None and all(np.isfinite(v).all() for v in r.values())


def _adam_rows(threads: int) -> np.ndarray:
    # The C row update alone (no torch kernels: torch's own OpenMP pool may not survive a fork),
    # on enough rows that it splits them over the pool's threads.
    rng = np.random.default_rng(0)  # NumPy, not torch: even torch.randn may start an OpenMP region
    param = torch.from_numpy(rng.standard_normal((4096, 16), dtype=np.float32))
    m, v = torch.from_numpy(np.zeros((4096, 16), np.float32)), torch.from_numpy(np.zeros((4096, 16), np.float32))
    rows = torch.from_numpy(np.arange(0, 4096, 2))
    grad = torch.from_numpy(rng.standard_normal((len(rows), 16), dtype=np.float32))
    _native_path_step.adam_rows(param, m, v, rows, grad, lr_t=0.01, beta1=0.9, beta2=0.999, eps=1e-8,
                                weight_decay=0.0, bias_correction2=0.001, threads=threads)
    return param.numpy()


def _child(queue) -> None:
    queue.put(_adam_rows(threads=4).tolist())


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_a_forked_child_uses_the_pool_after_the_parent_started_it():
    parent = _adam_rows(threads=4)  # the pool's workers exist in the parent now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    try:
        child = queue.get(timeout=60)  # before join: a child blocks until its queue is drained
    finally:  # a child that hangs is ended, not left running
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0
    np.testing.assert_array_equal(np.array(child, dtype=np.float32), parent)
