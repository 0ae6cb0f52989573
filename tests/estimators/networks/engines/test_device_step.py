"""The device-resident training step (Triton kernels reading a host plan) against the torch route.

On the CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, set here before
Triton is imported): loss, gradients and the rows LazyAdam updates equal those of the torch route
(``SparseMLP.encode``/``scorer``, ``PathLocalCrossEntropy``, autograd, ``LazyAdam.step``) on random
trees with shuffled ids, both semantics, stop rows, sample weights and the in-batch level term;
the plan equal to the torch route's per-step planning. With CUDA, steps 2..N run under
``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import renumbered, sparse_rows

#: Where the kernels run: on CUDA where there is one (compiled), else on the CPU under Triton's
#: interpreter, set before Triton is imported.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hiclass_parallel.estimators import LazyAdam, SparseMLP
from hiclass_parallel.estimators.networks._data import csr_tensor
from hiclass_parallel.estimators.networks.engines.device import StepPlanner
from hiclass_parallel.losses import PathLocalCrossEntropy
from hiclass_parallel.ops.groups import n_outputs
from hiclass_parallel.ops.sibling_paths import expand_rows, path_rows, sibling_plan

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="Triton is not installed (pip install triton, or the 'test' extra)")


def _model(random_tree, seed: int, stop: bool, semantics: str, level: float, n: int = 30, H: int = 8,
           device: str = DEVICE, text: bool = False):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    torch.manual_seed(seed)
    # class text: a few features per class (some absent from every batch), stop columns without
    class_features = sparse_rows(n, 30, density=0.1, seed=seed) if text else None
    module = SparseMLP(30, n_outputs(tree, "sibling", stop), hidden_units=H, class_features=class_features).to(device)
    with torch.no_grad():
        module.head.bias.weight.normal_()  # zero at the start: give the bias something to check
        if text:
            module.match_weight.normal_(std=0.003)  # zero at the start: give the match a value
    criterion = PathLocalCrossEntropy(tree, stop=stop, semantics=semantics, level_contrast=level).to(device)
    module.train()
    criterion.train()
    return rng, tree, module, criterion


def _optimizer(module: SparseMLP, lr: float = 0.05, weight_decay: float = 0.0) -> LazyAdam:
    """LazyAdam with the classifier's groups for SparseMLP (per-row second moment, bfloat16 first moments)."""
    groups = [{"params": [module.input.embedding.weight], "second_moment": "row", "lr_scale": 3.0,
               "first_moment": "bfloat16"},
              {"params": [module.head.weight.weight], "first_moment": "bfloat16"},
              {"params": [module.input.bias, module.head.bias.weight]
               + ([module.match_weight] if module.head.has_text else [])}]
    return LazyAdam(groups, lr=lr, weight_decay=weight_decay)


def _batch(rng, n_classes: int, B: int, seed: int, weighted: bool):
    X = sparse_rows(B, 30, density=0.2, seed=seed)
    y = rng.integers(-1, n_classes, B)  # -1: unlabelled rows
    w = None
    if weighted:
        w = rng.uniform(0.2, 3.0, B)
        w[rng.random(B) < 0.2] = 0.0  # zero weights count as dropped
    return X, y, w


def _torch_step(module, criterion, optimizer, X, y, w):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch calls sparse CSR tensors beta
        Xt = csr_tensor(X).to(DEVICE)
    optimizer.zero_grad()
    weighted = {} if w is None else {"sample_weight": torch.as_tensor(w, dtype=torch.float32, device=DEVICE)}
    loss = criterion(module.scorer(module.encode(Xt)), torch.as_tensor(y, device=DEVICE), **weighted)
    loss.backward()
    grads = {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).cpu() for k, p in module.named_parameters()}
    optimizer.step()
    return float(loss.detach()), grads


CASES = [  # (seed, stop, semantics, level contrast, weighted, steps, class text)
    (0, False, "partial", 0.0, False, 1, False),
    (1, True, "terminal", 0.0, False, 2, False),
    (2, True, "partial", 0.1, True, 1, False),
    (3, True, "terminal", 0.3, True, 2, False),
    (4, False, "partial", 0.1, False, 1, False),
    (5, True, "terminal", 0.1, True, 2, True),
    (6, False, "partial", 0.0, False, 1, True),
]


@needs_triton
@pytest.mark.parametrize("seed, stop, semantics, level, weighted, steps, text", CASES)
def test_loss_gradients_and_updated_rows_equal_the_torch_route(random_tree, seed, stop, semantics, level, weighted,
                                                               steps, text):
    from hiclass_parallel.estimators.networks.engines.device._step import DeviceStep

    rng, tree, module, criterion = _model(random_tree, seed, stop, semantics, level, text=text)
    reference = copy.deepcopy(module)
    ref_opt, opt = _optimizer(reference), _optimizer(module)
    step = DeviceStep(module, criterion, opt, batch_rows=8)
    names = dict(module.named_parameters())
    for i in range(steps):  # a second step reads the first's moments and bias corrections (a short batch)
        X, y, w = _batch(rng, tree.n_classes, 6 if i else 8, seed * 10 + i, weighted)
        loss, grads = _torch_step(reference, criterion, ref_opt, X, y, w)
        plan = step.planner(X, y, w)  # on the host
        on_device = plan.to(DEVICE)
        work = step.forward_backward(on_device)
        assert float(work["loss"]) == pytest.approx(loss, rel=1e-5, abs=1e-6)
        computed = {name: value.cpu() for name, value in work.items()}
        out_rows = plan["out_rows"][plan["out_rows"] >= 0]
        in_rows = plan["in_rows"][plan["in_rows"] >= 0]
        g_out = torch.zeros_like(grads["head.weight.weight"])
        g_out[out_rows] = computed["g_out"][:out_rows.numel()]
        torch.testing.assert_close(g_out, grads["head.weight.weight"], rtol=1e-4, atol=1e-6)
        g_bout = torch.zeros_like(grads["head.bias.weight"][:, 0])
        g_bout[out_rows] = computed["g_bout"][:out_rows.numel()]
        torch.testing.assert_close(g_bout, grads["head.bias.weight"][:, 0], rtol=1e-4, atol=1e-6)
        g_in = torch.zeros_like(grads["input.embedding.weight"])
        g_in[in_rows] = computed["g_in"][:in_rows.numel()]
        torch.testing.assert_close(g_in, grads["input.embedding.weight"], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(computed["g_bin"], grads["input.bias"], rtol=1e-4, atol=1e-6)
        if text:
            torch.testing.assert_close(computed["g_match"], grads["match_weight"], rtol=1e-4, atol=1e-6)
            assert grads["match_weight"].abs().sum() > 0  # the match was exercised
        # the sparse gradients touch the same rows as the plan's
        assert set(out_rows.tolist()) == set(reference.head.weight.weight.grad.coalesce().indices()[0].cpu().tolist())
        step.update(on_device, work)
        for name, p in reference.named_parameters():
            torch.testing.assert_close(names[name].detach(), p.detach(), rtol=1e-4, atol=2e-5)
            torch.testing.assert_close(opt.state[names[name]]["exp_avg"].float(),
                                       ref_opt.state[p]["exp_avg"].float(), rtol=1e-2, atol=1e-6)
    assert not step.read()[1]
    assert float(opt.state[names["head.weight.weight"]]["step"]) == steps


@needs_triton
def test_weight_decay_and_the_step_loop_equal_the_torch_route(random_tree):
    from hiclass_parallel.estimators.networks.engines.device._step import DeviceStep

    rng, tree, module, criterion = _model(random_tree, 7, True, "terminal", 0.1)
    reference = copy.deepcopy(module)
    ref_opt, opt = _optimizer(reference, weight_decay=0.01), _optimizer(module, weight_decay=0.01)
    step = DeviceStep(module, criterion, opt)
    losses = []
    for i in range(2):
        X, y, w = _batch(rng, tree.n_classes, 8, 70 + i, False)
        losses.append(_torch_step(reference, criterion, ref_opt, X, y, w)[0])
        step.step(step.planner(X, y, w))
    for name, p in reference.named_parameters():
        torch.testing.assert_close(dict(module.named_parameters())[name].detach(), p.detach(), rtol=1e-4, atol=2e-5)
    mean, bad = step.read()
    assert mean == pytest.approx(np.mean(losses), rel=1e-5) and not bad


@needs_triton
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's NaN arithmetic, on purpose
def test_a_non_finite_loss_sets_the_flag_and_stops_the_updates(random_tree):
    from hiclass_parallel.estimators.networks.engines.device._step import DeviceStep

    rng, tree, module, criterion = _model(random_tree, 8, False, "partial", 0.0)
    opt = _optimizer(module)
    step = DeviceStep(module, criterion, opt)
    with torch.no_grad():
        module.head.weight.weight[:] = float("nan")
    X, y, w = _batch(rng, tree.n_classes, 8, 80, False)
    y[0] = int(tree.paths[:, 0][tree.paths[:, 0] >= 0][0])  # at least one labelled row
    before = module.input.embedding.weight.detach().clone()
    step.step(step.planner(X, y, w))
    assert step.read()[1]  # read once, after the step
    torch.testing.assert_close(module.input.embedding.weight.detach(), before)  # no update applied


@pytest.mark.parametrize("seed, stop, semantics", [(0, False, "partial"), (1, True, "terminal"), (2, True, "partial"),
                                                   (5, True, "terminal")])
def test_the_plan_equals_the_torch_routes_per_step_planning(random_tree, seed, stop, semantics):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 50)
    splan = sibling_plan(tree, stop)
    X, y, _ = _batch(rng, tree.n_classes, 21, seed, False)
    plan = StepPlanner(splan, semantics == "terminal", batch_rows=32)(X, y)
    # the torch route: rows (sample, group, target column), their candidates
    sample, group, column = path_rows(splan, torch.as_tensor(y), semantics == "terminal")
    row, cand, start = expand_rows(splan, group)
    expected = sorted((int(s), tuple(sorted(cand[row == r].tolist())), int(c))
                      for r, (s, c) in enumerate(zip(sample.tolist(), column.tolist())))
    out_rows = plan["out_rows"]
    live = (plan["sib_weight"] > 0).nonzero().squeeze(1)
    got = []
    for r in live.tolist():
        slot = plan["sib_slot"][r]
        members = plan["sib_table"][plan["sib_table_ptr"][slot]:plan["sib_table_ptr"][slot + 1]]
        cols = out_rows[members]
        got.append((int(plan["sib_sample"][r]), tuple(sorted(cols.tolist())),
                    int(cols[plan["sib_target"][r]])))
    assert sorted(got) == expected
    assert torch.allclose(plan["sib_weight"][live], torch.full((len(expected),), 1.0 / len(expected)))
    assert sorted(out_rows[out_rows >= 0].tolist()) == sorted(set(cand.tolist()))
    assert plan["in_rows"][plan["in_rows"] >= 0].tolist() == np.unique(X.indices).tolist()


def test_plan_shapes_follow_buckets_and_bad_labels_are_refused(random_tree):
    tree = random_tree(3, 30)
    planner = StepPlanner(sibling_plan(tree, True), True, level_contrast=0.1, batch_rows=16)
    rng = np.random.default_rng(0)
    keys = {planner(*_batch(rng, tree.n_classes, B, B, False)[:2]).key for B in (16, 15, 9)}
    assert len(keys) <= 3 and all(key[0] == 16 for key in keys)
    with pytest.raises(IndexError, match="out of range"):
        planner(sp.csr_matrix((2, 30), dtype=np.float32), np.array([0, tree.n_classes]))
    with pytest.raises(ValueError, match="sample_weight"):
        planner(sp.csr_matrix((2, 30), dtype=np.float32), np.array([0, 1]), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="batch_rows"):
        planner(sp.csr_matrix((17, 30), dtype=np.float32), np.zeros(17, dtype=np.int64))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the sync-debug mode is CUDA's)")
@needs_triton
@pytest.mark.parametrize("graph", [False, True])
def test_steps_after_the_first_never_synchronise(random_tree, graph):
    from hiclass_parallel.estimators.networks.engines.device._step import DeviceStep

    rng, tree, module, criterion = _model(random_tree, 9, True, "terminal", 0.1, device="cuda")
    step = DeviceStep(module, criterion, _optimizer(module), batch_rows=32)
    plans = [step.planner(*_batch(rng, tree.n_classes, 32, i, True)) for i in range(6)]
    step.step(plans[0], graph=graph)  # the first step compiles (and captures)
    step.step(plans[0], graph=graph)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for plan in plans[1:]:
            if plan.key in step._graphs or not graph:
                step.step(plan, graph=graph)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert not step.read()[1]


@needs_triton
@pytest.mark.parametrize("plan_threads", ["1", "3"])
def test_the_classifier_trains_on_the_device_step_and_reads_losses_once_per_epoch(monkeypatch, plan_threads):
    """The net's glue (the engines forced, so that it runs on the CPU too, where the configuration
    would not pick the device step): the same fit as the torch route, epoch losses from the
    device accumulator, with batches planned on one thread or several at once."""
    monkeypatch.setenv("HICLASS_PARALLEL_PLAN_THREADS", plan_threads)
    from hiclass_parallel import Tree
    from hiclass_parallel.estimators import HierarchicalClassifier
    from hiclass_parallel.estimators.fitting import _config

    rng = np.random.default_rng(0)
    tree = Tree.from_parents(np.r_[-1, -1, rng.integers(0, 2, 6), rng.integers(2, 8, 12)])
    X = sparse_rows(16, 30, density=0.15, seed=0)
    y = rng.integers(0, tree.n_classes, 16)
    runs = {}
    for engine in ("device", "torch"):
        forced = (engine, f"forced {engine}", "device" if engine == "device" else "optimizer", "forced")
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
            warnings.simplefilter("ignore")
            mp.setattr(_config, "resolve_engines", lambda *args, **kwargs: forced)
            runs[engine] = HierarchicalClassifier(tree, max_epochs=2, random_state=0, batch_size=8,
                                                  module__hidden_units=8, device=DEVICE).fit(X, y)
    device, reference = runs["device"].net_, runs["torch"].net_
    assert device.step_engine_ == "device" and device.update_engine_ == "device" and device.step_fallbacks_ == 0
    assert reference.step_engine_ == "torch"
    np.testing.assert_allclose(device.history[:, "train_loss"], reference.history[:, "train_loss"], rtol=1e-4)
    np.testing.assert_allclose(device.history[-1, "batches", :, "train_loss"],
                               reference.history[-1, "batches", :, "train_loss"], rtol=1e-4)
    step = device.optimizer_.state[device.module_.head.weight.weight]["step"]
    assert float(step) == 4  # written back from the device at the end of each epoch
    assert device.engine_.device_step.planned_ahead == 4  # every batch planned on a planning thread


def test_plan_threads_follow_the_cores_and_the_variable(monkeypatch):
    from hiclass_parallel.estimators.networks.engines.device import _engine as _train

    monkeypatch.delenv("HICLASS_PARALLEL_PLAN_THREADS", raising=False)
    monkeypatch.setattr(_train.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert _train.plan_threads() == _train.MAX_PLAN_THREADS
    monkeypatch.setattr(_train.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert _train.plan_threads() == 1
    monkeypatch.setattr(_train.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert _train.plan_threads() == 2
    monkeypatch.setenv("HICLASS_PARALLEL_PLAN_THREADS", "6")
    assert _train.plan_threads() == 6
    monkeypatch.setenv("HICLASS_PARALLEL_PLAN_THREADS", "0")
    with pytest.raises(ValueError, match="HICLASS_PARALLEL_PLAN_THREADS must be a positive int, got '0'"):
        _train.plan_threads()


def test_the_configuration_picks_the_device_step_on_cuda_with_triton_and_says_why_not(monkeypatch):
    from skorch.callbacks import Callback

    from hiclass_parallel.estimators.fitting import _config
    from hiclass_parallel.estimators.networks.engines.device import _step

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the choice only: nothing runs on CUDA
    monkeypatch.setattr(_step, "triton_available", lambda: True)

    class Estimator:
        device, callbacks, module_args = "cuda", None, {}

        def _skorch_kwargs(self, prefix):
            return self.module_args if prefix == "module__" else {}

    def engines(estimator, optimizer=LazyAdam):
        return _config.resolve_engines(estimator, SparseMLP, "path_local", PathLocalCrossEntropy,
                                       {"level_contrast": 0.1}, optimizer, True)

    estimator = Estimator()
    step, why, update, _ = engines(estimator)
    assert (step, update) == ("device", "device") and "CUDA with Triton" in why
    assert engines(estimator, torch.optim.Adam)[:2] == ("torch", "on CUDA the device step cannot run: the optimizer "
                                                               "is Adam, not LazyAdam")
    estimator.module_args = {"class_features": sp.eye(3, 30, format="csr")}  # class text: the device step too
    assert engines(estimator)[0] == "device"
    estimator.module_args = {"activation": torch.nn.ReLU}
    assert "activation" in engines(estimator)[1]

    class Reader(Callback):
        def on_grad_computed(self, net, named_parameters, **kwargs):
            pass

    estimator.module_args, estimator.callbacks = {}, [Reader()]
    assert "reads gradients" in engines(estimator)[1]
    monkeypatch.setattr(_step, "triton_available", lambda: False)
    estimator.callbacks = None
    assert engines(estimator)[:2] == ("torch", "on CUDA the device step cannot run: Triton is not installed "
                                               "(or HICLASS_PARALLEL_TRITON=0)")
    estimator.device = "cpu"  # the CPU's engines, as before
    assert engines(estimator)[0] in ("fused", "torch")


def test_a_net_on_the_cpu_refuses_the_device_step_without_the_interpreter(random_tree, monkeypatch):
    """A model trained on a GPU and continued on the CPU trains through torch (Triton's compiled
    kernels take CUDA tensors only)."""
    from hiclass_parallel.estimators.networks.engines.device._step import device_step_refusal

    _, _, module, criterion = _model(random_tree, 10, False, "partial", 0.0, device="cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert device_step_refusal(module, criterion, _optimizer(module)) == "the weights are not on a CUDA device"
    module.head.weight.weight.requires_grad_(False)
    assert "trainable" in device_step_refusal(module, criterion, _optimizer(module))


def test_a_wide_group_does_not_widen_the_others_in_the_plan():
    """Candidates are one flat table with a pointer per slot: its size follows the summed widths
    of the batch's groups, not their number times the widest."""
    from hiclass_parallel import Tree

    parents = np.r_[-1, np.zeros(300, dtype=np.int64), 1, np.arange(301, 339)]  # 300 siblings, a chain under 1
    tree = Tree.from_parents(parents)
    splan = sibling_plan(tree, False)
    y = np.array([339, 338, 5, 7])  # deep in the chain: one-wide groups
    X = sp.csr_matrix(np.eye(4, 30, dtype=np.float32))
    plan = StepPlanner(splan, False)(X, y)
    groups = np.unique(splan.group_of[tree.paths[y][tree.paths[y] >= 0]])
    width = int(np.diff(splan.group_ptr)[groups].sum())
    assert plan["sib_table"].numel() < 2 * width  # a (groups, widest) table would hold 41 x 300
    assert plan.pinned() is plan or torch.cuda.is_available()  # pinning only where CUDA is


# ---------------------------------------------------------------------------- the sampled softmax
def _wide_tree(seed: int, roots: int = 120, children: int = 60):
    """A forest whose top level is one wide sibling group, with shuffled node ids."""
    from hiclass_parallel import Tree

    rng = np.random.default_rng(seed)
    parents = np.r_[np.full(roots, -1), rng.integers(0, roots, children)]
    return Tree.from_parents(renumbered(parents, rng.permutation(parents.size)))


def _plan_reference(module, X, plan):
    """The loss of a plan and its gradients, computed densely by autograd from the plan's own
    softmax rows (candidates, targets, weights and logit offsets): what the kernels must give."""
    module.zero_grad()
    Xt = torch.as_tensor(X.toarray(), device=DEVICE)
    h = Xt @ module.input.embedding.weight + module.input.bias
    W, b = module.head.weight.weight, module.head.bias.weight[:, 0]
    out_rows = plan["out_rows"].long()
    loss = torch.zeros((), device=DEVICE)
    for block in ("sib", "lvl"):
        sample, slot, target = (plan[f"{block}_{k}"].long() for k in ("sample", "slot", "target"))
        weight, ptr, table, offset = (plan[f"{block}_{k}"] for k in ("weight", "table_ptr", "table", "offset"))
        for r in range(sample.numel()):
            if float(weight[r]) == 0.0:
                continue
            lo, hi = int(ptr[slot[r]]), int(ptr[slot[r] + 1])
            cols = out_rows[table[lo:hi].long()]
            scores = h[sample[r]] @ W[cols].T + b[cols] + offset[lo:hi]
            loss = loss + weight[r] * (torch.logsumexp(scores, 0) - scores[target[r]])
    loss.backward()
    return float(loss.detach()), {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).cpu()
                                  for k, p in module.named_parameters() if p.grad is not None}


def test_a_sampled_plan_keeps_the_batch_targets_and_draws_the_rest_of_a_wide_group():
    from hiclass_parallel.ops.sibling_paths import sibling_plan

    tree = _wide_tree(0)
    groups = sibling_plan(tree, stop=True)
    exact = StepPlanner(groups, terminal=True, batch_rows=32)
    sampled = StepPlanner(groups, terminal=True, batch_rows=32, sample=(50, 40))
    rng = np.random.default_rng(1)
    X = sparse_rows(32, 30, density=0.2, seed=1)
    y = rng.integers(-1, tree.n_classes, 32)
    assert sampled.samples and not exact.samples
    # no seed: every softmax exact, the very plan of a planner without sampling
    assert torch.equal(sampled(X, y).buffer, exact(X, y).buffer)
    plan = sampled(X, y, seed=7)
    assert torch.equal(plan.buffer, sampled(X, y, seed=7).buffer)  # the seed fixes the draws
    assert not torch.equal(plan.buffer, sampled(X, y, seed=8).buffer)
    ptr, table, offset = plan["sib_table_ptr"], plan["sib_table"], plan["sib_offset"]
    out_rows = plan["out_rows"]
    widths = np.diff(groups.group_ptr)
    top = int(np.argmax(widths))
    top_cols = set(groups.group_cols[groups.group_ptr[top]:groups.group_ptr[top + 1]].tolist())
    col_group = np.empty(groups.n_outputs, dtype=np.int64)
    col_group[groups.group_cols] = np.repeat(np.arange(widths.size), widths)
    live = plan["sib_weight"] != 0
    rows_targets = {}
    for r in np.flatnonzero(live.numpy()):
        s = int(plan["sib_slot"][r])
        lo, hi = int(ptr[s]), int(ptr[s + 1])
        cols = out_rows[table[lo:hi].long()].tolist()
        target = cols[int(plan["sib_target"][r])]
        rows_targets.setdefault(s, set()).add(target)
        assert offset[lo + int(plan["sib_target"][r])] == 0.0  # a target's logit is never corrected
    for s, targets in rows_targets.items():
        lo, hi = int(ptr[s]), int(ptr[s + 1])
        cols = out_rows[table[lo:hi].long()].tolist()
        if set(cols) <= top_cols and len(top_cols) > 50:  # the wide group: sampled
            assert len(cols) == 40 and targets <= set(cols)
            others = len(top_cols) - len(targets)
            drawn = 40 - len(targets)
            corr = offset[lo:hi][[c not in targets for c in cols]]
            torch.testing.assert_close(corr, torch.full_like(corr, float(np.log(others / drawn))))
            assert (offset[lo:hi][[c in targets for c in cols]] == 0).all()
        else:  # a narrow group: every member, no correction
            assert (offset[lo:hi] == 0).all()
            g = int(col_group[cols[0]])
            assert sorted(cols) == sorted(groups.group_cols[groups.group_ptr[g]:groups.group_ptr[g + 1]].tolist())


@needs_triton
@pytest.mark.parametrize("stop, semantics, level", [(True, "terminal", 0.1), (False, "partial", 0.0)])
def test_a_sampled_step_equals_the_dense_reference_of_its_plan(stop, semantics, level):
    from hiclass_parallel.estimators.networks.engines.device._step import DeviceStep

    tree = _wide_tree(3)
    torch.manual_seed(3)
    module = SparseMLP(30, n_outputs(tree, "sibling", stop), hidden_units=8).to(DEVICE)
    with torch.no_grad():
        module.head.bias.weight.normal_()
    criterion = PathLocalCrossEntropy(tree, stop=stop, semantics=semantics, level_contrast=level).to(DEVICE)
    module.train()
    criterion.train()
    step = DeviceStep(module, criterion, _optimizer(module), batch_rows=16, softmax_sample=(50, 24))
    rng = np.random.default_rng(4)
    X = sparse_rows(16, 30, density=0.2, seed=4)
    y = rng.integers(-1, tree.n_classes, 16)
    seed = step.draw_seed()
    assert seed is not None
    plan = step.planner(X, y, seed=seed)
    assert (plan["sib_offset"] > 0).any()  # some candidates were drawn
    loss, grads = _plan_reference(module, X, plan)
    work = step.forward_backward(plan.to(DEVICE))
    assert float(work["loss"]) == pytest.approx(loss, rel=1e-5, abs=1e-6)
    out_rows = plan["out_rows"][plan["out_rows"] >= 0]
    in_rows = plan["in_rows"][plan["in_rows"] >= 0]
    g_out = torch.zeros_like(grads["head.weight.weight"])
    g_out[out_rows] = work["g_out"].cpu()[:out_rows.numel()]
    torch.testing.assert_close(g_out, grads["head.weight.weight"], rtol=1e-4, atol=1e-6)
    g_bout = torch.zeros_like(grads["head.bias.weight"][:, 0])
    g_bout[out_rows] = work["g_bout"].cpu()[:out_rows.numel()]
    torch.testing.assert_close(g_bout, grads["head.bias.weight"][:, 0], rtol=1e-4, atol=1e-6)
    g_in = torch.zeros_like(grads["input.embedding.weight"])
    g_in[in_rows] = work["g_in"].cpu()[:in_rows.numel()]
    torch.testing.assert_close(g_in, grads["input.embedding.weight"], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(work["g_bin"].cpu(), grads["input.bias"], rtol=1e-4, atol=1e-6)


def test_the_configuration_samples_wide_groups_on_the_device_step_too():
    from hiclass_parallel.estimators.fitting._config import resolve_softmax_sample

    tree = _wide_tree(0, roots=300)
    limit, why = resolve_softmax_sample(100, "device", tree, True)
    assert limit == 100 and "sampled candidates" in why
    assert resolve_softmax_sample(100, "torch", tree, True)[0] == 0
