"""Data-parallel training on CPU: 2 processes, gloo, torch.multiprocessing.

Each rank fits on its shard with the :class:`DataParallel` callback; the ranks must end with
identical weights, equal to one process training on the same data with twice the batch size
(the mean of two equal-size batch means is the mean of the union).
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import socket
import weakref

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


MODELS = ["MLP-full", "MLP-path-local", "SparseMLP-path-local", "SparseMLP-a-rank-without-features"]


def _params(model: str):
    # flat_term=None: a data-parallel fit keeps no flat term, so the one-process fit keeps none either.
    # prototypes=8.0: a data-parallel fit holds no rows out to learn a weight left at "auto" on (it
    # cannot cross-fit across ranks), so it would not build the prototypes, where the one-process
    # fit learns their weight by cross-fitting; a fixed weight builds them alike on both.
    common = {"max_epochs": 3, "batch_size": BATCH, "random_state": 0, "iterator_train__shuffle": False,
              "flat_term": None, "prototypes": 8.0}
    if model == "MLP-full":  # every class scored: no in-batch level term
        return dict(common, module__dropout=0.0, training="full")
    # The in-batch level term draws its negatives from each rank's own half batch, so only
    # without it do two ranks equal one process with the double batch.
    common["criterion__level_contrast"] = 0.0
    return dict(common, module__dropout=0.0) if model.startswith("MLP") else dict(common, module__hidden_units=16)


def _data(model: str):
    """Dense X for MLP, sparse for SparseMLP; in "...-a-rank-without-features", rank 1's rows have
    no features (its input layer's gradient has no rows)."""
    X, y, tree = make_hierarchical_classification(n_samples=256, n_features=12, branching=3, depth=2, random_state=0)
    if model.startswith("SparseMLP"):
        import scipy.sparse as sp

        X = np.where(X > 0.5, X, 0.0).astype(np.float32)
        if model.endswith("without-features"):
            X[np.arange(X.shape[0]) // BATCH % 2 == 1] = 0.0
        X = sp.csr_matrix(X)
    return X, y, tree


def _init(rank: int, world: int, port: int) -> weakref.ref:
    """Join the group; a weak reference to it, for :func:`_destroy`."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    return weakref.ref(dist.group.WORLD)


def _threads() -> list[str]:
    """The names of this process's threads (Linux; empty elsewhere)."""
    tasks = f"/proc/{os.getpid()}/task"
    if not os.path.isdir(tasks):
        return []
    names = []
    for task in os.listdir(tasks):
        try:
            with open(os.path.join(tasks, task, "comm")) as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


def _destroy(group: weakref.ref, out: str, rank: int) -> None:
    """Destroy the group and record whether that freed it: a group something still holds keeps
    gloo's threads alive into interpreter exit, where one can abort the rank ("terminate called
    without an active exception"). The test reads the record (:func:`_assert_torn_down`)."""
    dist.destroy_process_group()
    gc.collect()
    with open(os.path.join(out, f"teardown{rank}.json"), "w") as f:
        json.dump({"freed": group() is None, "gloo_threads": [t for t in _threads() if "gloo" in t]}, f)


def _assert_torn_down(out, world: int = 2) -> None:
    """Every rank's group was freed by ``destroy_process_group`` and no gloo thread was left."""
    for rank in range(world):
        with open(os.path.join(out, f"teardown{rank}.json")) as f:
            record = json.load(f)
        assert record == {"freed": True, "gloo_threads": []}, f"rank {rank}: {record}"


def _weights(n: int) -> np.ndarray:
    """Row weights 0-3, and the rows of every other batch (rank 1's shard) three times heavier:
    the ranks' batches weigh very differently."""
    weight = np.random.default_rng(0).integers(0, 4, n).astype(float)
    return np.where(np.arange(n) // BATCH % 2 == 1, 3 * weight, weight)


def _worker(rank: int, world: int, port: int, out: str, model: str, weighted: bool = False) -> None:
    group = _init(rank, world, port)
    try:
        X, y, tree = _data(model)
        Xr, yr = shards(X, y, world)[rank]
        weight = None
        if weighted:
            block = np.arange(X.shape[0]) // BATCH % world
            weight = _weights(X.shape[0])[block == rank]
        clf = HierarchicalClassifier(tree, callbacks=[DataParallel()], **_params(model)).fit(Xr, yr,
                                                                                           sample_weight=weight)
        state = {k: v.detach().clone() for k, v in clf.net_.module_.state_dict().items()}
        torch.save(state, os.path.join(out, f"rank{rank}.pt"))
        if rank == 0:
            with open(os.path.join(out, "model.pkl"), "wb") as f:
                pickle.dump(clf, f)
    finally:
        _destroy(group, out, rank)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("model", MODELS)
def test_two_cpu_processes_train_identical_weights(tmp_path, model, one_torch_thread):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path), model), nprocs=2, join=True)
    _assert_torn_down(tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert ranks[0].keys() == ranks[1].keys()
    for key in ranks[0]:
        torch.testing.assert_close(ranks[0][key], ranks[1][key], rtol=0, atol=0)

    # The same result as one process on all the data, with batches twice as large.
    X, y, tree = _data(model)
    single = HierarchicalClassifier(tree, **dict(_params(model), batch_size=2 * BATCH)).fit(X, y)
    for key, value in single.net_.module_.state_dict().items():
        torch.testing.assert_close(ranks[0][key], value, rtol=1e-4, atol=1e-5)

    # Rank 0's pickle predicts in one process (no process group here).
    with open(tmp_path / "model.pkl", "rb") as f:
        loaded = pickle.load(f)
    np.testing.assert_array_equal(loaded.predict(X), single.predict(X))
    # The class prototypes are summed over the ranks: those of one process on all the rows.
    mine, whole = loaded.answer_.terms["prototypes"].sums, single.answer_.terms["prototypes"].sums
    np.testing.assert_allclose(mine.toarray() if hasattr(mine, "toarray") else mine,
                               whole.toarray() if hasattr(whole, "toarray") else whole, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("model", ["SparseMLP-path-local"])  # sparse rows and a dense gradient riding along
def test_weighted_ranks_train_the_weighted_combined_batch(tmp_path, model, one_torch_thread):
    """With sample weights, the ranks' gradients are averaged by their batches' weights: two
    ranks whose batches weigh differently train what one process trains on the combined,
    weighted batches (every label has as many loss rows here, where that is exact)."""
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path), model, True), nprocs=2, join=True)
    _assert_torn_down(tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    X, y, tree = _data(model)
    single = HierarchicalClassifier(tree, **dict(_params(model), batch_size=2 * BATCH)).fit(
        X, y, sample_weight=_weights(X.shape[0]))
    for key, value in single.net_.module_.state_dict().items():
        torch.testing.assert_close(ranks[0][key], ranks[1][key], rtol=0, atol=0)
        torch.testing.assert_close(ranks[0][key], value, rtol=1e-4, atol=1e-5)
    with open(tmp_path / "model.pkl", "rb") as f:
        loaded = pickle.load(f)
    mine, whole = loaded.answer_.terms["prototypes"].sums, single.answer_.terms["prototypes"].sums  # weighted sums, over the ranks
    np.testing.assert_allclose(mine.toarray() if hasattr(mine, "toarray") else mine,
                               whole.toarray() if hasattr(whole, "toarray") else whole, rtol=1e-6, atol=1e-6)


_HELD = """
import sys, weakref
import torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
group = weakref.ref(dist.group.WORLD)
from hiclass_parallel.estimators.networks import _distributed  # too late to bind torch's defaults
assert "torch.distributed.nn" not in sys.modules  # the package does not bind the group itself
assert not _distributed._group_held_by_torch_defaults()
import torch.distributed.nn  # what torch._dynamo, which the first optimizer imports, does
assert _distributed._group_held_by_torch_defaults()
dist.destroy_process_group()
assert group() is not None  # held: gloo's threads live on
print("held")
"""


def test_a_group_held_by_torchs_defaults_is_detected():
    """The package imported after ``init_process_group`` cannot bind torch's defaults first:
    then training warns (``DataParallel``'s Notes), because the group outlives
    ``destroy_process_group``. Checked in a fresh interpreter (the import order matters)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _HELD.format(port=_free_port())], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "held", done.stderr[-2000:]


def test_importing_the_package_binds_torchs_defaults_before_any_group():
    import sys

    import torch.distributed.nn.functional as functional

    from hiclass_parallel.estimators.networks._distributed import _group_held_by_torch_defaults

    assert "torch.distributed.nn" in sys.modules  # imported with the package
    assert functional.all_reduce.__defaults__[-1] is None  # group=group.WORLD, bound while none existed
    assert not _group_held_by_torch_defaults()


def test_without_a_process_group_the_callback_changes_nothing(one_torch_thread):
    X, y, tree = _data("MLP-full")
    plain = HierarchicalClassifier(tree, **_params("MLP-full")).fit(X, y)
    with_cb = HierarchicalClassifier(tree, callbacks=[DataParallel()], **_params("MLP-full")).fit(X, y)
    np.testing.assert_array_equal(plain.decision_function(X), with_cb.decision_function(X))


# ------------------------------------------------------------------ the sparse all-reduce itself
#: name: (shape, {rank: gradient spec}); a spec is None (no gradient), "dense", or a list of
#: (rows, coalesced) for a sparse gradient over the first dimension ((rows, cols) pairs with a
#: 2-D index for "grid"). Rows repeat in uncoalesced gradients (autograd's EmbeddingBag); row 7
#: of "rows" holds zeros on rank 0 and must stay (one process keeps every touched row).
CASES = {
    "rows": ((10, 3), {0: ([1, 3, 3, 7], False), 1: ([3, 9], True)}),
    "one_rank_none": ((6, 2), {0: ([2, 5], True), 1: None}),
    "one_rank_empty": ((6, 1), {0: ([], True), 1: ([0, 4], False)}),
    "all_empty": ((5, 4), {0: ([], True), 1: ([], False)}),
    "all_none": ((5, 4), {0: None, 1: None}),
    "dense": ((4, 3), {0: "dense", 1: None}),
    "float64": ((7, 2), {0: ([6], True), 1: ([0, 6, 6], False)}),
    "grid": ((4, 5), {0: ([(0, 1), (3, 4), (0, 1)], False), 1: ([(2, 0), (3, 4)], True)}),
}


def _grad(name: str, rank: int) -> torch.Tensor | None:
    shape, specs = CASES[name]
    spec = specs[rank]
    dtype = torch.float64 if name == "float64" else torch.float32
    gen = torch.Generator().manual_seed(100 * rank + len(name))
    if spec is None:
        return None
    if spec == "dense":
        return torch.randn(shape, generator=gen, dtype=dtype)
    rows, coalesced = spec
    k = 2 if name == "grid" else 1
    index = torch.tensor(rows, dtype=torch.int64).reshape(-1, k).t()
    values = torch.randn((index.shape[1], *shape[k:]), generator=gen, dtype=dtype)
    if name == "rows" and rank == 0:
        values[3] = 0.0  # row 7: touched, zero gradient
    return torch.sparse_coo_tensor(index, values, shape, is_coalesced=coalesced, check_invariants=True)


def _one_process(name: str) -> torch.Tensor | None:
    """The gradient of one process over both ranks' batches: the mean, every touched row kept."""
    grads = [g for g in (_grad(name, r) for r in range(2)) if g is not None]
    if not grads:
        return None
    total = grads[0]
    for g in grads[1:]:
        total = total + g
    return (total.coalesce() if total.is_sparse else total) / 2


def _module() -> torch.nn.Module:
    module = torch.nn.Module()
    for name, (shape, _) in CASES.items():
        weight = torch.linspace(-1, 1, int(np.prod(shape)), dtype=torch.float64 if name == "float64" else None)
        module.register_parameter(name, torch.nn.Parameter(weight.reshape(shape)))
    return module


def _stepped(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters LazyAdam steps: it reads a sparse gradient's rows (one index dimension)."""
    return [p for name, p in module.named_parameters() if name != "grid"]


def _reduce_worker(rank: int, world: int, port: int, out: str) -> None:
    from types import SimpleNamespace

    from hiclass_parallel.estimators import LazyAdam

    group = _init(rank, world, port)
    try:
        module = _module()
        for name, param in module.named_parameters():
            param.grad = _grad(name, rank)
        callback = DataParallel()
        callback.on_train_begin(SimpleNamespace(module_=module, batch_size=BATCH))
        callback.on_grad_computed(None, list(module.named_parameters()), training=True)
        grads = {name: p.grad for name, p in module.named_parameters()}
        LazyAdam(_stepped(module), lr=0.1).step()
        torch.save({"grads": grads, "weights": dict(module.state_dict()), "traffic": callback.traffic_},
                   os.path.join(out, f"rank{rank}.pt"))
    finally:
        _destroy(group, out, rank)


def test_sparse_gradients_average_over_the_rows_any_rank_touched(tmp_path, one_torch_thread):
    from hiclass_parallel.estimators import LazyAdam

    mp.spawn(_reduce_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    _assert_torn_down(tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    # One process with the combined batch: the mean of the ranks' gradients over the union of
    # their rows, zeros kept; LazyAdam steps it to the same weights.
    module = _module()
    for name, param in module.named_parameters():
        param.grad = _one_process(name)
    expected = {name: p.grad for name, p in module.named_parameters()}
    LazyAdam(_stepped(module), lr=0.1).step()

    for name, want in expected.items():
        got = [r["grads"][name] for r in ranks]
        if want is None:
            assert got == [None, None], name
            continue
        if want.is_sparse:
            for g in got:
                assert g.layout == torch.sparse_coo and g.is_coalesced(), name
                torch.testing.assert_close(g.indices(), want.indices(), rtol=0, atol=0)
            torch.testing.assert_close(got[0].values(), got[1].values(), rtol=0, atol=0)  # bit-identical
            torch.testing.assert_close(got[0].values(), want.values())
        else:
            torch.testing.assert_close(got[0], got[1], rtol=0, atol=0)
            torch.testing.assert_close(got[0], want)
    assert expected["rows"].indices()[0].tolist() == [1, 3, 7, 9]
    assert expected["all_empty"]._nnz() == 0
    for name, weight in module.state_dict().items():
        torch.testing.assert_close(ranks[0]["weights"][name], ranks[1]["weights"][name], rtol=0, atol=0)
        torch.testing.assert_close(ranks[0]["weights"][name], weight)
    # Only touched rows moved: the header and the padded rows, never a table.
    assert ranks[0]["traffic"]["steps"] == 1
    assert ranks[0]["traffic"]["rows"]["rows"] == 4


@pytest.mark.skipif(not __import__("hiclass_parallel.estimators.networks._native_path_step", fromlist=["available"]).available(),
                    reason="the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_the_c_merge_of_the_ranks_rows_equals_unique_and_index_add(world):
    """The callback's union of the ranks' sparse rows, summed in rank order: the C merge
    against the torch route it replaces (unique over the keys, one index_add per rank), bit for
    bit, with overlapping, disjoint and empty lists."""
    from hiclass_parallel.estimators.networks._native_path_step import rows_merge

    rng = np.random.default_rng(world)
    keys = [torch.as_tensor(np.sort(rng.choice(60, size=n, replace=False)))
            for n in rng.integers(0, 25, size=world)]
    keys[0] = keys[0][:0] if world > 2 else keys[0]  # an empty list (a rank that touched nothing)
    values = [torch.as_tensor(rng.standard_normal((k.shape[0], 3, 4)).astype(np.float32)) for k in keys]
    union, summed = rows_merge(keys, values)
    reference_union, where = torch.unique(torch.cat(keys), sorted=True, return_inverse=True)
    reference = torch.zeros((reference_union.shape[0], 3, 4))
    for v, rows in zip(values, where.split([k.shape[0] for k in keys])):
        reference.index_add_(0, rows, v)
    assert torch.equal(union, reference_union)
    assert torch.equal(summed, reference)
    # the mean (divided while in cache; fast-math may divide by a reciprocal: an ulp), into
    # buffers kept between steps
    out = torch.empty(200, dtype=torch.int64), torch.empty(2400)
    union, mean = rows_merge(keys, values, world, out)
    assert torch.equal(union, reference_union) and mean.data_ptr() == out[1].data_ptr()
    torch.testing.assert_close(mean, reference / world, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="do not match"):
        rows_merge([torch.tensor([1, 2])], [torch.zeros(3, 4)])
    with pytest.raises(ValueError, match="out buffers hold 1 keys"):
        rows_merge(keys, values, world, (torch.empty(1, dtype=torch.int64), torch.empty(1)))
