"""Planning the next batch's fused step while the current one runs (``_plan_ahead.PlanAhead``).

The consequences a user could see: a fit that plans ahead gives the same weights bit for bit
as one whose steps plan themselves (random shuffled-id trees, both semantics, sample weights,
class text, the sampled softmax, ``partial_fit``, a stream); an error of planning or of the
loader surfaces at the same batch as the same exception; no thread outlives a fit (nor an
epoch that raised); a forked child goes on without the parent's thread; the configuration says
whether planning runs ahead, and why.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
import warnings

import numpy as np
import pytest
import torch
from support import sparse_rows

from hiclass_parallel import HierarchicalClassifier
from hiclass_parallel.estimators.networks import _native_path_step as native
from hiclass_parallel.estimators.networks._data import csr_tensor
from hiclass_parallel.estimators.networks.engines._fused import fused_planner, fused_step
from hiclass_parallel.estimators.networks._plan_ahead import PlanAhead
from hiclass_parallel.estimators.networks._modules import SparseMLP
from hiclass_parallel.losses import PathLocalCrossEntropy
from hiclass_parallel.ops.groups import n_outputs

needs_kernel = pytest.mark.skipif(not native.available(),
                                  reason="the fused step's C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")


# ---------------------------------------------------------------------------- the loop itself
class _Plan:
    released = 0

    def __init__(self, batch):
        self.batch, self.thread = batch, threading.current_thread()

    def release(self):
        _Plan.released += 1


def _planner(calls: list):
    def planner(batch):
        calls.append((batch, threading.current_thread()))  # on the training thread, in order
        return lambda: _Plan(batch)
    return planner


@pytest.mark.parametrize("depth", [1, 3])
def test_batches_pass_unchanged_and_each_is_planned_on_another_thread_depth_ahead(depth):
    calls, taken = [], []
    _Plan.released = 0
    batches = [object() for _ in range(5)]
    before = set(threading.enumerate())
    with PlanAhead(batches, _planner(calls), depth=depth) as ahead:
        for i, batch in enumerate(ahead):
            # batches i + 1 .. i + depth were fetched and their planning started before batch i's step
            assert len(calls) == min(i + 1 + depth, 5)
            if i != 2:  # the step of batch 2 does not take its plan (a refused batch, say)
                plan = ahead.plan_for(batch)
                assert plan.batch is batch and plan.thread is not threading.main_thread()
                assert ahead.plan_for(batch) is None  # handed over once
                taken.append(batch)
            assert ahead.plan_for(object()) is None  # not the batch being stepped
    assert [b for b, _ in calls] == batches and all(t is threading.main_thread() for _, t in calls)
    assert taken == batches[:2] + batches[3:]
    assert _Plan.released == 1  # the plan no step took
    assert set(threading.enumerate()) == before


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_a_failed_plan_hands_over_nothing_and_a_loader_error_comes_after_the_batch_before(depth):
    def planner(batch):
        def job():
            if batch == 1:
                raise IndexError("bad batch")
            return batch
        return job

    def loader():
        yield 0
        yield 1
        yield 2
        raise OSError("the disk went away")

    stepped = []
    with pytest.raises(OSError, match="disk"):
        with PlanAhead(loader(), planner, depth=depth) as ahead:
            for batch in ahead:
                stepped.append((batch, ahead.plan_for(batch)))
    assert stepped == [(0, 0), (1, None), (2, 2)]  # batch 2 stepped before the loader's error


@pytest.mark.parametrize("depth", [1, 2])
def test_an_error_in_the_step_ends_the_thread_and_releases_the_plans(depth):
    _Plan.released = 0
    before = set(threading.enumerate())
    ahead = PlanAhead(list(range(6)), _planner([]), depth=depth)
    with pytest.raises(KeyboardInterrupt):
        with ahead:
            for batch in ahead:
                if batch == 2:
                    raise KeyboardInterrupt
                ahead.plan_for(batch)  # taken: the step releases it
    assert _Plan.released == 1 + depth  # batch 2's (not taken) and those in flight after it
    assert set(threading.enumerate()) == before
    with pytest.raises(RuntimeError, match="closed"):
        iter(ahead).__next__()


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be a positive int, got 0"):
        PlanAhead([], _planner([]), depth=0)


# ---------------------------------------------------------------------------- the fused route
@pytest.fixture
def planning_ahead(monkeypatch, two_torch_threads):
    """Fits here plan ahead when ``HICLASS_PARALLEL_PLAN_AHEAD=1`` (two threads:
    ``OMP_WAIT_POLICY`` set keeps torch's count), and the planning calls are recorded with the
    thread that ran them."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("HICLASS_PARALLEL_PLAN_AHEAD", "1")
    seen: list[threading.Thread] = []
    prepare = native.PathLocalStep.prepare

    def spy(self, *args, **kwargs):
        seen.append(threading.current_thread())
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(native.PathLocalStep, "prepare", spy)
    return seen


def _weights(clf) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in clf.net_.module_.state_dict().items()}


def _fit_both(monkeypatch, seen, make, fit) -> dict:
    """``fit(make())`` planning ahead and not: the weights of both, checked equal bit for bit,
    and that the first planned off the training thread and the second did not."""
    runs = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("HICLASS_PARALLEL_PLAN_AHEAD", flag)
        seen.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = fit(make())
        assert clf.config_.plan_ahead is (flag == "1"), clf.config_.plan_ahead_reason
        assert clf.net_.plan_ahead_ is (flag == "1")
        off_thread = sum(t is not threading.main_thread() for t in seen)
        assert (off_thread > 0) if flag == "1" else (off_thread == 0 and seen)
        runs[flag] = _weights(clf)
    for name in runs["1"]:
        assert torch.equal(runs["1"][name], runs["0"][name]), name
    return runs


def _data(random_tree, seed: int, n: int = 40, rows: int = 200):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    X = sparse_rows(rows, 30, density=0.15, seed=seed)
    y = tree.labels[rng.integers(0, tree.n_classes, rows)]
    return tree, X, y, rng


@needs_kernel
@pytest.mark.parametrize(("seed", "semantics", "weighted", "text"),
                         [(0, "partial", False, False), (1, "terminal", False, False), (2, "terminal", True, False),
                          (3, "partial", True, True), (4, "terminal", False, True)])
def test_a_fit_planning_ahead_gives_the_same_weights_bit_for_bit(random_tree, monkeypatch, planning_ahead, seed,
                                                                  semantics, weighted, text):
    tree, X, y, rng = _data(random_tree, seed)
    weight = rng.uniform(0.0, 2.0, len(y)) if weighted else None
    if weighted:
        weight[:10] = 0.0  # zero-weight rows count as unlabelled
    words = sparse_rows(tree.n_classes, 30, density=0.1, seed=seed)

    def make():
        return HierarchicalClassifier(tree, semantics=semantics, max_epochs=2, batch_size=32, random_state=seed,
                                      prototypes=None, module__hidden_units=8,
                                      module__class_features=words if text else None)

    _fit_both(monkeypatch, planning_ahead, make, lambda clf: clf.fit(X, y, sample_weight=weight))


@needs_kernel
@pytest.mark.parametrize("activation", [None, torch.nn.ReLU])
def test_the_sampled_softmax_draws_the_same_candidates_planning_ahead(random_tree, monkeypatch, planning_ahead,
                                                                      activation):
    from hiclass_parallel import Tree

    rng = np.random.default_rng(5)
    tree = Tree.from_parents(np.r_[np.full(40, -1), rng.integers(0, 40, 60)])  # 40 top-level classes
    X = sparse_rows(160, 30, density=0.15, seed=5)
    y = rng.integers(0, tree.n_classes, 160)

    def make():
        return HierarchicalClassifier(tree, max_epochs=2, batch_size=32, random_state=0, prototypes=None,
                                      module__hidden_units=8, softmax_sample=8, module__activation=activation)

    _fit_both(monkeypatch, planning_ahead, make, lambda clf: clf.fit(X, y))


@needs_kernel
def test_partial_fit_and_a_stream_plan_ahead_to_the_same_weights(random_tree, monkeypatch, planning_ahead):
    from torch.utils.data import IterableDataset

    tree, X, y, _ = _data(random_tree, 6)

    def chunks(clf):
        for lo in range(0, X.shape[0], 100):
            clf.partial_fit(X[lo:lo + 100], y[lo:lo + 100])
        return clf

    def make():
        return HierarchicalClassifier(tree, batch_size=32, random_state=0, prototypes=None, module__hidden_units=8)

    _fit_both(monkeypatch, planning_ahead, make, chunks)

    class Stream(IterableDataset):
        def __iter__(self):
            for i in range(X.shape[0]):
                yield torch.from_numpy(X[i].toarray().ravel()), y[i]

    def stream():
        from hiclass_parallel.estimators import SparseMLP

        return HierarchicalClassifier(tree, module=SparseMLP, max_epochs=2, batch_size=32, random_state=0,
                                      module__hidden_units=8, prototypes=None)

    if stream().fit(Stream()).config_.step_engine == "fused":  # dense batches on the fused step
        _fit_both(monkeypatch, planning_ahead, stream, lambda clf: clf.fit(Stream()))


@needs_kernel
def test_no_thread_outlives_a_fit_nor_an_epoch_that_raised(random_tree, monkeypatch, planning_ahead):
    from skorch.callbacks import Callback

    class Boom(Callback):
        def __init__(self, ctrl_c: bool = False):
            self.ctrl_c = ctrl_c

        def on_batch_end(self, net, batch=None, training=None, **kwargs):
            if training and len(net.history[-1, "batches"]) == 3:
                if self.ctrl_c:  # what Ctrl-C does to the main thread: Python's SIGINT handler runs
                    signal.getsignal(signal.SIGINT)(signal.SIGINT, sys._getframe())
                raise RuntimeError("a callback failed")

    tree, X, y, _ = _data(random_tree, 7)
    before = set(threading.enumerate())
    clf = HierarchicalClassifier(tree, max_epochs=2, batch_size=32, random_state=0, prototypes=None).fit(X, y)
    assert clf.net_.plan_ahead_ and set(threading.enumerate()) == before
    with pytest.raises(RuntimeError, match="a callback failed"):
        HierarchicalClassifier(tree, max_epochs=2, batch_size=32, random_state=0, callbacks=[Boom()]).fit(X, y)
    assert set(threading.enumerate()) == before
    with pytest.raises(KeyboardInterrupt):
        HierarchicalClassifier(tree, max_epochs=2, batch_size=32, random_state=0, callbacks=[Boom(True)]).fit(X, y)
    assert set(threading.enumerate()) == before


def _step_case(random_tree, seed: int = 8):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 50)
    torch.manual_seed(seed)
    module = SparseMLP(30, n_outputs(tree, "sibling", True), hidden_units=8)
    criterion = PathLocalCrossEntropy(tree, stop=True, semantics="terminal", level_contrast=0.1)
    module.train()
    criterion.train()
    batches = [(csr_tensor(sparse_rows(16, 30, density=0.2, seed=seed + i)),
                torch.as_tensor(rng.integers(-1, tree.n_classes, 16))) for i in range(5)]
    return module, criterion, batches


def _steps(module, criterion, batches, ahead: bool) -> list:
    """The loop of a net over ``batches``: each step's outcome (its loss, or the error it raised)."""
    outcomes = []
    plan = fused_planner(module, criterion)
    loop = PlanAhead(batches, lambda batch: plan(*batch)) if ahead else batches
    try:
        for batch in loop:
            module.zero_grad(set_to_none=True)
            try:
                out = fused_step(module, criterion, *batch, plan=loop.plan_for(batch) if ahead else None)
                outcomes.append(float(out["loss"]))
            except Exception as error:  # noqa: BLE001
                outcomes.append((type(error), str(error)))
    finally:
        if ahead:
            loop.close()
    return outcomes


@needs_kernel
@pytest.mark.parametrize("bad", ["target", "feature"])
def test_a_bad_batch_raises_the_same_error_at_the_same_step(random_tree, bad):
    module, criterion, batches = _step_case(random_tree)
    X, y = batches[2]
    if bad == "target":
        y = y.clone()
        y[3] = 10_000
    else:
        col = X.col_indices().clone()
        col[0] = 999
        X = torch.sparse_csr_tensor(X.crow_indices(), col, X.values(), size=X.shape, check_invariants=False)
    batches[2] = (X, y)
    # the batches are kept as tuples (the loop checks a plan's batch by identity)
    inline, ahead = _steps(module, criterion, batches, False), _steps(module, criterion, batches, True)
    assert ahead == inline
    assert isinstance(inline[2], tuple) and inline[2][0] is IndexError
    assert all(isinstance(o, float) for i, o in enumerate(inline) if i != 2)


def _child_steps(conn, module, criterion, batches, ahead_state) -> None:
    torch.set_num_threads(1)  # torch's OpenMP pool may not survive a fork; the C pool does
    ahead, rest = ahead_state
    out = []
    for batch in rest:  # the parent's loop, continued in the child: no planning thread here
        assert ahead.plan_for(batch) is None
        out.append(float(fused_step(module, criterion, *batch)["loss"]))
    ahead.close()
    conn.send(out)
    conn.close()


@needs_kernel
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_a_child_forked_mid_epoch_steps_on_without_the_planning_thread(random_tree, one_torch_thread):
    import copy

    module, criterion, batches = _step_case(random_tree, 9)
    reference = copy.deepcopy(module)
    plan = fused_planner(module, criterion)
    ahead = PlanAhead(batches, lambda batch: plan(*batch))
    loop = iter(ahead)
    first = next(loop)  # batch 1 is being planned on the thread now
    fused_step(module, criterion, *first, plan=ahead.plan_for(first))
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_steps, args=(child_end, module, criterion, batches[1:], (ahead, batches[1:])))
    proc.start()
    try:
        assert parent_end.poll(60), "the forked child did not finish its steps"
        child = parent_end.recv()
    finally:  # a child that hangs is ended, not left running
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0
    parent = []
    for batch in loop:  # the parent goes on planning ahead
        parent.append(float(fused_step(module, criterion, *batch, plan=ahead.plan_for(batch))["loss"]))
    ahead.close()
    assert child == parent  # the same steps on the same weights
    # and the same as a loop that never planned ahead
    assert _steps(reference, criterion, batches, False)[1:] == parent


# ---------------------------------------------------------------------------- the configuration
def test_the_configuration_says_whether_planning_runs_ahead_and_why(monkeypatch):
    from hiclass_parallel.estimators.fitting._config import resolve_plan_ahead

    monkeypatch.delenv("HICLASS_PARALLEL_PLAN_AHEAD", raising=False)
    on, why = resolve_plan_ahead("fused", 2, cores=4)
    assert on and why == "2 threads on 4 cores: the next batch is planned on a free core while the step runs"
    on, why = resolve_plan_ahead("fused", 2, cores=2)  # no idle core: it would compete with the step
    assert not on and "take all 2 cores" in why
    on, why = resolve_plan_ahead("fused", 1, cores=4)  # one thread allowed: not two
    assert not on and "one thread" in why
    assert resolve_plan_ahead("torch", 4, cores=16) == (False, "the step is not fused")
    monkeypatch.setenv("HICLASS_PARALLEL_PLAN_AHEAD", "0")
    assert resolve_plan_ahead("fused", 4, cores=16) == (False, "HICLASS_PARALLEL_PLAN_AHEAD=0")
    monkeypatch.setenv("HICLASS_PARALLEL_PLAN_AHEAD", "1")
    assert resolve_plan_ahead("fused", 1, cores=2) == (True, "HICLASS_PARALLEL_PLAN_AHEAD=1")
    assert resolve_plan_ahead("torch", 4, cores=16)[0] is False
